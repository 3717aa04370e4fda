"""``heron run FILE.hlo``: run a module's entry computation on a backend.

Backends:

- ``auto`` (the default): CUDA, then ROCm, then the interpreter, the first
  that is available here; the report says which was taken and why each one
  before it was not (its availability reason).
- ``interpreter``, ``cuda``, ``rocm``: that device; it must be available. The
  entry computation runs fusion by fusion (:mod:`heron.compiler.sequential`);
  a module that is not fused yet (as JAX prints it) first gets a fusion per
  computing instruction (:mod:`heron.hlo.passes.outline`).
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
each output. Integers and preds must be identical. A float element agrees when
it is within :data:`CHECK_ULPS` units in the last place of the output type from
the reference value, or when the difference is at most :data:`CHECK_ULPS`
epsilons of the type (ulps measured at 1.0: results near zero from a
cancellation, e.g. GELU's ``1 + tanh`` for negative inputs, differ by more ulps
than their size shows); NaN agrees with NaN only. Complex values compare their
real and imaginary parts that way. Any element outside that makes the command
exit 1.
"""

from __future__ import annotations

import argparse
import time
from pathlib import Path

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
)

BACKENDS = ("auto", "interpreter", "reference", "cuda", "rocm")
#: The device backends ``auto`` chooses among, in order of preference.
DEVICE_BACKENDS = ("cuda", "rocm", "interpreter")
PREVIEW = 4
#: --check's tolerance for float outputs (see the module docstring).
CHECK_ULPS = 4
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
    parser.add_argument("file", metavar="FILE.hlo", help="HLO text, as XLA or JAX dump it")
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
        "--seed",
        type=int,
        default=None,
        help="seed of the random arguments used without --inputs (default 0)",
    )
    parser.add_argument(
        "--check",
        action="store_true",
        help="compare the results with the reference evaluator; exit 1 on disagreement"
        f" (integers exact, floats within {CHECK_ULPS} ulps or {CHECK_ULPS} epsilons)",
    )
    parser.set_defaults(handler=run)


# -- choosing a backend ----------------------------------------------------------------


@attrs.frozen
class Choice:
    """The backend that runs, and a line per backend that ``auto`` passed over."""

    name: str
    passed_over: tuple[str, ...] = ()


def choose_backend(requested: str, candidates: tuple[str, ...] = DEVICE_BACKENDS) -> Choice:
    """The device backend for ``requested`` (``auto`` or a name); CommandError if unusable.

    ``auto`` takes the first available of ``candidates``.
    """
    from heron.hlo.plugin_loading import PluginError
    from heron.runtime.core.registry import default_backends

    registry = default_backends()
    installed = set(registry.names())
    candidates = candidates if requested == "auto" else (requested,)
    passed_over = []
    for name in candidates:
        if name not in installed:
            reason = "not installed (its heron.backends plugin is missing)"
        else:
            try:
                status = registry.availability(name)
            except PluginError as exc:
                reason = str(exc)
            else:
                if status.available:
                    return Choice(name, tuple(passed_over))
                reason = status.reason
        passed_over.append(f"{name}: {reason}")
    if requested == "auto":
        raise CommandError(f"no backend is available ({'; '.join(passed_over)})")
    raise CommandError(f"backend '{requested}' is not available here: {passed_over[0]}")


def _create_device(name: str, target):
    from heron.runtime.core.device import DeviceError
    from heron.runtime.core.registry import default_backends

    try:
        return default_backends().create_device(name, target)
    except DeviceError as exc:
        raise CommandError(f"backend '{name}': cannot open its device: {exc}") from exc


# -- the command ------------------------------------------------------------------------


def run(args: argparse.Namespace) -> int:
    if args.inputs is not None and args.seed is not None:
        raise CommandError(
            "--seed only applies to random arguments; it makes no sense with --inputs"
        )
    if args.check and args.backend == "reference":
        raise CommandError(
            "--check compares a device backend with the reference evaluator;"
            " it makes no sense with --backend reference"
        )
    module = load_module(args.file)
    if args.output is not None:
        check_output_file(Path(args.output), "--output")
    arguments, source = _arguments(module, args)
    if args.backend == "reference":
        print(f"module {module.name}: entry {module.entry.name}, backend reference")
        _print_parameters(module, source)
        leaves, elapsed = _evaluate(module, arguments)
        _print_outputs(leaves)
        print(f"evaluated in {elapsed:.2f} s")
    else:
        leaves = _run_on_device(module, arguments, source, args)
    if args.output is not None:
        from heron.hlo.npz_io import save_outputs

        with atomic_output(Path(args.output), "--output") as temporary:
            save_outputs(temporary, leaves)
        print(f"wrote {len(leaves)} output(s) to {args.output}")
    if args.check:
        expected, elapsed = _evaluate(module, arguments)
        print(f"check against the reference evaluator ({elapsed:.2f} s):")
        if not print_agreement(leaves, expected):
            print("DISAGREE: results differ from the reference evaluator beyond the tolerance")
            return EXIT_DISAGREEMENT
        print("agree: every output within the tolerance")
    return 0


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


def _choose_target(args: argparse.Namespace) -> tuple[Choice, object]:
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


def _run_on_device(module, arguments, source: str, args: argparse.Namespace) -> list[np.ndarray]:
    from heron.compiler.sequential import FusionRunError, KernelRecord, run_module

    refuse_tiled_layouts(module, "heron run on a device")
    requested = args.backend
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
    print("kernels:")

    def report(record: KernelRecord) -> None:
        print(f"  {describe_kernel(record)}", flush=True)

    try:
        result = run_module(module, arguments, device, choice.name, target=target, on_kernel=report)
    except FusionRunError as exc:
        raise CommandError(str(exc)) from exc
    if not result.kernels:
        print("  (none: the entry computation needs no kernel)")
    _print_outputs(list(result.outputs))
    device_seconds = sum(k.run_seconds for k in result.kernels)
    print(
        f"ran {len(result.kernels)} kernel(s) in {result.seconds:.2f} s"
        f" ({device_seconds:.2f} s on the device)"
    )
    return list(result.outputs)


def describe_kernel(record) -> str:
    """One report line: fusion, emitter, grid x block, compile and run times."""
    grid = "x".join(str(d) for d in record.grid)
    block = "x".join(str(d) for d in record.block)
    return (
        f"{record.fusion_name}  emitter {record.emitter}  grid {grid}  block {block}"
        f"  compile {record.compile_seconds:.3f} s  run {record.run_seconds:.3f} s"
    )


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


@attrs.frozen
class Agreement:
    """How one output compares with the reference value."""

    agrees: bool
    summary: str


def print_agreement(actual: list, expected: list) -> bool:
    """Print a line per output; True when every one agrees."""
    if len(actual) != len(expected):
        print(f"  {len(actual)} outputs, the reference has {len(expected)}")
        return False
    every = True
    for i, (a, e) in enumerate(zip(actual, expected, strict=True)):
        result = compare(a, e)
        every &= result.agrees
        print(f"  out{i}  {result.summary}")
    return every


def compare(actual: object, expected: object) -> Agreement:
    """``actual`` against the reference ``expected``, under --check's tolerance."""
    if not isinstance(expected, np.ndarray) or not isinstance(actual, np.ndarray):
        same = type(actual) is type(expected)
        return Agreement(same, "no value (token)" if same else "kinds differ")
    if actual.shape != expected.shape or actual.dtype != expected.dtype:
        return Agreement(
            False,
            f"{_type_name(actual)}{list(actual.shape)} where the reference is"
            f" {_type_name(expected)}{list(expected.shape)}",
        )
    if expected.dtype.kind == "c":
        parts = [_compare_floats(f(actual), f(expected)) for f in (np.real, np.imag)]
        return Agreement(
            all(p.agrees for p in parts), "real: " + "; imag: ".join(p.summary for p in parts)
        )
    if _is_float(expected.dtype):
        return _compare_floats(actual, expected)
    differ = int(np.count_nonzero(actual != expected))
    if differ:
        return Agreement(False, f"{differ} of {expected.size} elements differ (must be exact)")
    return Agreement(True, "identical")


def _is_float(dtype: np.dtype) -> bool:
    import ml_dtypes

    try:
        ml_dtypes.finfo(dtype)
    except ValueError:
        return False
    return True


def _compare_floats(actual: np.ndarray, expected: np.ndarray) -> Agreement:
    import ml_dtypes

    from heron.harness.tolerance import NAN_DISTANCE, ulp_distance

    if actual.size == 0:
        return Agreement(True, "empty")
    distance = ulp_distance(actual, expected)
    ulps = np.where(distance >= NAN_DISTANCE, np.inf, distance.astype(np.float64))
    a, e = actual.astype(np.float64), expected.astype(np.float64)
    with np.errstate(invalid="ignore"):
        difference = np.where(np.isnan(a) & np.isnan(e), 0.0, np.abs(a - e))
        difference = np.where(a == e, 0.0, difference)  # same-signed infinities
    difference = np.where(np.isnan(difference), np.inf, difference)
    epsilon = float(ml_dtypes.finfo(actual.dtype).eps)
    bad = (ulps > CHECK_ULPS) & (difference > CHECK_ULPS * epsilon)
    worst_ulps = float(ulps.max())
    summary = f"max {worst_ulps:.0f} ulp, max |difference| {float(difference.max()):.3g}"
    if bad.any():
        first = np.unravel_index(int(np.flatnonzero(bad)[0]), actual.shape)
        index = tuple(int(i) for i in first)
        summary += (
            f"; {int(bad.sum())} of {actual.size} outside the tolerance, first at {index}:"
            f" {float(a[first])!r} where the reference has {float(e[first])!r}"
        )
        return Agreement(False, summary)
    return Agreement(True, summary)


# -- the results summary ---------------------------------------------------------------


def _type_name(array: np.ndarray) -> str:
    from heron.hlo.element_types import ElementType

    try:
        return ElementType.from_numpy(array.dtype).value
    except ValueError:
        return str(array.dtype)


def describe(leaf: object) -> str:
    """One line: shape and a few statistics of a result array."""
    if not isinstance(leaf, np.ndarray):
        return f"{type(leaf).__name__} (no value)"
    head = f"{_type_name(leaf)}[{','.join(str(d) for d in leaf.shape)}]"
    if leaf.size == 0:
        return f"{head}  (empty)"
    flat = leaf.reshape(-1)
    if leaf.dtype == np.bool_:
        preview = ", ".join("true" if v else "false" for v in flat[:PREVIEW])
        return f"{head}  true {int(np.count_nonzero(flat))} of {flat.size}  first [{preview}]"
    if leaf.dtype.kind == "c":
        values = flat.astype(np.complex128)
        preview = ", ".join(f"{v:.4g}" for v in values[:PREVIEW])
        return f"{head}  mean {values.mean():.4g}  first [{preview}]"
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
