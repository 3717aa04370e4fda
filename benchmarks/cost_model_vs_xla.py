"""heron's fusion cost model beside XLA:GPU's, price by price, on the same modules.

XLA's priority fusion writes what its cost model says of every producer in
``priority_fusion_dump.txt`` (``xla_dump_hlo_pass_re=priority-fusion``): for each,
the microseconds of it fused into all its users (``us_fused``) and of them apart
(``us_unfused``). This compiles every program of the corpora with XLA:GPU,
deviceless (``heron[xla]`` or ``HERON_XLA_PYTHON``, docs/xla.md), reads the first
round of that dump (every price before XLA's first fusion), and prices the same
producers on heron's module as its priority fusion first sees it (the GPU pipeline's
passes before ``priority-fusion``; :func:`heron.compiler.fusion.priority_fusion.first_priorities`).
A producer is matched by name (XLA's clone of ``mul.36`` is ``mul.36.0``) and only
where both fuse it into the same users. Per program and over all, it prints the
pairs matched and the median and the 10th and 90th percentiles of heron's price over
XLA's, fused and apart, and how often the two agree on whether fusing saves time
(the decision priority fusion makes).

    python benchmarks/cost_model_vs_xla.py [--corpus programs,models] [--only corpus/name,...]
"""

from __future__ import annotations

import argparse
import re
import statistics
import sys
import tempfile
from pathlib import Path

REPOSITORY = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(Path(__file__).resolve().parent))

from benchlib.selection import selected  # noqa: E402

_STEP = re.compile(r"fusion_steps \{\s*(\w+) \{(.*?)\n  \}\n\}", re.S)
_FIELD = re.compile(r'(\w+): (?:"([^"]*)"|([-0-9.e+]+))')


def xla_first_round(dump_text: str) -> dict[str, tuple[tuple[str, ...], float, float]]:
    """XLA's ``update_priority`` records before its first ``fusion`` step, by producer:
    its users and its fused and unfused microseconds (XLA's clone suffix dropped)."""
    prices: dict[str, tuple[tuple[str, ...], float, float]] = {}
    for kind, body in _STEP.findall(dump_text):
        if kind == "fusion":
            break
        if kind != "update_priority":
            continue
        fields: dict[str, list[str]] = {}
        for key, text, number in _FIELD.findall(body):
            fields.setdefault(key, []).append(text or number)
        producer = _original(fields["producer_name"][0])
        users = tuple(sorted(_original(u) for u in fields.get("consumer_names", [])))
        prices[producer] = (users, float(fields["us_fused"][0]), float(fields["us_unfused"][0]))
    return prices


def _original(name: str) -> str:
    """The input's name of an instruction XLA cloned (``mul.36.0`` -> ``mul.36``)."""
    return re.sub(r"\.\d+$", "", name)


def heron_first_round(module, target) -> dict[str, tuple[tuple[str, ...], float, float]]:
    """heron's first prices, by producer, in microseconds."""
    from heron.compiler.fusion import gpu_pipeline
    from heron.compiler.fusion.priority_fusion import first_priorities
    from heron.hlo.passes import run_pipeline
    from heron.hlo.passes.manager import Pipeline

    steps = []

    def flatten(pipeline) -> None:
        for step in pipeline.steps:
            flatten(step) if isinstance(step, Pipeline) else steps.append(step)

    flatten(gpu_pipeline(target))
    before = steps[: [step.name for step in steps].index("priority-fusion")]
    run_pipeline(module, Pipeline("before-priority-fusion", before))
    return {
        p.producer: (tuple(sorted(p.users)), p.fused_seconds * 1e6, p.apart_seconds * 1e6)
        for p in first_priorities(module, target)
    }


def _percentiles(ratios: list[float]) -> str:
    if not ratios:
        return "-"
    ordered = sorted(ratios)
    low = ordered[int(0.1 * (len(ordered) - 1))]
    high = ordered[int(0.9 * (len(ordered) - 1))]
    return f"{statistics.median(ordered):.3f} [{low:.3f}, {high:.3f}]"


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--corpus", default="programs,models")
    parser.add_argument("--only", default="", help="comma-separated corpus/name")
    args = parser.parse_args(argv)

    from heron.hlo.parser import parse_module_file
    from heron.target import Target
    from heron.xla_compare import find_xla, target_config
    from heron.xla_compare.module_text import xla_module_text
    from heron.xla_compare.xla_side import XlaCompileError, compile_with_xla

    installation = find_xla()
    target = Target.preset("h100")
    totals = {"fused": [], "apart": [], "agree": 0, "pairs": 0}
    print(
        f"{'program':56s} {'pairs':>5s}  {'fused heron/XLA':>24s}  {'apart heron/XLA':>24s}  agree"
    )
    known = {
        f"{corpus}/{path.parent.name}": path
        for corpus in args.corpus.split(",")
        for path in sorted((REPOSITORY / corpus).glob("*/module.hlo"))
    }
    for name in selected(parser, args.only, known, "program"):
        module = parse_module_file(known[name])
        with tempfile.TemporaryDirectory(prefix="heron-costs-") as scratch:
            try:
                compile_with_xla(
                    xla_module_text(module),
                    target_config("h100"),
                    installation,
                    options={"xla_dump_hlo_pass_re": "priority-fusion"},
                    dump_dir=Path(scratch),
                )
            except XlaCompileError as exc:
                print(f"{name:56s} XLA refused it: {exc}")
                continue
            dumps = list(Path(scratch).glob("*priority_fusion_dump.txt"))
            xla = xla_first_round(dumps[0].read_text()) if dumps else {}
        heron = heron_first_round(module, target)
        fused, apart, agree = [], [], 0
        for producer, (users, xla_fused, xla_apart) in xla.items():
            mine = heron.get(producer)
            if mine is None or mine[0] != users:
                continue
            fused.append(mine[1] / xla_fused)
            apart.append(mine[2] / xla_apart)
            agree += (mine[1] <= mine[2]) == (xla_fused <= xla_apart)
        totals["fused"] += fused
        totals["apart"] += apart
        totals["agree"] += agree
        totals["pairs"] += len(fused)
        print(
            f"{name:56s} {len(fused):>5d}  {_percentiles(fused):>24s}  "
            f"{_percentiles(apart):>24s}  {agree}/{len(fused)}",
            flush=True,
        )
    print(
        f"{'all':56s} {totals['pairs']:>5d}  {_percentiles(totals['fused']):>24s}  "
        f"{_percentiles(totals['apart']):>24s}  {totals['agree']}/{totals['pairs']}"
    )
    return 0


if __name__ == "__main__":
    sys.exit(main())
