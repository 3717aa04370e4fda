"""``heron compile FILE.hlo [--target NAME] [--arch ARCH]``: device code for every fusion.

With ``--executable OUT.heron`` it compiles the whole program instead
(:func:`heron.compiler.executable.compile_program`: the program pipeline, copy
insertion, the scheduler, buffer assignment, thunk emission) and writes one
executable artefact (docs/runtime.md) holding kernel images for the target's
backend and the interpreter, or the backends ``--backend`` names; it prints a
summary: thunks by kind, kernels, images per backend, allocations, peak memory. A
GEMM library call has heron's kernel beside it only for the backends whose devices
may not run it (the interpreter; not CUDA, whose cuBLASLt runs every plain real
GEMM), unless ``--library-fallbacks`` keeps it for all. ``--autotune`` (with
``--executable``, a CUDA target) then times every candidate cuBLASLt algorithm
of each GEMM library call on the CUDA device here and stores the fastest
correct one with the call (:func:`heron.runtime.cuda.autotune.autotune_gemms`);
without a CUDA device it says so and writes nothing.

Each fusion goes through :func:`heron.compiler.compile_fusion` for the Target
(emission, heron's passes, the backend's stages). Writes the device code the
stages made, ``<fusion>.ptx`` (and ``<fusion>.cubin`` when ptxas is installed)
or ``<fusion>.hsaco``, into the current directory, or where ``-o`` says: a
directory (existing, or given with a trailing '/'), or a file name when one
fusion is compiled. Destinations are checked before anything is compiled, and
each file is written atomically (a temporary file beside it, then a rename).
``--dump-dir`` adds every stage's text
(``<fusion>.<NN>.<stage>.mlir/.ll/.ptx``). One line per fusion reports the
emitter, the launch, the files, the time each stage took, and any stage that
was skipped, with the reason.
"""

from __future__ import annotations

import argparse
import sys
from collections import Counter
from pathlib import Path

from heron.cli.common import (
    CommandError,
    add_target_arguments,
    atomic_output,
    check_output_directory,
    check_output_file,
    load_module,
    refuse_tiled_layouts,
    resolve_target,
    write_atomically,
)
from heron.hlo.errors import UnsupportedError


def register(subparsers: argparse._SubParsersAction) -> None:
    parser = subparsers.add_parser(
        "compile",
        help="compile a module's fusions to PTX/cubin (cuda) or an HSACO (rocm)",
        description=(
            "Compile every fusion of an HLO module's entry computation for a target device"
            " (emission, heron's passes, the backend's stages: NVVM to PTX and cubin, or ROCDL"
            " to an HSACO) and write the device code, one file per fusion and kind."
        ),
    )
    parser.add_argument("file", metavar="FILE.hlo", help="HLO text, as XLA or JAX dump it")
    add_target_arguments(parser, "to compile for")
    parser.add_argument("--fusion", metavar="NAME", help="only this fusion")
    parser.add_argument("--dump-dir", metavar="DIR", help="write the IR after every stage here")
    parser.add_argument(
        "-o",
        "--output",
        metavar="ARTIFACT",
        help="output file (one fusion) or directory (default: the current directory)",
    )
    parser.add_argument(
        "--executable",
        metavar="OUT.heron",
        help="compile the whole program into an executable artefact (thunks, allocations,"
        " kernel images, constants) written to this file, instead of one file per fusion",
    )
    parser.add_argument(
        "--backend",
        action="append",
        choices=EXECUTABLE_BACKENDS,
        metavar="BACKEND",
        help="with --executable: a backend to hold kernel images for (cuda, rocm,"
        " interpreter; repeat for several); default: the target's backend and the"
        " interpreter",
    )
    parser.add_argument(
        "--deterministic",
        action="store_true",
        help="with --executable: no kernel whose result depends on the order its threads"
        " run (order-dependent scatters become sorted scatters, as XLA's"
        " --xla_gpu_deterministic_ops)",
    )
    parser.add_argument(
        "--autotune",
        action="store_true",
        help="with --executable: time each GEMM library call's cuBLASLt algorithms on this"
        " machine's CUDA device and store the fastest correct one in the artefact",
    )
    parser.add_argument(
        "--library-fallbacks",
        action="store_true",
        help="with --executable: keep heron's kernel beside every GEMM library call for"
        " every backend (by default a backend whose devices always run the call, CUDA"
        " with cuBLASLt for plain real GEMMs, holds none, as XLA's executables hold none)",
    )
    parser.add_argument(
        "--timing",
        action="store_true",
        help="with --executable: print where the compile's time went, each HLO pass and"
        " each kernel stage summed over the kernels (to stderr)",
    )
    parser.set_defaults(handler=run)


#: The backends an executable can hold kernel images for.
EXECUTABLE_BACKENDS = ("cuda", "rocm", "interpreter")


def _destinations(output: str | None, names: list[str]) -> tuple[Path, str | None]:
    """(directory, file stem or None): where the artifacts of ``names`` go.

    Checked before anything is compiled: the directory exists (or, for ``-o DIR/``,
    can be made) and is writable; a file name is not a directory or a device.
    """
    if output is None:
        directory = Path.cwd()
        check_output_directory(directory, "the current directory")
        return directory, None
    path = Path(output)
    if output.endswith(("/", "\\")) or path.is_dir():
        check_output_directory(path, f"-o {output}", create=True)
        return path, None
    if len(names) != 1:
        raise CommandError(
            f"-o {output}: {len(names)} fusions are compiled ({', '.join(names)}); give a"
            " directory, or --fusion NAME"
        )
    check_output_file(path, "-o")
    return path.parent, path.name


def _file_name(fusion: str, single: str | None, extension: str, known: set[str]) -> str:
    """``<fusion>.<ext>``, or ``-o``'s name with ``ext`` in place of a device-code suffix."""
    from heron.partitioner import function_name

    if single is None:
        return f"{function_name(fusion)}.{extension}"
    stem = Path(single)
    base = stem.stem if stem.suffix.lstrip(".") in known else stem.name
    return f"{base}.{extension}"


def run(args: argparse.Namespace) -> int:
    from heron.compiler import DumpWriter, compile_fusion, selected_fusions
    from heron.compiler.fusion import is_fused

    if args.executable is None:
        if args.backend:
            raise CommandError("--backend applies to --executable only")
        if args.deterministic:
            raise CommandError("--deterministic applies to --executable only")
        if args.autotune:
            raise CommandError("--autotune applies to --executable only")
        if args.timing:
            raise CommandError(
                "--timing applies to --executable only (a fusion's compile prints its stages)"
            )
    else:
        for option, given in (("--fusion", args.fusion), ("-o", args.output)):
            if given is not None:
                raise CommandError(f"{option} makes no sense with --executable")
        if args.dump_dir is not None:
            raise CommandError("--dump-dir is not supported with --executable")
    target = resolve_target(args)
    module = load_module(args.file)
    refuse_tiled_layouts(module, "heron compile")
    # the backend before anything is written: a missing one says what to install
    from heron.runtime.core.registry import default_backends

    default_backends().get(target.backend)
    if args.executable is not None:
        return _executable(module, target, args)
    fusions = selected_fusions(module, args.fusion)
    directory, single = _destinations(args.output, [f.name for f in fusions])
    if args.dump_dir:
        check_output_directory(Path(args.dump_dir), f"--dump-dir {args.dump_dir}", create=True)
    unfused = not is_fused(module)
    for fusion in fusions:
        dump = DumpWriter(args.dump_dir, fusion.name) if args.dump_dir else None
        try:
            compiled = compile_fusion(fusion, target, dump=dump)
        except UnsupportedError as exc:
            if not unfused:
                raise
            raise UnsupportedError(
                f"{exc.message}\n(note: {args.file} holds no fusion, so its entry computation"
                " was read as one fusion, as XLA's fusion_to_mlir reads such a file; to fuse"
                f" and compile it as a program: heron compile --executable OUT.heron {args.file})",
                exc.location,
            ) from exc
        code = compiled.device_code()
        known = {artefact.extension for artefact in code}
        written = []
        for artefact in code:
            path = directory / _file_name(fusion.name, single, artefact.extension, known)
            write_atomically(path, artefact.data, "-o" if args.output is not None else "output")
            written.append(f"{path} ({len(artefact.data)} bytes)")
        stages = ", ".join(f"{stage} {seconds * 1000:.1f}" for stage, seconds in compiled.timings)
        print(
            f"fusion {compiled.fusion_name}: {compiled.emitter} emitter, kernel"
            f" {compiled.kernel_name} for {target.arch} ({target.name}), {compiled.launch}"
        )
        print(f"  wrote {'; '.join(written)}")
        print(f"  {compiled.seconds * 1000:.1f} ms ({stages} ms)")
        for record in compiled.skipped:
            print(f"  skipped {record.name}: {record.skipped}")
        if dump is not None:
            print(f"  dumped {len(dump.written)} stages to {args.dump_dir}")
    return 0


def _executable(module, target, args: argparse.Namespace) -> int:
    from heron.compiler.executable import compile_program, thunk_counts
    from heron.compiler.library_attention_backward import program_attention_verdicts
    from heron.compiler.library_attention_pairing import attention_pairing_verdicts
    from heron.compiler.library_convolution import convolution_verdicts
    from heron.compiler.library_gemm import dot_fusion_verdicts
    from heron.hlo.memory_budget import format_size
    from heron.runtime.core.thunks import order_dependent_kernels

    path = Path(args.executable)
    check_output_file(path, "--executable")
    backends = tuple(dict.fromkeys(args.backend or (target.backend, "interpreter")))
    wrong = [b for b in backends if b in ("cuda", "rocm") and b != target.backend]
    if wrong:
        raise CommandError(
            f"--backend {wrong[0]}: the kernels are compiled for {target.name}"
            f" ({target.backend}, {target.arch}); a {wrong[0]} image needs a {wrong[0]} target"
        )
    device = _tuning_device(target) if args.autotune else None  # before the compile
    convolutions = convolution_verdicts(module, target)
    backward_attentions, attentions = program_attention_verdicts(module, target)
    compiled = compile_program(
        module,
        target,
        backends,
        deterministic=args.deterministic,
        library_fallbacks=args.library_fallbacks,
    )
    artefact = compiled.artefact
    tuned: list = []
    if device is not None:
        artefact = _autotuned(artefact, device, tuned)
    with atomic_output(path, "--executable") as temporary:
        artefact.save(temporary)
    counts = thunk_counts(compiled)
    beside = thunk_counts(compiled, fallbacks=True)
    by_kind: dict[str, list[int]] = {}
    for allocation in artefact.allocations:
        by_kind.setdefault(allocation.kind, []).append(allocation.size)
    assignment = compiled.assignment
    print(
        f"module {module.name}: executable for {target.name} ({target.backend}, {target.arch}),"
        f" kernel images for {', '.join(backends)}"
    )
    print(
        f"  thunks: {len(artefact.program)} at the top level; "
        + (", ".join(f"{kind} {n}" for kind, n in sorted(counts.items())) or "none")
        + (
            "; beside the library calls, for a device without the library: "
            + ", ".join(f"{kind} {n}" for kind, n in sorted(beside.items()))
            if beside
            else ""
        )
    )
    images = Counter(entry.backend for entry in artefact.kernels)
    print(
        f"  kernels: {len(compiled.program.kernels)} for"
        f" {len(compiled.program.kernel_of)} fusions ("
        + ", ".join(
            f"{n} {emitter}"
            for emitter, n in sorted(_emitters(compiled).items(), key=lambda item: -item[1])
        )
        + "); images: "
        + (", ".join(f"{backend} {images[backend]}" for backend in backends) or "none")
    )
    print(
        f"  allocations: {len(artefact.allocations)}; "
        + ", ".join(
            f"{kind} {len(sizes)} ({format_size(sum(sizes))})"
            for kind, sizes in sorted(by_kind.items())
        )
    )
    print(
        f"  peak memory: {format_size(sum(a.size for a in artefact.allocations))}"
        f" (the buffer assignment's: {format_size(assignment.total_bytes)};"
        f" at most {format_size(assignment.peak_live_temp_bytes)} of temporaries live at once)"
    )
    for fusion, verdict in dot_fusion_verdicts(compiled.module, target):
        print(f"  dot fusion {fusion}: {verdict}")
    for convolution, verdict in convolutions:
        print(f"  convolution {convolution}: {verdict}")
    for attention, verdict in attentions:
        print(f"  attention ending at {attention}: {verdict}")
    for softmax, verdict in backward_attentions:
        print(f"  attention backward through softmax {softmax}: {verdict}")
    for call, verdict in attention_pairing_verdicts(compiled.module):
        print(f"  attention backward call {call}: {verdict}")
    for kernel, why in order_dependent_kernels(artefact.program):
        print(f"  order-dependent kernel {kernel}: {why} (--deterministic avoids it)")
    if device is not None:
        print(f"  autotuned on {device.description}: {len(tuned)} GEMM library calls")
        for report in tuned:
            print(f"    {report.report_line()}")
    print(
        f"  compiled in {compiled.seconds:.2f} s ({compiled.kernel_seconds:.2f} s in kernels);"
        f" wrote {path} ({path.stat().st_size} bytes)"
    )
    if args.timing and compiled.profile is not None:
        print(compiled.profile.table(), file=sys.stderr)
    return 0


def _tuning_device(target):
    """The CUDA device ``--autotune`` measures on; a CommandError saying why there is none."""
    try:
        from heron.runtime.cuda.autotune import AutotuneError, tuning_device
    except ImportError as error:
        raise CommandError(f"--autotune needs heron-runtime-cuda ({error})") from None

    try:
        return tuning_device(target)
    except AutotuneError as error:
        raise CommandError(f"--autotune: {error}") from None


def _autotuned(artefact, device, reports: list):
    """``artefact`` autotuned on ``device``, each call's outcome appended to ``reports``."""
    from heron.runtime.cuda.autotune import AutotuneError, autotune_gemms

    try:
        return autotune_gemms(artefact, device, on_call=reports.append)
    except AutotuneError as error:
        raise CommandError(f"--autotune: {error}") from None


def _emitters(compiled) -> dict[str, int]:
    counts: dict[str, int] = {}
    for emitted in compiled.program.kernels:
        emitter = next(iter(emitted.compiled.values())).emitter
        counts[emitter] = counts.get(emitter, 0) + 1
    return counts
