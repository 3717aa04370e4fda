"""Every program of a corpus as an executable artefact, run by ``heron-run`` where only the
runtime is installed (issue 16's acceptance).

    python programs/artefacts.py build DIR [--only NAME ...]   # with the compiler (nox -s tests)
    python programs/artefacts.py check DIR                      # runtime-only (nox -s runtime)

``--corpus models`` does the same for the model corpus (models/; default programs/).
``build`` (needs heron's compiler and the test aids) compiles each program's
``module.hlo`` for the h100 Target with interpreter kernel images (the
device every machine has), runs it once through the thunk executor on the
interpreter, checks the outputs against XLA:CPU's ``outputs.npz``
(``heron_test_support.programs.assert_close``), and writes ``DIR/NAME.heron``
and ``DIR/NAME.expected.npz`` (the executor's outputs, bit for bit). A
program of ``heron_test_support.programs.KNOWN_FAILURES`` (wrong or refused
today; the tests check that it still fails) is left out, saying why.

``check`` needs nothing but numpy and heron's runtime packages (an artefact whose
custom calls need a plugin that install lacks, jax's GPU solvers from heron-jax,
is skipped, saying which): for each
artefact it runs ``heron-run`` (its ``main``, the console script's function;
the installed ``heron-run`` command once, to show it is there) on the
program's ``inputs.npz`` three times with command buffers (``--repeat 3``,
which fails unless every repetition gives the same bytes) and once without,
and requires each output to equal the expected bytes, the kernel launches of
every run without command buffers to equal the kernel thunks it executed (with
them, see ``_report_problems``), and the peak device memory to equal the sum
of the artefact's allocations. It first makes sure the environment really is
runtime-only: MLIR, llvmlite and jax do not import.
"""

from __future__ import annotations

import argparse
import importlib.util
import json
import shutil
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import numpy as np

HERE = Path(__file__).resolve().parent
#: What a runtime-only install must not have (ARCHITECTURE.md).
COMPILER_SIDE = ("mlir", "llvmlite", "jax")


def program_names(corpus: Path) -> list[str]:
    """The programs of the corpus folder ``corpus``, in index order."""
    return [entry["name"] for entry in json.loads((corpus / "index.json").read_text())["programs"]]


def build(corpus: Path, folder: Path, names: list[str]) -> int:
    from heron_test_support.programs import KNOWN_FAILURES, CorpusProgram

    from heron.compiler import Target
    from heron.compiler.executable import compile_program
    from heron.hlo.npz_io import save_outputs
    from heron.runtime.core.executor import load_executable
    from heron.runtime.interpreter import InterpreterDevice

    folder.mkdir(parents=True, exist_ok=True)
    target = Target.preset("h100")
    for name in names:
        program = CorpusProgram(corpus.name, name)
        known = KNOWN_FAILURES.get(program.id)
        if known is not None:
            print(f"{name}: left out, a known failure ({known.reason})", flush=True)
            continue
        start = time.perf_counter()
        module = program.module()
        artefact = compile_program(module, target, ("interpreter",)).artefact
        executable = load_executable(artefact, InterpreterDevice(warp_size=target.warp_size))
        outputs = executable.run(program.inputs(module))
        program.assert_outputs(outputs, "the artefact")
        artefact.save(folder / f"{name}.heron")
        save_outputs(folder / f"{name}.expected.npz", [np.asarray(o) for o in outputs])
        print(f"{name}: {time.perf_counter() - start:.1f} s", flush=True)
    return 0


def _runtime_only() -> None:
    present = [name for name in COMPILER_SIDE if importlib.util.find_spec(name) is not None]
    if present:
        raise SystemExit(f"not a runtime-only environment: {', '.join(present)} installed")


def check(corpus: Path, folder: Path) -> int:
    from heron.hlo.custom_calls.registry import default_custom_calls
    from heron.hlo.npz_io import load_outputs
    from heron.runtime.core.artefact import load
    from heron.runtime.core.heron_run import main as heron_run
    from heron.runtime.core.thunks import CustomCallThunk, walk

    _runtime_only()
    artefacts = sorted(folder.glob("*.heron"))
    if not artefacts:
        raise SystemExit(f"{folder}: no artefacts (run 'programs/artefacts.py build {folder}')")
    # This environment's console script (beside its python), not one elsewhere on PATH.
    command = shutil.which("heron-run", path=str(Path(sys.executable).parent))
    if command is None:
        raise SystemExit(f"heron-run is not installed beside {sys.executable}")
    first = artefacts[0]
    subprocess.run([command, str(first), "--describe"], check=True, stdout=subprocess.DEVNULL)
    failures, skipped = [], []
    installed = default_custom_calls()
    with tempfile.TemporaryDirectory() as scratch:
        for path in artefacts:
            name = path.name.removesuffix(".heron")
            missing = sorted(
                {t.target for t in walk(load(path).program) if isinstance(t, CustomCallThunk)}
                - set(installed.targets())
            )
            if missing:
                # jax's GPU solvers (cuSOLVER's calls on the host) come with heron-jax, which a
                # runtime-only install lacks: heron-run refuses them by name, as it should
                skipped.append(
                    f"{name}: its custom calls {', '.join(missing)} need a plugin"
                    " this runtime-only install lacks (heron-jax's host solvers)"
                )
                continue
            expected = load_outputs(folder / f"{name}.expected.npz")
            allocation_bytes = sum(a.size for a in load(path).allocations)
            kernels = None  # kernel thunks one run executes, from the run without buffers
            for variant in (["--no-command-buffers"], []):
                out = Path(scratch) / f"{name}.out.npz"
                report_path = Path(scratch) / f"{name}.json"
                arguments = [str(path), "--inputs", str(corpus / name / "inputs.npz")]
                arguments += ["--output", str(out), "--report-json", str(report_path)]
                arguments += ["--backend", "interpreter", "--repeat", "3", *variant]
                code = heron_run(arguments)
                label = f"{name}{' ' + variant[0] if variant else ''}"
                if code != 0:
                    failures.append(f"{label}: heron-run exited {code}")
                    continue
                report = json.loads(report_path.read_text())
                if kernels is None:
                    kernels = [
                        sum(t["executions"] for t in run["thunks"] if t["kind"] == "kernel")
                        for run in report["runs"]
                    ]
                problems = _compare(load_outputs(out), expected)
                problems += _report_problems(report, allocation_bytes, kernels)
                failures += [f"{label}: {problem}" for problem in problems]
            print(f"{name}: ok" if not any(f.startswith(name) for f in failures) else name)
    for reason in skipped:
        print(f"SKIPPED {reason}")
    for failure in failures:
        print(f"FAILED {failure}", file=sys.stderr)
    print(f"{len(artefacts)} artefacts, {len(skipped)} skipped, {len(failures)} failures")
    return 1 if failures else 0


def _compare(got: list[np.ndarray], expected: list[np.ndarray]) -> list[str]:
    if len(got) != len(expected):
        return [f"{len(got)} outputs, expected {len(expected)}"]
    return [
        f"out{i} differs from the compiling environment's bytes"
        for i, (g, e) in enumerate(zip(got, expected, strict=True))
        if g.dtype != e.dtype or g.shape != e.shape or g.tobytes() != e.tobytes()
    ]


def _report_problems(report: dict, allocation_bytes: int, kernels: list[int]) -> list[str]:
    """Peak memory is the allocations' sum, and the kernels launched match the kernel
    thunks executed: exactly, per run, without command buffers; with them at least as
    many (a loop recorded as a conditional node evaluates its condition kernels every
    iteration on the device, where the host, knowing the trip count, skips them)."""
    problems = []
    if report["peak_device_bytes"] != allocation_bytes:
        problems.append(
            f"peak device memory {report['peak_device_bytes']} != the allocations'"
            f" {allocation_bytes}"
        )
    launched = [run["kernel_launches"] for run in report["runs"]]
    if report["command_buffers"]:
        if len(set(launched)) != 1 or launched[0] < kernels[0]:
            problems.append(f"kernel launches per run {launched}, kernel thunks {kernels}")
    elif launched != kernels:
        problems.append(f"kernel launches per run {launched}, kernel thunks executed {kernels}")
    return problems


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("action", choices=("build", "check"))
    parser.add_argument("folder", type=Path)
    parser.add_argument("--only", nargs="+", metavar="NAME", help="build only these programs")
    parser.add_argument(
        "--corpus", type=Path, default=HERE, help="the corpus folder (default programs/)"
    )
    args = parser.parse_args(argv)
    if args.action == "build":
        names = program_names(args.corpus)
        unknown = sorted(set(args.only or ()) - set(names))
        if unknown:
            parser.error(f"unknown programs: {', '.join(unknown)}")
        return build(args.corpus.resolve(), args.folder, args.only or names)
    return check(args.corpus, args.folder)


if __name__ == "__main__":
    sys.exit(main())
