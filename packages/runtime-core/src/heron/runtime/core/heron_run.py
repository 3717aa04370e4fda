"""``heron-run``: the runtime-only command that loads and runs an executable artefact.

It lives in runtime-core so that a machine with the runtime packages alone (no
MLIR, no llvmlite, no jax) has it::

    heron-run ARTEFACT [--describe] [--inputs IN.npz] [--output OUT.npz]
              [--backend auto|interpreter|cuda|rocm] [--repeat N]
              [--no-command-buffers] [--report-json PATH]

The artefact is verified first (:func:`heron.runtime.core.artefact.load`).
It runs when ``--inputs`` or any other running option is given, or when the
entry takes no parameters; otherwise it is only verified (``--describe``
prints its summary). Inputs: an ``.npz`` whose array ``arg{i}`` feeds
parameter ``i`` (positional, as ``heron run`` reads them: the convention and
the exact element-type conversions of :mod:`heron.hlo.npz_io`); outputs go to
``out0``, ``out1``, ... ``--backend auto`` (the default) takes the first
available of CUDA, ROCm and the interpreter that the artefact holds kernel
images for, as ``heron run`` chooses. ``--repeat N`` runs N times on the same
inputs and checks the results are identical each time.

Exit status: 0 after a run (or a verification); 2 for anything refused before
running (a damaged or foreign artefact, no usable backend, missing inputs,
inputs of the wrong shape or type, a library call the executor cannot run, a
launch stopped at the interpreter's work limit);
1 when a device fails while running or repeated runs disagree.
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import tempfile
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import numpy as np

from heron.hlo.errors import HloError
from heron.hlo.parser import parse_shape
from heron.hlo.plugin_loading import PluginError
from heron.runtime.core.artefact import Artefact, ArtefactError, load
from heron.runtime.core.device import DeviceError, DeviceLimitError
from heron.runtime.core.executor import Executable, ExecutorError, RunStats
from heron.runtime.core.registry import DEVICE_BACKENDS
from heron.runtime.core.thunks import (
    CommandBufferThunk,
    KernelThunk,
    order_dependent_kernels,
    walk,
)

__all__ = ["BACKENDS", "DEVICE_BACKENDS", "main"]

BACKENDS = ("auto", "interpreter", "cuda", "rocm")


class _Refused(Exception):
    """Exit 2 with this message."""


def _parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="heron-run",
        description=(
            "Verify a heron executable artefact (sizes, sha256 of every member, format"
            " version, member names) and run it on a device. Exit status 2 for a refused"
            " artefact or unusable inputs, 1 for a failure while running."
        ),
    )
    parser.add_argument("artefact", metavar="ARTEFACT", help="an executable artefact file")
    parser.add_argument(
        "--describe", action="store_true", help="print the verified artefact's manifest summary"
    )
    parser.add_argument(
        "--inputs",
        metavar="IN.npz",
        help="the entry's arguments: array arg0 feeds parameter 0, arg1 parameter 1, ...",
    )
    parser.add_argument(
        "--output", metavar="OUT.npz", help="write the results as out0, out1, ... to this file"
    )
    parser.add_argument(
        "--backend",
        choices=BACKENDS,
        default=None,
        help="the device to run on: 'auto' (default: cuda, then rocm, then the interpreter,"
        " the first available that the artefact has kernel images for) or a backend",
    )
    parser.add_argument(
        "--repeat", type=int, default=None, metavar="N", help="run N times (results must agree)"
    )
    parser.add_argument(
        "--no-command-buffers",
        action="store_true",
        help="run every thunk from the host (no command buffers recorded)",
    )
    parser.add_argument(
        "--report-json", metavar="PATH", help="write the run report (per thunk, totals) as JSON"
    )
    return parser


def main(argv: Sequence[str] | None = None) -> int:
    args = _parser().parse_args(argv)
    try:
        artefact = load(args.artefact)
    except ArtefactError as error:
        print(f"heron-run: refused: {error}", file=sys.stderr)
        return 2
    if args.describe:
        print(artefact.describe())
    running = (
        args.inputs is not None
        or args.output is not None
        or args.backend is not None
        or args.repeat is not None
        or args.no_command_buffers
        or args.report_json is not None
        or (not artefact.signature.parameters and not args.describe)
    )
    if not running:
        if not args.describe:
            print(
                f"{args.artefact}: verified ({len(artefact.members()) + 2} members);"
                " give --inputs IN.npz to run it"
            )
        return 0
    try:
        return _run(artefact, args)
    except (
        _Refused,
        ExecutorError,
        ArtefactError,
        HloError,
        PluginError,
        DeviceLimitError,
    ) as error:
        print(f"heron-run: refused: {error}", file=sys.stderr)
        return 2
    except DeviceError as error:
        print(f"heron-run: the device failed: {error}", file=sys.stderr)
        return 1


def _run(artefact: Artefact, args: argparse.Namespace) -> int:
    repeat = 1 if args.repeat is None else args.repeat
    if repeat < 1:
        raise _Refused(f"--repeat must be at least 1, got {repeat}")
    inputs = _inputs(artefact, args.inputs)
    name, passed_over = _choose_backend(artefact, args.backend or "auto")
    device = _device(name, artefact)
    executable = Executable(
        artefact, device, name, command_buffers=not args.no_command_buffers, timing=True
    )
    print(f"artefact: {args.artefact} (target {artefact.target.name})")
    print(f"backend: {name}; device: {device.description}")
    for line in passed_over:
        print(f"  auto passed over {line}")
    top = len(executable.program)
    buffers = sum(isinstance(t, CommandBufferThunk) for t in executable.program)
    print(
        f"program: {top} top-level thunks, {buffers} command buffers"
        + (" (command buffers off)" if args.no_command_buffers else "")
        + f"; conditional nodes: {'yes' if device.supports_conditional_nodes else 'no'}"
    )
    for choice in executable.library_choices:
        print(f"  {choice.report_line()}")
    order_dependent = order_dependent_kernels(executable.program)
    for kernel, why in order_dependent:
        print(f"  order-dependent kernel {kernel}: {why}")
    first: tuple[np.ndarray, ...] | None = None
    identical = True
    for k in range(repeat):
        results = executable.run(inputs)
        if first is None:
            first = results
        elif not _identical(first, results):
            identical = False
            print(
                f"heron-run: run {k + 1}'s results differ from run 1's"
                + (
                    f" ({len(order_dependent)} order-dependent kernel(s), listed above;"
                    " compile with --deterministic for the same bits every run)"
                    if order_dependent
                    else ""
                ),
                file=sys.stderr,
            )
        stats = executable.stats
        print(
            f"run {k + 1}: {stats.seconds:.6f} s, {stats.kernel_launches} kernel launches,"
            f" command buffers recorded {stats.command_buffers_recorded}, replayed"
            f" {stats.command_buffers_replayed}, updated {stats.command_buffers_updated}"
        )
    assert first is not None
    _print_thunks(executable.stats)
    print(
        f"peak device memory: {executable.peak_device_bytes} bytes"
        f" (the allocations: {executable.allocation_bytes} bytes)"
    )
    _print_totals(executable.runs)
    for i, result in enumerate(first):
        print(f"out{i}: {result.dtype}{list(result.shape)} {_preview(result)}")
    if repeat > 1:
        print(f"results identical across the {repeat} runs: {'yes' if identical else 'NO'}")
    if args.output is not None:
        _save_outputs(Path(args.output), first)
        print(f"wrote {len(first)} output(s) to {args.output}")
    if args.report_json is not None:
        report = _report(artefact, executable, name, device.description, args, identical)
        _write_atomically(Path(args.report_json), json.dumps(report, indent=1).encode())
        print(f"wrote the report to {args.report_json}")
    return 0 if identical else 1


def _inputs(artefact: Artefact, path: str | None) -> list[np.ndarray]:
    from heron.hlo.npz_io import load_inputs

    parameters = artefact.signature.parameters
    if path is None:
        if parameters:
            raise _Refused(
                f"missing inputs: the entry takes {len(parameters)} parameters"
                f" ({', '.join(parameters)}); give --inputs IN.npz with arg0 ..."
                f" arg{len(parameters) - 1}"
            )
        return []
    if not Path(path).is_file():
        raise _Refused(f"--inputs {path}: no such file")
    return load_inputs(path, [parse_shape(text) for text in parameters])


def _choose_backend(artefact: Artefact, requested: str) -> tuple[str, list[str]]:
    """The backend that runs, and a line per backend ``auto`` passed over."""
    from heron.runtime.core.registry import NoBackendError, default_backends

    has_kernels = any(isinstance(t, KernelThunk) for t in walk(artefact.program))

    def unusable(name: str) -> str | None:
        if has_kernels and name not in artefact.backends:
            return (
                f"the artefact has no kernel images for it (it has {', '.join(artefact.backends)})"
            )
        return None

    try:
        choice = default_backends().choose(requested, DEVICE_BACKENDS, unusable)
    except NoBackendError as error:
        raise _Refused(f"{error} to run the artefact") from None
    return choice.name, list(choice.passed_over)


def _device(name: str, artefact: Artefact) -> Any:
    from heron.runtime.core.registry import default_backends

    # No compiler Target in a runtime-only install: a GPU backend opens its own device
    # (see BackendSpec); the interpreter emulates the artefact's target, whose warp size
    # the kernels were lowered for (the interpreter's factory reads only that).
    target = artefact.target if name == "interpreter" else None
    try:
        return default_backends().create_device(name, target)
    except DeviceError as error:
        raise _Refused(f"backend '{name}': cannot open its device: {error}") from error


def _identical(a: Sequence[np.ndarray], b: Sequence[np.ndarray]) -> bool:
    return all(
        x.shape == y.shape and x.dtype == y.dtype and x.tobytes() == y.tobytes()
        for x, y in zip(a, b, strict=True)
    )


def _preview(array: np.ndarray) -> str:
    flat = array.reshape(-1)
    shown = ", ".join(str(v) for v in flat[:4])
    return f"[{shown}{', ...' if flat.size > 4 else ''}]"


def _print_thunks(stats: RunStats) -> None:
    print("thunks (last run):")
    for entry in stats.by_thunk():
        times = f" x{entry['executions']}" if entry["executions"] > 1 else ""
        launch = f" ({entry['launch']})" if entry["launch"] else ""
        emitter = f" [{entry['emitter']}]" if entry["emitter"] else ""
        print(
            f"  {entry['path']:<12} {entry['kind']:<15} {entry['name']}{emitter}{launch}{times}:"
            f" {entry['seconds'] * 1e6:.1f} us"
        )


def _totals(runs: Sequence[RunStats]) -> dict[str, Any]:
    return {
        "runs": len(runs),
        "seconds": sum(r.seconds for r in runs),
        "kernel_launches": sum(r.kernel_launches for r in runs),
        "command_buffers_recorded": sum(r.command_buffers_recorded for r in runs),
        "command_buffers_replayed": sum(r.command_buffers_replayed for r in runs),
        "command_buffers_updated": sum(r.command_buffers_updated for r in runs),
        "thunks_executed": sum(len(r.records) for r in runs),
    }


def _print_totals(runs: Sequence[RunStats]) -> None:
    totals = _totals(runs)
    print(
        f"totals: {totals['runs']} runs, {totals['seconds']:.6f} s,"
        f" {totals['kernel_launches']} kernel launches, {totals['thunks_executed']} leaf"
        f" thunks executed, command buffers recorded {totals['command_buffers_recorded']},"
        f" replayed {totals['command_buffers_replayed']}, updated"
        f" {totals['command_buffers_updated']}"
    )


def _report(
    artefact: Artefact,
    executable: Executable,
    backend: str,
    device: str,
    args: argparse.Namespace,
    identical: bool,
) -> dict[str, Any]:
    return {
        "artefact": str(args.artefact),
        "target": {
            "name": artefact.target.name,
            "backend": artefact.target.backend,
            "arch": artefact.target.arch,
        },
        "backend": backend,
        "device": device,
        "command_buffers": not args.no_command_buffers,
        "conditional_nodes": executable.device.supports_conditional_nodes,
        "program": {
            "top_level_thunks": len(executable.program),
            "command_buffers": sum(isinstance(t, CommandBufferThunk) for t in executable.program),
        },
        "library_calls": [choice.to_json() for choice in executable.library_choices],
        "order_dependent_kernels": [
            {"kernel": kernel, "why": why}
            for kernel, why in order_dependent_kernels(executable.program)
        ],
        "peak_device_bytes": executable.peak_device_bytes,
        "allocation_bytes": executable.allocation_bytes,
        "runs": [r.to_json() for r in executable.runs],
        "totals": _totals(executable.runs),
        "identical": identical,
    }


def _write_atomically(path: Path, data: bytes) -> None:
    handle, temporary = tempfile.mkstemp(prefix=f".{path.name}.", dir=path.parent or ".")
    try:
        with os.fdopen(handle, "wb") as file:
            file.write(data)
        os.replace(temporary, path)
    except BaseException:
        Path(temporary).unlink(missing_ok=True)
        raise


def _save_outputs(path: Path, results: Sequence[np.ndarray]) -> None:
    from heron.hlo.npz_io import save_outputs

    handle, temporary = tempfile.mkstemp(prefix=f".{path.name}.", dir=path.parent or ".")
    os.close(handle)
    try:
        save_outputs(temporary, results)
        os.replace(temporary, path)
    except BaseException:
        Path(temporary).unlink(missing_ok=True)
        raise


if __name__ == "__main__":
    sys.exit(main())
