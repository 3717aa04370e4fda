"""``heron compile FILE.hlo --target cuda|rocm``: device code for every fusion of a module.

Writes ``<fusion>.ptx`` (and ``<fusion>.cubin`` when ptxas is installed) or
``<fusion>.hsaco`` per fusion into the current directory, or where ``-o``
says: a directory (existing, or given with a trailing '/'), or a file name
when one fusion is compiled. ``--dump-dir`` adds every stage's IR
(``<fusion>.<NN>.<stage>.mlir/.ll/.ptx``). One line per fusion reports the
emitter, the launch, the files and the time each stage took.
"""

from __future__ import annotations

import argparse
from pathlib import Path

from heron.cli.common import CommandError, load_module


def register(subparsers: argparse._SubParsersAction) -> None:
    parser = subparsers.add_parser(
        "compile",
        help="compile a module's fusions to PTX/cubin (cuda) or an HSACO (rocm)",
        description=(
            "Compile every fusion of an HLO module's entry computation (emission, heron's"
            " passes, the NVVM or ROCDL backend) and write the device code, one file per"
            " fusion."
        ),
    )
    parser.add_argument("file", metavar="FILE.hlo", help="HLO text, as XLA or JAX dump it")
    parser.add_argument("--target", required=True, choices=("cuda", "rocm"))
    parser.add_argument("--arch", help="GPU architecture (default sm_90 for cuda, gfx942 for rocm)")
    parser.add_argument("--fusion", metavar="NAME", help="only this fusion")
    parser.add_argument("--dump-dir", metavar="DIR", help="write the IR after every stage here")
    parser.add_argument(
        "-o",
        "--output",
        metavar="ARTIFACT",
        help="output file (one fusion) or directory (default: the current directory)",
    )
    parser.set_defaults(handler=run)


def _check_arch(target: str, arch: str | None) -> None:
    if arch is None:
        return
    if target == "cuda" and not arch.startswith("sm_"):
        raise CommandError(f"--arch {arch}: not an NVIDIA architecture (expected e.g. sm_90)")
    if target == "rocm" and not arch.startswith("gfx"):
        raise CommandError(f"--arch {arch}: not an AMDGPU architecture (expected e.g. gfx942)")


def _destinations(output: str | None, names: list[str]) -> tuple[Path, str | None]:
    """(directory, file stem or None): where the artifacts of ``names`` go."""
    if output is None:
        return Path.cwd(), None
    path = Path(output)
    if output.endswith(("/", "\\")) or path.is_dir():
        return path, None
    if len(names) != 1:
        raise CommandError(
            f"-o {output}: {len(names)} fusions are compiled ({', '.join(names)}); give a"
            " directory, or --fusion NAME"
        )
    return path.parent, path.name


def run(args: argparse.Namespace) -> int:
    from heron.compiler.driver import compile_kernel
    from heron.compiler.dumps import DumpWriter
    from heron.compiler.fusions import selected_fusions
    from heron.partitioner import function_name

    _check_arch(args.target, args.arch)
    module = load_module(args.file)
    fusions = selected_fusions(module, args.fusion)
    directory, single = _destinations(args.output, [f.name for f in fusions])
    directory.mkdir(parents=True, exist_ok=True)
    for fusion in fusions:
        dump = DumpWriter(args.dump_dir, fusion.name) if args.dump_dir else None
        compiled = compile_kernel(fusion, args.target, args.arch, dump=dump)
        written = []
        for extension, data in compiled.artifacts():
            if single is not None:
                stem = Path(single)
                known = stem.suffix in (".ptx", ".cubin", ".hsaco")
                name = f"{stem.stem if known else stem.name}.{extension}"
            else:
                name = f"{function_name(fusion.name)}.{extension}"
            path = directory / name
            path.write_bytes(data)
            written.append(f"{path} ({len(data)} bytes)")
        stages = ", ".join(f"{stage} {seconds * 1000:.1f}" for stage, seconds in compiled.timings)
        print(
            f"fusion {compiled.fusion_name}: {compiled.emitter} emitter, kernel"
            f" {compiled.kernel_name} for {compiled.arch}, {compiled.launch}"
        )
        print(f"  wrote {'; '.join(written)}")
        print(f"  {compiled.total_seconds * 1000:.1f} ms ({stages} ms)")
        if dump is not None:
            print(f"  dumped {len(dump.written)} stages to {args.dump_dir}")
    return 0
