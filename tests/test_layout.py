"""The repository's package layout: namespaces, versions and the direction of dependencies.

The nox ``isolation`` session proves the same facts on real installs, one
package per fresh environment, and ``lint-imports`` (nox -s lint) checks the
imports themselves; these checks are the fast half that runs with the rest of
the suite and names the offending file.
"""

from __future__ import annotations

import ast
import fnmatch
import importlib
import importlib.metadata
import tomllib
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent

#: folder -> (distribution, import name)
PACKAGES = {
    "target": ("heron-target", "heron.target"),
    "hlo-ir": ("heron-hlo-ir", "heron.hlo"),
    "indexing": ("heron-indexing", "heron.indexing"),
    "partitioner": ("heron-partitioner", "heron.partitioner"),
    "emitters-core": ("heron-emitters-core", "heron.emitters"),
    "emitter-plugins": ("heron-emitter-plugins", "heron.plugins"),
    "compiler": ("heron-compiler", "heron.compiler"),
    "runtime-core": ("heron-runtime-core", "heron.runtime.core"),
    "runtime-interpreter": ("heron-runtime-interpreter", "heron.runtime.interpreter"),
    "runtime-cuda": ("heron-runtime-cuda", "heron.runtime.cuda"),
    "runtime-rocm": ("heron-runtime-rocm", "heron.runtime.rocm"),
    "xla-compare": ("heron-xla-compare", "heron.xla_compare"),
    "jax": ("heron-jax", "heron.jax"),
    "report": ("heron-report", "heron.report"),
}
#: The meta distribution's own packages (src/heron).
META_IMPORTS = ("heron.cli", "heron.harness")
RUNTIMES = ("runtime-interpreter", "runtime-cuda", "runtime-rocm")
#: Distributions only the test suite installs: no shipped distribution may require them.
TEST_ONLY = {"heron-test-support": "tests/support", "heron-example-plugin": "tests/plugin_fixture"}
#: Packages that have no ``__version__`` attribute yet (the distribution version is still
#: checked): heron.hlo predates the rule; the other two came with issue 12's move.
NO_VERSION_ATTRIBUTE = {"hlo-ir"}

#: The heron distributions each one may depend on (ARCHITECTURE.md: hlo-ir <- indexing
#: <- partitioner <- emitters-core <- emitter-plugins; runtime-core needs hlo-ir only;
#: heron-target, the device description, is the leaf any of them may read;
#: a runtime package needs runtime-core, never the compiler side; the compiler needs
#: emitters-core and runtime-core, never a plugin or a particular runtime).
_ALLOWED_BESIDE_THE_TARGET = {
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
    "heron-compiler": {
        "heron-hlo-ir",
        "heron-indexing",
        "heron-partitioner",
        "heron-emitters-core",
        "heron-runtime-core",
    },
    "heron-runtime-core": {"heron-hlo-ir"},
    "heron-runtime-interpreter": {"heron-hlo-ir", "heron-runtime-core"},
    "heron-runtime-cuda": {"heron-hlo-ir", "heron-runtime-core"},
    "heron-runtime-rocm": {"heron-hlo-ir", "heron-runtime-core"},
    # heron xla: heron's compiler and CUDA backend beside XLA:GPU (which runs in a
    # subprocess, installed by the meta distribution's extra heron[xla]).
    "heron-xla-compare": {"heron-hlo-ir", "heron-compiler", "heron-runtime-cuda"},
    # heron.jax: jax lowers, the compiler compiles, the interpreter is the device every
    # machine has (GPU runtimes are found through entry points, never imported).
    "heron-jax": {
        "heron-hlo-ir",
        "heron-compiler",
        "heron-runtime-core",
        "heron-runtime-interpreter",
    },
    # heron report: the compiler's compile of a module, read off and drawn (the XLA
    # comparison and PTX statistics are used only when their packages are installed).
    "heron-report": {
        "heron-hlo-ir",
        "heron-indexing",
        "heron-partitioner",
        "heron-emitters-core",
        "heron-emitter-plugins",
        "heron-compiler",
        "heron-runtime-core",
        "heron-runtime-interpreter",
    },
}
#: Every distribution may read the Target; the Target reads none of them.
ALLOWED = {"heron-target": set()} | {
    dist: {*allowed, "heron-target"} for dist, allowed in _ALLOWED_BESIDE_THE_TARGET.items()
}
#: Distributions the meta distribution installs only through an extra.
EXTRA_ONLY = {"heron-runtime-cuda", "heron-runtime-rocm", "heron-xla-compare", "heron-jax"}
#: What a runtime's [compile] extra may add: the shared gpu.module lowering and the
#: heron_gpu dialect live in emitters-core; never the compiler or the plugins.
ALLOWED_IN_COMPILE_EXTRA = {"heron-emitters-core"}


def _pyproject(folder: Path) -> dict:
    return tomllib.loads((folder / "pyproject.toml").read_text())["project"]


def _requirement_name(requirement: str) -> str:
    for stop in "=<>!~[; ":
        requirement = requirement.split(stop, 1)[0]
    return requirement.strip().lower()


#: Extras that bring a vendor library a runtime's device side calls when it is there
#: (and works without): cuDNN for the CUDA runtime's convolutions.
LIBRARY_EXTRAS = {("runtime-cuda", "cudnn")}


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
    for extra, requirements in project.get("optional-dependencies", {}).items():
        names = {_requirement_name(r) for r in requirements if r.startswith("heron")}
        if (folder, extra) in LIBRARY_EXTRAS:  # a vendor library the device side may call
            assert names == set(), f"{dist}[{extra}] is a vendor library's, not heron's"
            continue
        assert extra == "compile" and folder in RUNTIMES, (
            f"{dist}: only a runtime package has an extra, [compile] (got [{extra}])"
        )
        assert names <= ALLOWED_IN_COMPILE_EXTRA, f"{dist}[compile] must not need {names}"


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
    if folder not in NO_VERSION_ATTRIBUTE or hasattr(module, "__version__"):
        assert module.__version__ == "0.1.0"
    assert module.__doc__ and len(module.__doc__) > 100
    expected = ROOT / "packages" / folder / "src" / Path(*import_name.split("."))
    assert Path(module.__file__).resolve().parent == expected


def test_runtime_namespace_spans_four_distributions():
    import heron.runtime

    assert getattr(heron.runtime, "__file__", None) is None  # a namespace, not a package
    portions = {Path(p).resolve() for p in heron.runtime.__path__}
    for folder in ("runtime-core", *RUNTIMES):
        assert ROOT / "packages" / folder / "src" / "heron" / "runtime" in portions


def test_meta_distribution_pulls_the_core_packages():
    project = _pyproject(ROOT)
    names = {_requirement_name(r) for r in project["dependencies"]}
    core = {d for d, _ in PACKAGES.values()} - EXTRA_ONLY
    assert core <= names
    assert names.isdisjoint(EXTRA_ONLY)
    extras = project["optional-dependencies"]
    assert set(extras) == {"cuda", "rocm", "xla", "jax"}
    assert extras["jax"] == ["heron-jax==0.1.0"]
    assert extras["cuda"] == ["heron-runtime-cuda==0.1.0"]
    assert extras["rocm"] == ["heron-runtime-rocm==0.1.0"]
    # heron[xla]: the comparison package, and XLA:GPU itself (jaxlib, the PJRT plugin).
    xla = {_requirement_name(r): r for r in extras["xla"]}
    assert xla["heron-xla-compare"] == "heron-xla-compare==0.1.0"
    assert {"jaxlib", "jax-cuda13-pjrt", "nvidia-cuda-nvcc"} <= set(xla)
    assert project["scripts"] == {"heron": "heron.cli.main:main"}


def _modules_under(src: Path, import_name: str) -> set[str]:
    """The dotted names of the package ``import_name`` and all its modules, from the files."""
    modules = set()
    for path in src.joinpath(*import_name.split(".")).rglob("*.py"):
        parts = path.relative_to(src).with_suffix("").parts
        modules.add(".".join(parts[:-1] if parts[-1] == "__init__" else parts))
    return modules


def _shipped_files(root: Path) -> list[Path]:
    return [p for p in root.rglob("*") if p.is_file() and "__pycache__" not in p.parts]


def test_each_wheel_ships_only_its_own_package():
    """Every wheel packs its whole src/heron: a file beside the package's own directory
    would ship in a second distribution (two wheels owning one path)."""
    strays = []
    for folder, (_, import_name) in PACKAGES.items():
        heron = ROOT / "packages" / folder / "src" / "heron"
        own = heron.joinpath(*import_name.split(".")[1:])
        strays += [p for p in _shipped_files(heron) if own not in p.parents]
    meta = ROOT / "src" / "heron"
    own = {meta / name.split(".")[1] for name in META_IMPORTS}
    strays += [p for p in _shipped_files(meta) if not own & set(p.parents)]
    assert [str(p.relative_to(ROOT)) for p in strays] == []


def test_no_shipped_package_holds_test_code():
    """Test aids live in tests/support (heron-test-support), which users never install;
    a package's own tests live in packages/<folder>/tests, outside its wheel."""
    roots = [ROOT / "src"] + [ROOT / "packages" / f / "src" for f in PACKAGES]
    offenders = [
        str(path.relative_to(ROOT))
        for root in roots
        for path in root.rglob("*")
        if path.name in ("testing", "testing.py", "tests", "conftest.py")
        or path.name.startswith("test_")
    ]
    assert offenders == []


def test_test_aids_are_required_by_no_shipped_distribution():
    for dist, folder in TEST_ONLY.items():
        assert _pyproject(ROOT / folder)["name"] == dist
    for folder in [ROOT, *(ROOT / "packages" / f for f in PACKAGES)]:
        project = _pyproject(folder)
        requirements = list(project.get("dependencies", []))
        for extra in project.get("optional-dependencies", {}).values():
            requirements += extra
        required = {_requirement_name(r) for r in requirements}
        assert required.isdisjoint(TEST_ONLY), (
            f"{project['name']} requires {required & set(TEST_ONLY)}"
        )


def _importlinter() -> dict:
    return tomllib.loads((ROOT / "pyproject.toml").read_text())["tool"]["importlinter"]


def _contract(contract_id: str) -> dict:
    (contract,) = [c for c in _importlinter()["contracts"] if c.get("id") == contract_id]
    return contract


def test_import_contracts_name_every_package():
    """lint-imports checks only the root packages it is given, and the layers contract
    only the packages it lists: a new package must join both."""
    roots = {name for _, name in PACKAGES.values()} | set(META_IMPORTS)
    assert set(_importlinter()["root_packages"]) == roots
    layers = _contract("layers")["layers"]
    listed = [m.strip() for layer in layers for m in layer.replace(":", "|").split("|")]
    assert sorted(listed) == sorted(roots)


def _compile_side_patterns() -> list[str]:
    """noxfile.py's COMPILE_SIDE_MODULES, the one definition of a runtime's compile side."""
    for node in ast.parse((ROOT / "noxfile.py").read_text()).body:
        if isinstance(node, ast.Assign) and any(
            getattr(target, "id", None) == "COMPILE_SIDE_MODULES" for target in node.targets
        ):
            return ast.literal_eval(node.value)
    raise AssertionError("noxfile.py defines no COMPILE_SIDE_MODULES")


@pytest.mark.parametrize("folder", ["runtime-core", *RUNTIMES])
def test_every_runtime_module_is_on_one_side(folder):
    """The device-side contracts list modules by name (a wildcard cannot leave the
    compile side out), so each new runtime module must be put on one side: in the
    `runtime-device-side` contract's sources, or named as compile side (capture,
    compiler*, stages: noxfile.py's COMPILE_SIDE_MODULES) and served by the
    package's [compile] extra."""
    _, import_name = PACKAGES[folder]
    modules = _modules_under(ROOT / "packages" / folder / "src", import_name)
    compile_side = {
        m for m in modules if any(fnmatch.fnmatchcase(m, p) for p in _compile_side_patterns())
    }
    packages = set(_contract("runtime-device-side")["source_modules"])
    package_modules = _contract("runtime-package-modules")
    device_side = {
        m
        for m in modules
        if m in package_modules["source_modules"]
        or any(m == p or m.startswith(p + ".") for p in packages)
    }
    assert sorted(compile_side & device_side) == [], "compile side listed as device side"
    assert sorted(modules - compile_side - device_side) == [], "a module on neither side"
    if folder == "runtime-core":
        assert compile_side == set() and import_name in packages
