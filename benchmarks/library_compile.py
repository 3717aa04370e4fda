"""heron's whole compile of large library programs beside XLA:GPU's.

The programs of ``library_programs.PROGRAMS`` (a brax gradient through three physics
steps, a jax-cosmo Fisher matrix by ``jacfwd``, a diffrax neural ODE's gradient, numpyro
and blackjax NUTS chains, ``expn`` and its gradient: many while loops and computations)
are compiled whole for the h100 preset, to cubins (``opt_time.py --full``'s compile), the
median of ``--runs`` runs after an untimed warm-up compile; with ``--xla``, XLA:GPU's
deviceless compile of the same text in the same run (heron[xla], docs/xla.md), heron and
XLA taking turns run by run so that a load beside them weighs on both alike.

The programs need the libraries, which heron's environment need not have: write them
once where they are installed and read them here::

    python benchmarks/library_programs.py /tmp/library-hlo    # brax, jax-cosmo, ... there
    python benchmarks/library_compile.py --hlo-dir /tmp/library-hlo --xla [--runs 3]
    python benchmarks/library_compile.py --hlo-dir /tmp/library-hlo --passes 3  # HLO passes

Without ``--hlo-dir`` the programs are built in this process (the libraries installed
beside heron). A program heron refuses prints the refusal in its row.
"""

from __future__ import annotations

import argparse
import statistics
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))

from benchlib.selection import selected  # noqa: E402
from library_programs import PROGRAMS  # noqa: E402
from opt_time import heron_pipeline, time_heron, time_xla, warm_up_heron  # noqa: E402


def _text(name: str, hlo_dir: Path | None) -> str:
    if hlo_dir is None:
        return PROGRAMS[name]().hlo()
    return (hlo_dir / f"{name}.hlo").read_text()


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--runs", type=int, default=1)
    parser.add_argument("--xla", action="store_true", help="also time XLA:GPU's compile")
    parser.add_argument("--only", help="comma-separated program names")
    parser.add_argument("--hlo-dir", type=Path, help="read NAME.hlo here (library_programs.py)")
    parser.add_argument(
        "--passes",
        type=int,
        metavar="N",
        help="time heron's HLO passes only (no kernels, no XLA), and print the N slowest",
    )
    args = parser.parse_args(argv)
    if args.passes is not None:
        return _time_passes(args, parser)
    names = selected(parser, args.only, PROGRAMS, "program")

    installation = None
    if args.xla:
        from heron.xla_compare import find_xla

        installation = find_xla()
    warm_up_heron(True)
    print(f"library programs; whole compile for h100, median of {args.runs}")
    header = f"{'program':<26} {'lines':>6} {'whiles':>6} {'heron s':>8} {'kernels':>7}"
    print(header + (f" {'XLA s':>8} {'heron/XLA':>9}" if installation else ""))
    for name in names:
        text = _text(name, args.hlo_dir)
        lines, whiles = len(text.splitlines()), text.count(" while(")
        heron_s, xla_s, kernels = [], [], 0
        try:
            for _ in range(args.runs):
                parse_s, compile_s, kernels, _, _ = time_heron(
                    text, 1, lambda: heron_pipeline()[1], full=True
                )
                heron_s.append(parse_s + compile_s)
                if installation is not None:
                    seconds = time_xla(text, installation, 1)
                    if seconds is not None:
                        xla_s.append(seconds)
        except Exception as exc:  # a refusal is this benchmark's finding: print it
            print(f"{name:<26} {lines:>6} {whiles:>6} refused: {exc}", flush=True)
            continue
        seconds = statistics.median(heron_s)
        line = f"{name:<26} {lines:>6} {whiles:>6} {seconds:>8.2f} {kernels:>7}"
        if xla_s:
            xla = statistics.median(xla_s)
            line += f" {xla:>8.2f} {seconds / xla:>9.2f}"
        print(line, flush=True)
    return 0


def _time_passes(args: argparse.Namespace, parser: argparse.ArgumentParser) -> int:
    """The HLO pipeline alone per program: the median of ``--runs`` and the slowest passes
    of the last run (each pass name's runs summed)."""
    names = selected(parser, args.only, PROGRAMS, "program")
    warm_up_heron(False)
    print(f"library programs; heron's HLO passes for h100, median of {args.runs}")
    for name in names:
        text = _text(name, args.hlo_dir)
        _, seconds, _, passes, _ = time_heron(text, args.runs, lambda: heron_pipeline()[1])
        print(f"{name:<26} {seconds:>8.2f} s", flush=True)
        by_name: dict[str, float] = {}
        for path, pass_seconds in passes:
            pass_name = path.rsplit("/", 1)[-1]
            by_name[pass_name] = by_name.get(pass_name, 0.0) + pass_seconds
        for pass_name, pass_seconds in sorted(by_name.items(), key=lambda e: -e[1])[: args.passes]:
            print(f"  {pass_name:<34} {pass_seconds:>8.2f} s", flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
