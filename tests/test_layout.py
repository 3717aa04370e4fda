"""The repository's package layout: namespaces, versions and the direction of dependencies.

The nox ``isolation`` session proves the same facts on real installs, one
package per fresh environment; these checks are the fast half that runs with
the rest of the suite and names the offending file.
"""

from __future__ import annotations

import importlib
import importlib.metadata
import tomllib
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent

#: folder -> (distribution, import name)
PACKAGES = {
    "hlo-ir": ("heron-hlo-ir", "heron.hlo"),
    "indexing": ("heron-indexing", "heron.indexing"),
    "partitioner": ("heron-partitioner", "heron.partitioner"),
    "emitters-core": ("heron-emitters-core", "heron.emitters"),
    "emitter-plugins": ("heron-emitter-plugins", "heron.plugins"),
    "runtime-core": ("heron-runtime-core", "heron.runtime.core"),
    "runtime-cuda": ("heron-runtime-cuda", "heron.runtime.cuda"),
    "runtime-rocm": ("heron-runtime-rocm", "heron.runtime.rocm"),
}

#: The heron distributions each one may depend on (ARCHITECTURE.md: hlo-ir <- indexing
#: <- partitioner <- emitters-core <- emitter-plugins; runtime-core needs hlo-ir only;
#: a runtime package needs runtime-core, never the compiler side).
ALLOWED = {
    "heron-hlo-ir": set(),
    "heron-indexing": {"heron-hlo-ir"},
    "heron-partitioner": {"heron-hlo-ir", "heron-indexing"},
    "heron-emitters-core": {"heron-hlo-ir", "heron-indexing", "heron-partitioner"},
    "heron-emitter-plugins": {
        "heron-hlo-ir",
        "heron-indexing",
        "heron-partitioner",
        "heron-emitters-core",
    },
    "heron-runtime-core": {"heron-hlo-ir"},
    "heron-runtime-cuda": {"heron-hlo-ir", "heron-runtime-core"},
    "heron-runtime-rocm": {"heron-hlo-ir", "heron-runtime-core"},
}


def _pyproject(folder: Path) -> dict:
    return tomllib.loads((folder / "pyproject.toml").read_text())["project"]


def _requirement_name(requirement: str) -> str:
    for stop in "=<>!~[; ":
        requirement = requirement.split(stop, 1)[0]
    return requirement.strip().lower()


def test_every_package_folder_is_known():
    assert sorted(p.name for p in (ROOT / "packages").iterdir() if p.is_dir()) == sorted(PACKAGES)


@pytest.mark.parametrize("folder", sorted(PACKAGES))
def test_internal_dependencies_point_one_way_and_are_pinned(folder):
    dist, _ = PACKAGES[folder]
    project = _pyproject(ROOT / "packages" / folder)
    assert project["name"] == dist
    assert project["version"] == "0.1.0"
    internal = [r for r in project.get("dependencies", []) if r.startswith("heron")]
    names = {_requirement_name(r) for r in internal}
    assert names <= ALLOWED[dist], f"{dist} must not depend on {names - ALLOWED[dist]}"
    for requirement in internal:
        assert requirement.replace(" ", "").endswith("==0.1.0"), requirement
    if dist.startswith("heron-runtime-"):
        compiler_side = [
            r
            for r in project.get("dependencies", [])
            if _requirement_name(r).startswith(("llvmlite", "xtc-", "mlir"))
        ]
        assert compiler_side == [], f"{dist} must run without MLIR or llvmlite"


def test_no_package_claims_a_shared_namespace():
    """heron and heron.runtime are PEP 420 namespaces: an __init__.py there would hide
    the other distributions' halves (editable installs put each src/ on sys.path)."""
    roots = [ROOT / "src"] + [ROOT / "packages" / f / "src" for f in PACKAGES]
    offenders = [
        str(path.relative_to(ROOT))
        for root in roots
        for path in (root / "heron" / "__init__.py", root / "heron" / "runtime" / "__init__.py")
        if path.exists()
    ]
    assert offenders == []


@pytest.mark.parametrize("folder", sorted(PACKAGES))
def test_import_name_and_version(folder):
    dist, import_name = PACKAGES[folder]
    module = importlib.import_module(import_name)
    assert importlib.metadata.version(dist) == "0.1.0"
    # heron.hlo predates this rule; every package started from the skeleton has one.
    if folder != "hlo-ir" or hasattr(module, "__version__"):
        assert module.__version__ == "0.1.0"
    assert module.__doc__ and len(module.__doc__) > 100
    expected = ROOT / "packages" / folder / "src" / Path(*import_name.split("."))
    assert Path(module.__file__).resolve().parent == expected


def test_runtime_namespace_spans_three_distributions():
    import heron.runtime

    assert getattr(heron.runtime, "__file__", None) is None  # a namespace, not a package
    portions = {Path(p).resolve() for p in heron.runtime.__path__}
    for folder in ("runtime-core", "runtime-cuda", "runtime-rocm"):
        assert ROOT / "packages" / folder / "src" / "heron" / "runtime" in portions


def test_meta_distribution_pulls_the_core_packages():
    project = _pyproject(ROOT)
    names = {_requirement_name(r) for r in project["dependencies"]}
    core = {d for d, _ in PACKAGES.values()} - {"heron-runtime-cuda", "heron-runtime-rocm"}
    assert core <= names
    extras = project["optional-dependencies"]
    assert extras == {"cuda": ["heron-runtime-cuda==0.1.0"], "rocm": ["heron-runtime-rocm==0.1.0"]}
    assert project["scripts"] == {"heron": "heron.cli.main:main"}
