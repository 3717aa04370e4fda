"""``heron compile FILE.hlo [--target NAME] [--arch ARCH]``: device code for every fusion.

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
from pathlib import Path

from heron.cli.common import (
    CommandError,
    add_target_arguments,
    check_output_directory,
    check_output_file,
    load_module,
    refuse_tiled_layouts,
    resolve_target,
    write_atomically,
)


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
    parser.set_defaults(handler=run)


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

    target = resolve_target(args)
    module = load_module(args.file)
    refuse_tiled_layouts(module, "heron compile")
    fusions = selected_fusions(module, args.fusion)
    directory, single = _destinations(args.output, [f.name for f in fusions])
    if args.dump_dir:
        check_output_directory(Path(args.dump_dir), f"--dump-dir {args.dump_dir}", create=True)
    for fusion in fusions:
        dump = DumpWriter(args.dump_dir, fusion.name) if args.dump_dir else None
        compiled = compile_fusion(fusion, target, dump=dump)
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
