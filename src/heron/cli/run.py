"""``heron run FILE.hlo|OUT.heron``: run a module's entry computation on a backend.

Given an executable artefact (``heron compile --executable``: a file that
starts as a zip archive does), ``heron run`` runs it through the thunk
executor exactly as the runtime-only ``heron-run`` does
(:func:`heron.runtime.core.heron_run.main`, the one implementation: verified
first, then ``--backend``, ``--inputs``, ``--output``, ``--repeat``,
``--no-command-buffers``, ``--report-json``); without ``--inputs`` the
arguments are drawn at random (``--seed``) for the artefact's optimized
module's parameters. ``--check``, ``--target``/``--arch`` and ``--backend
reference`` need the HLO and are refused for an artefact. What follows is
about an HLO file.

Backends:

- ``auto`` (the default): CUDA, then ROCm, then the interpreter, the first
  that is available here; the report says which was taken and why each one
  before it was not (its availability reason).
- ``interpreter``, ``cuda``, ``rocm``: that device; it must be available. The
  module is compiled into an executable in memory, as ``heron compile
  --executable`` compiles it (the GPU pipeline, copy insertion, the schedule,
  buffer assignment, thunks; kernel images for the backend that runs), and
  run through the thunk executor as ``heron run OUT.heron`` runs an artefact
  (:func:`heron.compiler.program_run.load_program`, the one way heron runs a
  module; while loops and conditionals included; ``--repeat``,
  ``--no-command-buffers``, ``--report-json`` as there). The report has a
  line per kernel: the first fusion compiled to it, its emitter, launch,
  compile time and the device time of its launches from the host (a kernel
  replayed inside a command buffer is timed with the command buffer, whose
  line follows; ``--no-command-buffers`` times each kernel).
- ``reference``: heron's HLO reference evaluator (numpy on the CPU).

``--target NAME`` / ``--arch ARCH`` name the device the kernels are compiled
for (default h100): the GPU to run on, or the one the interpreter emulates
(``--backend interpreter --target mi300x`` runs warps of 64). With a target,
``auto`` considers that target's backend, then the interpreter.

Arguments come from an .npz file (``arg0``, ``arg1``, ... in parameter order)
or, without one, are drawn at random from a seed, so that a run is
reproducible. Results go to an .npz file (``out0``, ``out1``, ... over the
flattened result tuple); the element-type convention for both files is in
``heron.hlo.npz_io``.

``--check`` also evaluates the module with the reference evaluator and compares
each output under the tolerance ``heron check`` uses, decided by the one
function both call (:func:`heron.harness.tolerance.output_tolerance`):
bitwise for exact ops, ulp bounds for outputs depending on transcendental ops,
reassociation bounds for float reductions that a reduction kernel sums in its
own order, and the file's RUN-line ``--abs_error_bound`` /
``--rel_error_bound`` where it has one. Each output is judged as ``heron
check`` judges the fusion that computes it, on the same values; in a chain of
kernels, what the kernels before it may change (their ulps, a reordered sum, a dot)
is added. Any element outside the tolerance makes the command exit 1; the
report names the output, how many elements differ, the first, both values and
their distance.
"""

from __future__ import annotations

import argparse
import time
from pathlib import Path
from typing import TYPE_CHECKING

import attrs
import numpy as np

from heron.cli.common import (
    CommandError,
    add_target_arguments,
    atomic_output,
    check_output_file,
    load_module,
    refuse_tiled_layouts,
    resolve_target,
    write_atomically,
)
from heron.harness.agreement import bitwise_agreements, compare, output_tolerances, type_name
from heron.runtime.core.registry import DEVICE_BACKENDS, BackendChoice

if TYPE_CHECKING:
    from heron.compiler.program_run import KernelRecord
    from heron.target import Target

BACKENDS = ("auto", "interpreter", "reference", "cuda", "rocm")
PREVIEW = 4
EXIT_DISAGREEMENT = 1


def register(subparsers: argparse._SubParsersAction) -> None:
    parser = subparsers.add_parser(
        "run",
        help="run an HLO module's entry computation on a device or the reference evaluator",
        description=(
            "Run the entry computation of an HLO module (for a file without ENTRY, the"
            " fusion under test) and print a report: the backend, each kernel's emitter,"
            " launch and times, and a summary of the results."
        ),
    )
    parser.add_argument(
        "file",
        metavar="FILE.hlo|OUT.heron|DUMP_DIR",
        help="HLO text, as XLA or JAX dump it, an XLA dump folder (its pre-optimization"
        " module), or an executable artefact (heron compile --executable)",
    )
    parser.add_argument(
        "--backend",
        default="auto",
        choices=BACKENDS,
        help="where to run: 'auto' (default: cuda, then rocm, then the interpreter,"
        " whichever is available first), a device backend by name, or 'reference'"
        " (heron's HLO reference evaluator)",
    )
    add_target_arguments(parser, "the kernels are compiled for (the interpreter emulates it)")
    parser.add_argument(
        "--inputs",
        metavar="IN.npz",
        help="arguments as arrays arg0, arg1, ... in parameter order (default: random)",
    )
    parser.add_argument(
        "--output", metavar="OUT.npz", help="write the results as out0, out1, ... to this file"
    )
    parser.add_argument(
        "--module",
        metavar="NAME",
        help="FILE is an XLA dump folder (--xla_dump_to) holding several modules: run this"
        " one (its number, 0004, or its name, jit_f)",
    )
    parser.add_argument(
        "--seed",
        type=int,
        default=None,
        help="seed of the random arguments used without --inputs (default 0)",
    )
    parser.add_argument(
        "--check",
        action="store_true",
        help="compare the results with the reference evaluator; exit 1 on disagreement"
        " (under heron check's tolerance: bitwise, ulp bounds for transcendental ops,"
        " reassociation bounds for reductions, the RUN line's error bounds)",
    )
    parser.add_argument(
        "--repeat",
        type=int,
        metavar="N",
        help="an artefact: run N times on the same inputs; the results must be identical",
    )
    parser.add_argument(
        "--no-command-buffers",
        action="store_true",
        help="an artefact: run every thunk from the host (no command buffers recorded)",
    )
    parser.add_argument(
        "--deterministic",
        action="store_true",
        help="compile no kernel whose result depends on the order its threads run (scatters"
        " that combine floats with atomics become sorted scatters, as XLA's"
        " --xla_gpu_deterministic_ops): the same bits every run",
    )
    parser.add_argument(
        "--report-json",
        metavar="PATH",
        help="an artefact: write the run report (per thunk, command buffers, peak device"
        " memory, totals) as JSON",
    )
    parser.set_defaults(handler=run)


#: What an executable artefact starts with (a zip archive's local header).
ARTEFACT_MAGIC = b"PK\x03\x04"


def is_artefact(path: str) -> bool:
    """Whether ``path`` is (or claims to be) an executable artefact rather than HLO text."""
    try:
        with open(path, "rb") as file:
            return file.read(len(ARTEFACT_MAGIC)) == ARTEFACT_MAGIC
    except OSError:
        return False


def run_artefact(args: argparse.Namespace) -> int:
    """``heron run OUT.heron``: ``heron-run``'s run, with random arguments when none are given."""
    import tempfile

    from heron.runtime.core import heron_run

    for option, given in (
        ("--check", args.check),
        ("--target", args.target),
        ("--arch", args.arch),
    ):
        if given:
            raise CommandError(
                f"{option} needs the HLO module; {args.file} is an executable artefact (its"
                " target is fixed when it is compiled)"
            )
    if args.backend == "reference":
        raise CommandError(
            f"--backend reference evaluates HLO; {args.file} is an executable artefact"
        )
    if args.inputs is not None and args.seed is not None:
        raise CommandError(
            "--seed only applies to random arguments; it makes no sense with --inputs"
        )
    argv = [args.file, "--backend", args.backend]
    for option, value in (
        ("--output", args.output),
        ("--repeat", args.repeat),
        ("--report-json", args.report_json),
    ):
        if value is not None:
            argv += [option, str(value)]
    if args.no_command_buffers:
        argv.append("--no-command-buffers")
    with tempfile.TemporaryDirectory(prefix="heron-run-") as scratch:
        if args.inputs is not None:
            argv += ["--inputs", args.inputs]
        else:
            argv += ["--inputs", _random_inputs(args.file, args.seed, Path(scratch))]
        return heron_run.main(argv)


def _random_inputs(path: str, seed: int | None, directory: Path) -> str:
    """Random arguments for the artefact's entry, as an .npz (``heron run``'s seeded draw)."""
    from heron.hlo.evaluator import random_arguments
    from heron.hlo.npz_io import save_inputs
    from heron.hlo.parser import parse_module
    from heron.runtime.core.artefact import ArtefactError, load

    try:
        artefact = load(path)
    except ArtefactError as error:
        raise CommandError(f"{path}: refused: {error}") from error
    if artefact.optimized_hlo is None:
        raise CommandError(
            f"{path} holds no optimized module to draw random arguments for; give --inputs"
        )
    module = parse_module(artefact.optimized_hlo)
    seed = 0 if seed is None else seed
    arguments = random_arguments(module, seed=seed)
    print(f"arguments: random, seed {seed}")
    inputs = directory / "inputs.npz"
    save_inputs(inputs, arguments)
    return str(inputs)


# -- choosing a backend ----------------------------------------------------------------


def choose_backend(requested: str, candidates: tuple[str, ...] = DEVICE_BACKENDS) -> BackendChoice:
    """The device backend for ``requested`` (``auto`` or a name); CommandError if unusable.

    ``auto`` takes the first available of ``candidates`` (the registry's rule,
    the one ``heron-run`` and ``heron.jax`` follow too).
    """
    from heron.runtime.core.registry import NoBackendError, default_backends

    try:
        return default_backends().choose(requested, candidates)
    except NoBackendError as error:
        raise CommandError(str(error)) from None


def _create_device(name: str, target):
    from heron.runtime.core.device import DeviceError
    from heron.runtime.core.registry import default_backends

    try:
        return default_backends().create_device(name, target)
    except DeviceError as exc:
        raise CommandError(f"backend '{name}': cannot open its device: {exc}") from exc


# -- the command ------------------------------------------------------------------------


def run(args: argparse.Namespace) -> int:
    if is_artefact(args.file):
        if args.deterministic:
            raise CommandError(
                "--deterministic is a compile option: an artefact's kernels are compiled"
                " already (heron compile --executable --deterministic)"
            )
        return run_artefact(args)
    if args.backend == "reference":
        for option, given in (
            ("--repeat", args.repeat is not None),
            ("--no-command-buffers", args.no_command_buffers),
            ("--report-json", args.report_json is not None),
            ("--deterministic", args.deterministic),
        ):
            if given:
                raise CommandError(
                    f"{option} applies to a device backend (the executable's run); the"
                    " reference evaluator runs no thunks"
                )
    if args.repeat is not None and args.repeat < 1:
        raise CommandError(f"--repeat must be at least 1, got {args.repeat}")
    if args.inputs is not None and args.seed is not None:
        raise CommandError(
            "--seed only applies to random arguments; it makes no sense with --inputs"
        )
    if args.check and args.backend == "reference":
        raise CommandError(
            "--check compares a device backend with the reference evaluator;"
            " it makes no sense with --backend reference"
        )
    module = load_module(args.file, module_name=args.module)
    given = _run_line_bounds(args.file) if args.check else None
    for option, path in (("--output", args.output), ("--report-json", args.report_json)):
        if path is not None:
            check_output_file(Path(path), option)
    arguments, source = _arguments(module, args)
    if args.backend == "reference":
        print(f"module {module.name}: entry {module.entry.name}, backend reference")
        _print_parameters(module, source)
        leaves, elapsed = _evaluate(module, arguments)
        _print_outputs(leaves)
        print(f"evaluated in {elapsed:.2f} s")
        ran = None
    else:
        leaves, ran = _run_on_device(module, arguments, source, args)
    if args.output is not None:
        from heron.hlo.npz_io import save_outputs

        with atomic_output(Path(args.output), "--output") as temporary:
            save_outputs(temporary, leaves)
        print(f"wrote {len(leaves)} output(s) to {args.output}")
    if args.check:
        expected, elapsed = _evaluate(module, arguments)
        print(f"check against the reference evaluator ({elapsed:.2f} s):")
        started = time.perf_counter()
        agreeing = bitwise_agreements(leaves, expected)
        tolerances = None
        if not all(agreeing) or len(leaves) != len(expected):
            tolerances = output_tolerances(
                ran.module,
                ran.reorders,
                arguments,
                given,
                tf32=ran.target.tf32,
                written=module,
                needed=[not agrees for agrees in agreeing],
            )
        agreed = print_agreement(leaves, expected, tolerances)
        _print_tolerance_time(time.perf_counter() - started)
        if not agreed:
            print("DISAGREE: results differ from the reference evaluator beyond the tolerance")
            return EXIT_DISAGREEMENT
        print("agree: every output within the tolerance")
    if ran is not None and not ran.identical:
        print("DISAGREE: the repeated runs' results differ")
        return EXIT_DISAGREEMENT
    return 0


def _print_tolerance_time(seconds: float) -> None:
    """The time the tolerance took where it is noticeable: its random roundings, error
    propagation and unrolled loops evaluate the reference again (58 s of a jax-galsim
    gradient's check, where the one evaluation the report named took 0.38 s)."""
    if seconds >= 1.0:
        print(f"  (the tolerance's own evaluations of the reference: {seconds:.2f} s)")


def _arguments(module, args: argparse.Namespace) -> tuple[list, str]:
    from heron.hlo.evaluator import random_arguments
    from heron.hlo.npz_io import load_inputs

    parameters = module.entry.parameters
    if args.inputs is not None:
        arguments = load_inputs(
            args.inputs, [p.shape for p in parameters], [p.name for p in parameters]
        )
        return arguments, f"from {args.inputs}"
    seed = 0 if args.seed is None else args.seed
    return random_arguments(module, seed=seed), f"random, seed {seed}"


def _evaluate(module, arguments) -> tuple[list, float]:
    from heron.hlo.evaluator import evaluate_module, flatten_literal

    start = time.perf_counter()
    result = evaluate_module(module, arguments)
    return flatten_literal(result), time.perf_counter() - start


def _choose_target(args: argparse.Namespace) -> tuple[BackendChoice, object]:
    """The backend that runs (``auto`` resolved) and the Target its kernels are compiled for."""
    requested = args.backend
    named = args.target is not None or args.arch is not None
    if requested == "auto":
        candidates = DEVICE_BACKENDS
        if named:  # that target's GPU, else the interpreter emulating it
            candidates = (resolve_target(args).backend, "interpreter")
        choice = choose_backend(requested, candidates)
    else:
        choice = choose_backend(requested)
    gpu = choice.name if choice.name in ("cuda", "rocm") else None
    return choice, resolve_target(args, gpu)


@attrs.frozen
class _Ran:
    """What --check needs of a device run: the module that ran (optimized, scheduled),
    per fusion (by name) whether its kernel may sum in its own order, and the Target it
    was compiled for (its ``tf32``)."""

    module: object
    reorders: dict[str, bool]
    target: Target
    #: Whether every --repeat run gave the first run's results, bit for bit.
    identical: bool = True


def _run_on_device(
    module, arguments, source: str, args: argparse.Namespace
) -> tuple[list[np.ndarray], _Ran]:
    """Compile ``module`` into an executable in memory and run it through the thunk executor.

    :func:`heron.compiler.program_run.load_program`, the one way a module runs:
    the same compile as ``heron compile --executable`` (kernel images for the
    backend that runs), the same executor as ``heron run OUT.heron``.
    """
    from heron.cli.progress import ProgressDisplay
    from heron.compiler.driver import compile_fusion
    from heron.compiler.program_run import load_program
    from heron.runtime.core.device import DeviceError
    from heron.runtime.core.executor import ExecutorError

    refuse_tiled_layouts(module, "heron run on a device")
    requested = args.backend
    repeat = 1 if args.repeat is None else args.repeat
    choice, target = _choose_target(args)
    device = _create_device(choice.name, target)
    print(f"module {module.name}: entry {module.entry.name}, backend {choice.name}")
    print(f"device: {device.description}")
    print(f"target: {target.summary()}")
    if requested == "auto":
        print(f"auto chose {choice.name}; not taken:" if choice.passed_over else "auto:")
        for line in choice.passed_over:
            print(f"  {line}")
    _print_parameters(module, source)
    first: tuple[np.ndarray, ...] | None = None
    identical = True
    with ProgressDisplay() as display:
        compiling = display.task("compiling kernels")
        compiler = display.counting(compile_fusion, compiling)
        try:
            loaded = load_program(
                module,
                device,
                choice.name,
                target=target,
                compiler=compiler,
                command_buffers=not args.no_command_buffers,
                deterministic=args.deterministic,
            )
        except ExecutorError as exc:
            raise CommandError(str(exc)) from exc
        if compiling is not None:
            compiling.finish()
        compiled, executable = loaded.compiled, loaded.executable
        reorders = _reorders(compiled, choice.name)
        total = _leaf_thunks(executable.program)
        told = display.thunks(None if total is None else total * repeat)
        if choice.name == "interpreter":
            device.progress = display.launches()
        try:
            for k in range(repeat):
                ran = loaded.run(arguments, on_thunk=told)
                if first is None:
                    first = ran.outputs
                elif not _identical(first, ran.outputs):
                    identical = False
                    print(f"run {k + 1}: results differ from run 1's")
        except ExecutorError as exc:  # arguments that do not fit the entry
            raise CommandError(str(exc)) from exc
        except DeviceError as exc:  # a sanitizer finding, the work limit, a device fault
            raise CommandError(f"the {choice.name} device failed: {exc}") from exc
    assert first is not None
    print("kernels:")
    for line in ran.kernels:
        print(f"  {describe_kernel(line)}")
    if not ran.kernels:
        print("  (none: the entry computation needs no kernel)")
    _print_outputs(list(first))
    _print_program(executable, ran.thunks, args.no_command_buffers)
    device_seconds = sum(record.seconds for _, record in ran.thunks)
    print(
        f"ran {ran.kernel_launches} kernel(s) in {ran.seconds:.2f} s"
        f" ({device_seconds:.2f} s on the device); compiled in {compiled.seconds:.2f} s"
    )
    if repeat > 1:
        print(f"results identical across the {repeat} runs: {'yes' if identical else 'NO'}")
    if args.report_json is not None:
        _write_report(compiled.artefact, executable, choice.name, device, args, identical)
    return list(first), _Ran(compiled.module, reorders, target, identical)


def _leaf_thunks(program) -> int | None:
    """The records one run makes (leaf thunks, a command buffer as one); None with a
    loop or a conditional (how many run is decided while running)."""
    from heron.runtime.core.thunks import ConditionalThunk, SequentialThunk, WhileThunk

    count = 0
    for thunk in program:
        if isinstance(thunk, (WhileThunk, ConditionalThunk)):
            return None
        if isinstance(thunk, SequentialThunk):
            inner = _leaf_thunks(thunk.thunks)
            if inner is None:
                return None
            count += inner
        else:  # a kernel, copy, memset, library call or command buffer: one record
            count += 1
    return count


def _reorders(compiled, backend: str) -> dict[str, bool]:
    """Per fusion (every one, loops' and branches' too): may its kernel sum in its own order?

    The kernel's answer (``CompiledKernel.sums_in_its_own_order``: a reduction
    emitter's kernel, a GEMM kernel); fusions that share a kernel share it.
    """
    by_key = {
        emitted.key: emitted.compiled[backend].sums_in_its_own_order
        for emitted in compiled.program.kernels
    }
    return {fusion: by_key[key] for fusion, key in compiled.program.kernel_of.items()}


def describe_kernel(line: KernelRecord) -> str:
    """One report line: fusion, emitter, grid x block, compile and run times.

    ``run`` is the device time of the kernel's launches from the host; a
    kernel replayed in a command buffer has no time of its own (the command
    buffer's is on its own line), which the line says.
    """
    grid = "x".join(str(d) for d in line.grid)
    block = "x".join(str(d) for d in line.block)
    buffers = ", ".join(line.command_buffers)
    if line.launches or not line.command_buffers:
        run = f"run {line.run_seconds:.3f} s"
    else:  # no time of its own: the command buffer's line has the replay's
        run = f"run in command buffer {buffers}"
    text = (
        f"{line.fusion_name}  emitter {line.emitter}  grid {grid}  block {block}"
        f"  compile {line.compile_seconds:.3f} s  {run}"
    )
    notes = []
    if line.launches > 1:
        notes.append(f"{line.launches} launches")
    elif not line.launches and not line.command_buffers:
        notes.append("not launched")
    if line.launches and line.command_buffers:
        notes.append(f"also replayed in command buffer {buffers}")
    if line.fusions > 1:
        notes.append(f"shared by {line.fusions} fusions")
    if line.order_dependence is not None:
        notes.append(f"order-dependent: {line.order_dependence}")
    return text + (f"  ({'; '.join(notes)})" if notes else "")


def _print_program(executable, ran: list[tuple[object, object]], off: bool) -> None:
    """The program's shape, its command buffers' times, what runs each library call, and
    the peak device memory."""
    from heron.runtime.core.thunks import CommandBufferThunk

    buffers = [record for thunk, record in ran if isinstance(thunk, CommandBufferThunk)]
    top = len(executable.program)
    count = sum(isinstance(t, CommandBufferThunk) for t in executable.program)
    print(
        f"program: {top} top-level thunks, {count} command buffers"
        + (" (command buffers off)" if off else "")
    )
    for record in buffers:
        print(
            f"  command buffer {record.path}  {record.name}  {record.launch}"
            f"  run {record.seconds:.3f} s"
        )
    for choice in executable.library_choices:
        print(f"  {choice.report_line()}")
    print(
        f"peak device memory: {executable.peak_device_bytes} bytes"
        f" (the allocations: {executable.allocation_bytes} bytes)"
    )


def _identical(a, b) -> bool:
    return all(
        x.shape == y.shape and x.dtype == y.dtype and x.tobytes() == y.tobytes()
        for x, y in zip(a, b, strict=True)
    )


def _write_report(artefact, executable, backend: str, device, args, identical: bool) -> None:
    """``--report-json``: the report ``heron run OUT.heron`` writes (one implementation)."""
    import json

    from heron.runtime.core import heron_run

    as_artefact = argparse.Namespace(artefact=args.file, no_command_buffers=args.no_command_buffers)
    report = heron_run._report(
        artefact, executable, backend, device.description, as_artefact, identical
    )
    write_atomically(Path(args.report_json), json.dumps(report, indent=1).encode(), "--report-json")
    print(f"wrote the report to {args.report_json}")


def _print_parameters(module, source: str) -> None:
    parameters = module.entry.parameters
    print(f"parameters ({source}):")
    if not parameters:
        print("  (none)")
    for i, parameter in enumerate(parameters):
        print(f"  arg{i}  {parameter.name}  {parameter.shape}")


def _print_outputs(leaves: list) -> None:
    print("outputs:")
    for i, leaf in enumerate(leaves):
        print(f"  out{i}  {describe(leaf)}")


# -- agreement with the reference --------------------------------------------------------


def _run_line_bounds(file: str):
    """The file's RUN-line ``--abs_error_bound`` / ``--rel_error_bound`` (empty without)."""
    from heron.harness.run_lines import RunLineError, parse_run_lines
    from heron.harness.tolerance import ErrorBounds

    path = Path(file)
    try:
        spec = parse_run_lines(path.read_text(), path.name)
    except (OSError, UnicodeDecodeError):
        return ErrorBounds()
    except RunLineError as exc:
        raise CommandError(str(exc)) from exc
    return ErrorBounds(spec.abs_error_bound, spec.rel_error_bound)


def print_agreement(actual: list, expected: list, tolerances: list | None = None) -> bool:
    """Print a line per output; True when every one agrees (``tolerances``: per output)."""
    if len(actual) != len(expected):
        print(f"  {len(actual)} outputs, the reference has {len(expected)}")
        return False
    tolerances = list(tolerances or [])
    tolerances += [None] * (len(expected) - len(tolerances))  # bitwise where none was decided
    every = True
    for i, (a, e, t) in enumerate(zip(actual, expected, tolerances, strict=True)):
        result = compare(a, e, t)
        every &= result.agrees
        print(f"  out{i}  {result.summary}")
    return every


# -- the results summary ---------------------------------------------------------------


def describe(leaf: object) -> str:
    """One line: shape and a few statistics of a result array."""
    if not isinstance(leaf, np.ndarray):
        return f"{type(leaf).__name__} (no value)"
    head = f"{type_name(leaf)}[{','.join(str(d) for d in leaf.shape)}]"
    if leaf.size == 0:
        return f"{head}  (empty)"
    flat = leaf.reshape(-1)
    if leaf.dtype == np.bool_:
        preview = ", ".join("true" if v else "false" for v in flat[:PREVIEW])
        return f"{head}  true {int(np.count_nonzero(flat))} of {flat.size}  first [{preview}]"
    if leaf.dtype.kind == "c":
        values = flat.astype(np.complex128)
        preview = ", ".join(f"{v:.4g}" for v in values[:PREVIEW])
        finite = values[np.isfinite(values)]
        stats = f"mean {finite.mean():.4g}" if finite.size else "no finite values"
        special = values.size - finite.size
        extra = f"  ({special} non-finite)" if special else ""
        return f"{head}  {stats}{extra}  first [{preview}]"
    values = flat.astype(np.float64)
    preview = ", ".join(f"{v:.4g}" for v in values[:PREVIEW])
    finite = values[np.isfinite(values)]
    stats = (
        f"min {finite.min():.4g}  max {finite.max():.4g}  mean {finite.mean():.4g}"
        if finite.size
        else "no finite values"
    )
    special = values.size - finite.size
    extra = f"  ({special} non-finite)" if special else ""
    return f"{head}  {stats}{extra}  first [{preview}]"
