"""``heron check FILE.hlo``: do the file's kernels compute what the reference evaluator computes?

For every fusion (or ``--fusion NAME``): compile for the ``--target`` device
(``--arch``; default h100) through ``--backend`` (default the interpreter,
which emulates that device's warps), run on two input sets (edge values, moderate values),
compare each output with heron's reference evaluator (bitwise, or within the
documented ulp bounds of approximated transcendental ops), and check that
every output element was written (exactly once for loop-family emitters and
the RUN line's ``--bijection_outputs``) and the ``--bijection_inputs`` read
exactly once. Prints one line per fusion, a line per problem, and a
summary; exits 0 when everything agrees, 1 when a kernel disagrees (or fails),
2 for a request that cannot be served (no such file or fusion, a backend not
available here, or when the only problems are fusions refused as too large
rather than checked).
"""

from __future__ import annotations

import argparse
from pathlib import Path

from heron.cli.common import (
    CommandError,
    add_target_arguments,
    load_module,
    refuse_tiled_layouts,
    resolve_target,
)
from heron.cli.progress import ProgressDisplay

#: The exit status of a check whose fusions were refused (too large), not compared.
EXIT_REFUSED = 2


def register(subparsers: argparse._SubParsersAction) -> None:
    from heron.harness.check import DEFAULT_MAX_ELEMENTS

    parser = subparsers.add_parser(
        "check",
        help="run a module's kernels and compare them with the reference evaluator",
        description=(
            "Compile every fusion of an HLO file, run it on a device on random inputs with"
            " edge values, and compare with heron's reference evaluator; also check that every"
            " output element is written (exactly once where the emitter is a bijection) and the"
            " RUN line's gpu_test_correctness bijection flags. Exit status 1 when a kernel"
            " disagrees."
        ),
    )
    parser.add_argument(
        "file",
        metavar="FILE.hlo|FOLDER",
        help="HLO text (a module or a corpus file), or a folder: every .hlo file under it"
        " (a corpus), checked one after the other, with a summary",
    )
    parser.add_argument(
        "--backend",
        default="interpreter",
        choices=("interpreter", "cuda", "rocm"),
        help="where the kernels run (default: interpreter)",
    )
    add_target_arguments(parser, "the kernels are compiled for (the interpreter emulates it)")
    parser.add_argument("--fusion", metavar="NAME", help="only this fusion")
    parser.add_argument("--seed", type=int, default=0, help="seed of the random inputs")
    parser.add_argument(
        "--max-elements",
        type=int,
        default=DEFAULT_MAX_ELEMENTS,
        metavar="N",
        help=f"refuse fusions with a buffer of more elements (default {DEFAULT_MAX_ELEMENTS})",
    )
    parser.set_defaults(handler=run)


def run(args: argparse.Namespace) -> int:
    from heron.compiler.fusions import selected_fusions
    from heron.harness.check import CheckOptions, check_fusions
    from heron.harness.run_lines import RunLineError, parse_run_lines
    from heron.hlo.parser import read_hlo_text

    if args.max_elements < 1:
        raise CommandError(f"--max-elements {args.max_elements}: must be positive")
    if corpus_folder(Path(args.file)):
        return run_folder(args)
    module = load_module(args.file)
    refuse_tiled_layouts(module, "heron check")
    try:
        spec = parse_run_lines(read_hlo_text(args.file), Path(args.file).name)
    except RunLineError as exc:
        raise CommandError(str(exc)) from exc
    target = resolve_target(args, None if args.backend == "interpreter" else args.backend)
    options = CheckOptions(args.backend, args.fusion, args.seed, args.max_elements, target)
    fusions = selected_fusions(module, args.fusion)
    with ProgressDisplay() as display:
        device = _device(options, display)
        report = check_fusions(fusions, Path(args.file).name, options, spec, device, module)
    print(report.text())
    return exit_code(report)


def corpus_folder(path: Path) -> bool:
    """Whether ``path`` is a folder of ``.hlo`` files (an XLA dump folder holds ``.txt``)."""
    return path.is_dir() and next(path.rglob("*.hlo"), None) is not None


def _device(options, display: ProgressDisplay):
    """The device the kernels run on; on the interpreter, its launches drive a bar."""
    from heron.runtime.core.registry import default_backends

    device = default_backends().create_device(options.backend, options.target)
    if options.backend == "interpreter":
        device.progress = display.launches()
    return device


def run_folder(args: argparse.Namespace) -> int:
    """``heron check FOLDER``: every ``.hlo`` file under it, in path order, then a summary.

    Each file's report is printed as ``heron check FILE`` prints it (named by
    its path in the folder); a file that cannot be read or parsed gets one
    line saying why. Exit status: 1 when any kernel disagrees, else 2 when
    any file was refused or unreadable, else 0.
    """
    from heron.compiler.fusions import selected_fusions
    from heron.harness.check import CheckOptions, check_fusions
    from heron.harness.run_lines import RunLineError, parse_run_lines
    from heron.hlo.errors import HloError
    from heron.hlo.parser import read_hlo_text

    if args.fusion is not None:
        raise CommandError(f"--fusion names a fusion of one file; {args.file} is a folder")
    root = Path(args.file)
    files = sorted(root.rglob("*.hlo"))
    target = resolve_target(args, None if args.backend == "interpreter" else args.backend)
    options = CheckOptions(args.backend, None, args.seed, args.max_elements, target)
    codes: list[int] = []
    with ProgressDisplay() as display:
        bar = display.task("checking", len(files))
        device = _device(options, display)
        for path in files:
            label = str(path.relative_to(root))
            if bar is not None:
                bar.advance(0, description=f"checking {label}")
            try:
                module = load_module(str(path))
                refuse_tiled_layouts(module, "heron check")
                spec = parse_run_lines(read_hlo_text(path), path.name)
                report = check_fusions(
                    selected_fusions(module, None), label, options, spec, device, module
                )
            except HloError as exc:  # located: it names the file, line and column
                print(str(exc).splitlines()[0])
                codes.append(EXIT_REFUSED)
            except (CommandError, RunLineError) as exc:
                print(f"{label}: error: {exc}")
                codes.append(EXIT_REFUSED)
            else:
                print(report.text())
                codes.append(exit_code(report))
            if bar is not None:
                bar.advance()
    agree = codes.count(0)
    disagree = codes.count(1)
    print(
        f"checked {len(files)} file(s) under {args.file}: {agree} agree, {disagree} disagree,"
        f" {len(codes) - agree - disagree} refused or unreadable"
    )
    if disagree:
        return 1
    return EXIT_REFUSED if agree < len(codes) else 0


def exit_code(report) -> int:
    """0 all agree; 2 when the only problems are refusals (too large); else 1 (disagreement)."""
    if report.ok:
        return 0
    kinds = {finding.kind for finding in report.findings}
    if not report.errors and kinds == {"refused"}:
        return EXIT_REFUSED
    return report.exit_code
