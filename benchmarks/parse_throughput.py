"""Parse and print throughput of heron's HLO text parser and printer.

Generates a realistic module of about 50,000 instructions (elementwise chains,
broadcasts, scalar constants, reduces with to_apply, dots, transposes, a few
dozen fusions, metadata on most instructions, a debug-section header), then
times ``parse_module`` and ``print_module`` (median CPU time of several runs
each, so that other processes on the machine disturb the figures less) and
prints instructions per second.

Baselines, measured in the same run on the same text so the ratios do not
depend on the machine:

* ``json``: ``json.loads`` of an equivalent JSON document (every instruction as
  an object with its name, shape, opcode, operands and attribute texts), i.e.
  what reading the same information with a C parser costs;
* ``lines+regex``: ``str.splitlines`` plus one ``re.findall`` of ``%names``
  over the text, about the least any Python reader of the text can do.

Run: ``python benchmarks/parse_throughput.py [--instructions N] [--runs R]``.
"""

from __future__ import annotations

import argparse
import json
import random
import re
import statistics
import time

from benchlib.progress import tracked

from heron.hlo.parser import parse_module
from heron.hlo.printer import print_module

SHAPES = [
    "f32[128,1024]{1,0}",
    "f32[1024,128]{1,0}",
    "bf16[128,1024]{1,0}",
    "f32[32,128,64]{2,1,0}",
    "f32[4096]{0}",
    "s32[128,1024]{1,0}",
    "f32[256,256]{1,0}",
    "f16[64,512]{1,0}",
]
UNARY = ["tanh", "exponential", "negate", "sqrt", "rsqrt", "log", "abs", "logistic"]
BINARY = ["add", "multiply", "subtract", "divide", "maximum", "minimum"]
LAYERS = [f"layer_{i}" for i in range(48)]
OPS = ["dense/mul", "dense/add", "gelu/tanh", "norm/rsqrt", "attn/softmax", "attn/dot_general"]


def generate_module(instructions: int, seed: int = 0) -> str:
    """HLO text of a module with about ``instructions`` instructions."""
    rng = random.Random(seed)
    metadata_pool = [
        f'metadata={{op_name="jit(train_step)/jit(main)/{rng.choice(LAYERS)}/{rng.choice(OPS)}"'
        f' source_file="/home/user/model.py" source_line={rng.randint(10, 2000)}}}'
        for _ in range(2000)
    ]
    lines = [
        "HloModule jit_train_step, is_scheduled=true, entry_computation_layout="
        "{(f32[128,1024]{1,0}, f32[1024,128]{1,0})->f32[128,1024]{1,0}}",
        "",
        "FileNames",
        '1 "/home/user/model.py"',
        "",
    ]
    for r in range(4):
        lines += [
            f"%region_add.{r} (x.{r}: f32[], y.{r}: f32[]) -> f32[] {{",
            f"  %x.{r} = f32[] parameter(0)",
            f"  %y.{r} = f32[] parameter(1)",
            f"  ROOT %sum.{r} = f32[] add(%x.{r}, %y.{r})",
            "}",
            "",
        ]
    count = 4 * 3
    fusions = 40
    for fi in range(fusions):
        lines.append(
            f"%fused_computation.{fi} (param_0.{fi}: f32[128,1024], param_1.{fi}: f32[128,1024])"
            " -> f32[128,1024] {"
        )
        lines.append(f"  %param_0.{fi} = f32[128,1024]{{1,0}} parameter(0)")
        lines.append(f"  %param_1.{fi} = f32[128,1024]{{1,0}} parameter(1)")
        prev = [f"param_0.{fi}", f"param_1.{fi}"]
        for k in range(12):
            name = f"f{fi}.{k}"
            op = rng.choice(BINARY)
            lines.append(
                f"  %{name} = f32[128,1024]{{1,0}} {op}(%{prev[-1]}, %{prev[-2]}),"
                f" {rng.choice(metadata_pool)}"
            )
            prev.append(name)
        lines.append(f"  ROOT %f{fi}.out = f32[128,1024]{{1,0}} tanh(%{prev[-1]})")
        lines.append("}")
        lines.append("")
        count += 15
    lines.append("ENTRY %main (p0: f32[128,1024], p1: f32[1024,128]) -> f32[128,1024] {")
    lines.append('  %p0 = f32[128,1024]{1,0} parameter(0), metadata={op_name="x"}')
    lines.append('  %p1 = f32[1024,128]{1,0} parameter(1), metadata={op_name="y"}')
    values = ["p0"]
    i = 0
    remaining = instructions - count - 3
    while i < remaining:
        i += 1
        name = f"v.{i}"
        meta = ", " + rng.choice(metadata_pool) if rng.random() < 0.85 else ""
        kind = rng.random()
        a = rng.choice(values[-20:])
        b = rng.choice(values[-20:])
        shape = "f32[128,1024]{1,0}"
        if kind < 0.08:
            lines.append(f"  %c.{i} = f32[] constant({rng.choice(['0', '1', '0.5', '-inf', '2'])})")
            lines.append(f"  %{name} = {shape} broadcast(%c.{i}), dimensions={{}}{meta}")
            i += 1
        elif kind < 0.45:
            lines.append(f"  %{name} = {shape} {rng.choice(BINARY)}(%{a}, %{b}){meta}")
        elif kind < 0.7:
            lines.append(f"  %{name} = {shape} {rng.choice(UNARY)}(%{a}){meta}")
        elif kind < 0.76:
            lines.append(
                f"  %cmp.{i} = pred[128,1024]{{1,0}} compare(%{a}, %{b}), direction=GT{meta}"
            )
            lines.append(f"  %{name} = {shape} select(%cmp.{i}, %{a}, %{b}){meta}")
            i += 1
        elif kind < 0.82:
            lines.append(f"  %z.{i} = f32[] constant(0)")
            lines.append(
                f"  %r.{i} = f32[128]{{0}} reduce(%{a}, %z.{i}), dimensions={{1}},"
                f" to_apply=%region_add.{rng.randrange(4)}{meta}"
            )
            lines.append(f"  %{name} = {shape} broadcast(%r.{i}), dimensions={{0}}{meta}")
            i += 2
        elif kind < 0.88:
            lines.append(
                f"  %t.{i} = f32[1024,128]{{1,0}} transpose(%{a}), dimensions={{1,0}}{meta}"
            )
            lines.append(
                f"  %{name} = {shape} dot(%{b}, %p1), lhs_contracting_dims={{1}},"
                f" rhs_contracting_dims={{0}}{meta}"
            )
            i += 1
        elif kind < 0.94:
            fi = rng.randrange(fusions)
            lines.append(
                f"  %{name} = {shape} fusion(%{a}, %{b}), kind=kLoop,"
                f" calls=%fused_computation.{fi}{meta}"
            )
        else:
            lines.append(f"  %{name} = {shape} copy(%{a}){meta}")
        values.append(name)
    lines.append(f"  ROOT %result = f32[128,1024]{{1,0}} add(%{values[-1]}, %{values[-2]})")
    lines.append("}")
    lines.append("")
    return "\n".join(lines)


_INSTRUCTION = re.compile(r"(?:ROOT )?%(\S+) = (\S+|\([^=]*\)) ([a-z\-]+)\((.*?)\)(.*)")


def equivalent_json(text: str) -> str:
    """The instructions of ``text`` as a JSON document (the json baseline's input)."""
    records = []
    for line in text.splitlines():
        m = _INSTRUCTION.match(line.strip())
        if m:
            name, shape, opcode, operands, attributes = m.groups()
            records.append(
                {
                    "name": name,
                    "shape": shape,
                    "opcode": opcode,
                    "operands": [o.strip() for o in operands.split(",") if o.strip()],
                    "attributes": attributes,
                }
            )
    return json.dumps({"instructions": records})


def median_time(fn, runs: int) -> float:
    """Median CPU time of ``runs`` calls (CPU time, not wall time: the figures
    stay meaningful when other processes share the machine)."""
    times = []
    for _ in tracked(range(runs), "runs"):
        start = time.process_time()
        fn()
        times.append(time.process_time() - start)
    return statistics.median(times)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--instructions", type=int, default=50_000)
    ap.add_argument("--runs", type=int, default=5)
    args = ap.parse_args()

    text = generate_module(args.instructions)
    module = parse_module(text, "<benchmark>")
    n = sum(len(c.instructions) for c in module.computations)
    printed = print_module(module)
    document = equivalent_json(text)
    pattern = re.compile(r"%[A-Za-z0-9_.\-]+")

    parse_s = median_time(lambda: parse_module(text, "<benchmark>"), args.runs)
    print_s = median_time(lambda: print_module(module), args.runs)
    json_s = median_time(lambda: json.loads(document), args.runs)
    lines_s = median_time(lambda: (text.splitlines(), pattern.findall(text)), args.runs)

    print(
        f"module: {n} instructions, {len(text) / 1e6:.1f} MB of text"
        f" (printed: {len(printed) / 1e6:.1f} MB)"
    )
    print(f"parse: {parse_s * 1e3:8.1f} ms  {n / parse_s:>10,.0f} instructions/s")
    print(f"print: {print_s * 1e3:8.1f} ms  {n / print_s:>10,.0f} instructions/s")
    print(
        f"baseline json.loads of the same instructions ({len(document) / 1e6:.1f} MB):"
        f" {json_s * 1e3:.1f} ms -> parse is {parse_s / json_s:.1f}x json.loads"
    )
    print(
        f"baseline splitlines + regex findall of names: {lines_s * 1e3:.1f} ms"
        f" -> parse is {parse_s / lines_s:.1f}x that"
    )


if __name__ == "__main__":
    main()
