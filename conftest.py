"""Shared pytest setup for every test in the repository (packages/*/tests and tests/).

It lives at the repository root, not in tests/, so that the package test
suites get it too. It provides:

- ``corpus_dir``: the XLA HLO corpus (``$HERON_CORPUS``, else
  ``../shared/corpus/xla`` beside the repository, where CI puts it). A missing
  corpus FAILS the tests that ask for it: an acceptance suite that silently
  does not run is worse than a red one.
- ``corpus_file``: a test argument that parametrizes the test over every
  ``.hlo`` file of the corpus.
- ``jax_32_bit``: jax with x64 off for a test (jax's flag is a global that other
  suites in the same process may set).
- the ``gpu`` / ``cuda`` / ``rocm`` markers: such a test is skipped, with the
  driver's own reason ("no CUDA driver found (cuda.bindings.driver.cuInit
  failed: ...)"), when this machine cannot run it.
- ``HERON_CACHE_DIR`` and ``HERON_KERNEL_STORE``: heron.jax's compile cache and the
  library kernels' store go to temporary folders of the test session unless the
  caller chose them, so that the test command writes nothing under the user's home
  directory; the folders go when the session ends.
"""

from __future__ import annotations

import functools
import os
import shutil
import tempfile
from pathlib import Path

import pytest

REPO_ROOT = Path(__file__).resolve().parent


#: The temporary folders this process made for the session, removed when it ends
#: (xdist's workers inherit the variables, so only the controller makes and removes them).
_SESSION_FOLDERS: list[str] = []


def pytest_configure(config: pytest.Config) -> None:
    for variable, prefix in (
        ("HERON_CACHE_DIR", "heron-cache-"),
        ("HERON_KERNEL_STORE", "heron-kernels-"),
    ):
        if not os.environ.get(variable, "").strip():
            folder = tempfile.mkdtemp(prefix=prefix)
            _SESSION_FOLDERS.append(folder)
            os.environ[variable] = folder


def pytest_unconfigure(config: pytest.Config) -> None:
    while _SESSION_FOLDERS:
        shutil.rmtree(_SESSION_FOLDERS.pop(), ignore_errors=True)


DEFAULT_CORPUS = REPO_ROOT.parent / "shared" / "corpus" / "xla"


def _corpus_location() -> Path:
    override = os.environ.get("HERON_CORPUS")
    return Path(override).resolve() if override else DEFAULT_CORPUS


def find_corpus() -> Path:
    """The corpus directory; raises ``pytest.fail`` with the fix when it is missing."""
    location = _corpus_location()
    if not location.is_dir():
        pytest.fail(
            f"heron's HLO corpus is missing: {location} is not a directory. Clone the shared/"
            " folder beside the repository (CI does) or set HERON_CORPUS to the corpus's path.",
            pytrace=False,
        )
    if not any(location.rglob("*.hlo")):
        pytest.fail(f"heron's HLO corpus at {location} holds no .hlo file", pytrace=False)
    return location


@pytest.fixture(scope="session")
def corpus_dir() -> Path:
    return find_corpus()


#: Corpus folders whose files the loop emitter must handle (the hero named by the folder).
LOOP_HERO_FOLDERS = ("common/loop", "gpu/convert")


@pytest.fixture
def jax_32_bit():
    """jax with ``jax_enable_x64`` off for the test, whatever other suites in the same
    process set (a global): ``pytestmark = pytest.mark.usefixtures("jax_32_bit")``."""
    import jax

    previous = jax.config.jax_enable_x64
    jax.config.update("jax_enable_x64", False)
    yield
    jax.config.update("jax_enable_x64", previous)


@pytest.fixture
def loop_hero_folders() -> tuple[str, ...]:
    return LOOP_HERO_FOLDERS


def pytest_generate_tests(metafunc: pytest.Metafunc) -> None:
    if "loop_corpus_file" in metafunc.fixturenames:
        location = find_corpus()
        files = [f for d in LOOP_HERO_FOLDERS for f in sorted((location / d).glob("*.hlo"))]
        metafunc.parametrize(
            "loop_corpus_file", files, ids=[str(f.relative_to(location)) for f in files]
        )
    if "corpus_file" in metafunc.fixturenames:
        location = find_corpus()
        files = sorted(location.rglob("*.hlo"))
        metafunc.parametrize(
            "corpus_file", files, ids=[str(f.relative_to(location)) for f in files]
        )


def pytest_report_header(config: pytest.Config) -> str:
    location = _corpus_location()
    state = "" if location.is_dir() else " (MISSING)"
    return f"heron corpus: {location}{state}"


# -- GPU markers ---------------------------------------------------------------


@functools.cache
def _cuda_status() -> tuple[bool, str]:
    try:
        from heron.runtime.cuda.driver import probe
    except ImportError as exc:
        return False, f"heron-runtime-cuda is not installed ({exc})"
    status = probe()
    return status.available, status.reason


@functools.cache
def _rocm_status() -> tuple[bool, str]:
    try:
        from heron.runtime.rocm.driver import probe
    except ImportError as exc:
        return False, f"heron-runtime-rocm is not installed ({exc})"
    status = probe()
    return status.available, status.reason


def pytest_runtest_setup(item: pytest.Item) -> None:
    if item.get_closest_marker("cuda") is not None:
        available, reason = _cuda_status()
        if not available:
            pytest.skip(f"needs CUDA: {reason}")
    if item.get_closest_marker("rocm") is not None:
        available, reason = _rocm_status()
        if not available:
            pytest.skip(f"needs ROCm: {reason}")
    if item.get_closest_marker("gpu") is not None:
        statuses = [_cuda_status(), _rocm_status()]
        if not any(available for available, _ in statuses):
            pytest.skip("needs a GPU: " + "; ".join(reason for _, reason in statuses))
