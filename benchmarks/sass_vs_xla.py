"""The SASS of elementwise math kernels, heron's against XLA:GPU's (issue 29), without a GPU.

    HERON_XLA_PYTHON=... python benchmarks/sass_vs_xla.py [--target h100] [--markdown]
        [--only tanh,gelu_tanh_bf16,...]

Each workload is one loop fusion over 4M elements of transcendental math (the
kernels that are compute-bound on an H100/H200, where SASS size predicted the
GPU's time: issue 29's GELU ran at 0.27 ms against XLA's 0.17 with 360 against
144 SASS instructions). Both compilers compile it for the target (XLA deviceless,
``heron xla``'s machinery); one ptxas and one nvdisasm measure both. Printed per
workload: SASS instructions of each side and their ratio, the instructions in
slow-path subroutines (an IEEE division's or square root's), MUFU instructions,
and the same launch or not; then the geometric mean of the ratios. Issue 29's
acceptance: every ratio at most 1.2, and no slow path where XLA has none.

Needs XLA:GPU (``pip install 'heron[xla]'`` or ``HERON_XLA_PYTHON``), ptxas and
nvdisasm (heron-runtime-cuda[compile]). Nothing is timed.
"""

from __future__ import annotations

import argparse
import math
import sys

N = 4 * 1024 * 1024


def _unary(name: str, opcode: str, dtype: str = "f32") -> tuple[str, str]:
    shape = f"{dtype}[{N}]"
    return (
        name,
        f"""
HloModule {name}

fused {{
  p = {shape} parameter(0)
  ROOT r = {shape} {opcode}(p)
}}

ENTRY main {{
  p = {shape} parameter(0)
  ROOT f = {shape} fusion(p), kind=kLoop, calls=fused
}}
""",
    )


def _binary(name: str, opcode: str, dtype: str = "f32") -> tuple[str, str]:
    shape = f"{dtype}[{N}]"
    return (
        name,
        f"""
HloModule {name}

fused {{
  p = {shape} parameter(0)
  q = {shape} parameter(1)
  ROOT r = {shape} {opcode}(p, q)
}}

ENTRY main {{
  p = {shape} parameter(0)
  q = {shape} parameter(1)
  ROOT f = {shape} fusion(p, q), kind=kLoop, calls=fused
}}
""",
    )


def _gelu_tanh(dtype: str) -> tuple[str, str]:
    shape = f"{dtype}[{N}]"

    def constant(name: str, value: float) -> str:
        return (
            f"  {name}c = {dtype}[] constant({value})\n"
            f"  {name} = {shape} broadcast({name}c), dimensions={{}}"
        )

    return (
        f"gelu_tanh_{dtype}",
        f"""
HloModule gelu_tanh_{dtype}

fused {{
  x = {shape} parameter(0)
{constant("half", 0.5)}
{constant("one", 1)}
{constant("k0", 0.7978845608)}
{constant("k1", 0.044715)}
  x2 = {shape} multiply(x, x)
  x3 = {shape} multiply(x2, x)
  t0 = {shape} multiply(x3, k1)
  t1 = {shape} add(x, t0)
  t2 = {shape} multiply(t1, k0)
  t3 = {shape} tanh(t2)
  t4 = {shape} add(t3, one)
  t5 = {shape} multiply(t4, half)
  ROOT r = {shape} multiply(x, t5)
}}

ENTRY main {{
  x = {shape} parameter(0)
  ROOT f = {shape} fusion(x), kind=kLoop, calls=fused
}}
""",
    )


def _softplus() -> tuple[str, str]:
    shape = f"f32[{N}]"
    return (
        "softplus",
        f"""
HloModule softplus

fused {{
  x = {shape} parameter(0)
  e = {shape} exponential(x)
  ROOT r = {shape} log-plus-one(e)
}}

ENTRY main {{
  x = {shape} parameter(0)
  ROOT f = {shape} fusion(x), kind=kLoop, calls=fused
}}
""",
    )


WORKLOADS = dict(
    [
        _unary("tanh", "tanh"),
        _unary("tanh_bf16", "tanh", "bf16"),
        _unary("logistic", "logistic"),
        _unary("logistic_bf16", "logistic", "bf16"),
        _unary("exp", "exponential"),
        _unary("expm1", "exponential-minus-one"),
        _unary("log", "log"),
        _unary("log1p", "log-plus-one"),
        _unary("sin", "sine"),
        _unary("cos", "cosine"),
        _unary("erf", "erf"),
        _unary("rsqrt", "rsqrt"),
        _unary("sqrt", "sqrt"),
        _unary("cbrt", "cbrt"),
        _binary("divide", "divide"),
        _binary("power", "power"),
        _binary("atan2", "atan2"),
        _gelu_tanh("f32"),
        _gelu_tanh("bf16"),
        _softplus(),
    ]
)


def measure(name: str, text: str, target: str) -> dict:
    from heron.hlo.parser import parse_module
    from heron.xla_compare.compare import compare_module

    comparison = compare_module(parse_module(text), name, target)
    if comparison.xla_error:
        return {"name": name, "error": f"XLA: {comparison.xla_error}"}
    (pair,) = [p for p in comparison.pairs if p.heron is not None]
    if pair.heron.error or pair.xla is None:
        return {"name": name, "error": pair.heron.error or "no XLA kernel"}
    if pair.heron.sass is None or pair.xla.sass is None:
        return {"name": name, "error": "; ".join(comparison.notes[1:]) or "no SASS"}
    heron, xla = pair.heron.sass, pair.xla.sass
    return {
        "name": name,
        "heron": heron.instructions,
        "xla": xla.instructions,
        "ratio": heron.instructions / max(xla.instructions, 1),
        "heron_slow": heron.subroutine_instructions,
        "xla_slow": xla.subroutine_instructions,
        "heron_mufu": heron.mufu_count,
        "xla_mufu": xla.mufu_count,
        "same_launch": pair.same_launch,
    }


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--target", default="h100")
    parser.add_argument("--only", help="comma-separated workload names")
    parser.add_argument("--markdown", action="store_true", help="a docs/benchmarks.md table")
    args = parser.parse_args(argv)
    names = args.only.split(",") if args.only else list(WORKLOADS)
    unknown = [n for n in names if n not in WORKLOADS]
    if unknown:
        parser.error(f"unknown workloads {unknown} (known: {', '.join(WORKLOADS)})")
    rows = [measure(name, WORKLOADS[name], args.target) for name in names]
    header = ["workload", "heron SASS", "XLA SASS", "heron/XLA", "slow path (heron/XLA)"]
    header += ["MUFU (heron/XLA)", "same launch"]
    if args.markdown:
        print("| " + " | ".join(header) + " |")
        print("|" + "---|" * len(header))
    else:
        print("  ".join(f"{h:>12}" for h in header))
    ratios = []
    for row in rows:
        if "error" in row:
            print(f"{row['name']}: {row['error']}")
            continue
        ratios.append(row["ratio"])
        cells = [
            row["name"],
            str(row["heron"]),
            str(row["xla"]),
            f"{row['ratio']:.2f}",
            f"{row['heron_slow']}/{row['xla_slow']}",
            f"{row['heron_mufu']}/{row['xla_mufu']}",
            "yes" if row["same_launch"] else "no",
        ]
        if args.markdown:
            print("| " + " | ".join(cells) + " |")
        else:
            print("  ".join(f"{c:>12}" for c in cells))
    if ratios:
        geomean = math.exp(sum(math.log(r) for r in ratios) / len(ratios))
        over = [r["name"] for r in rows if "ratio" in r and r["ratio"] > 1.2]
        print(
            f"\ngeomean heron/XLA SASS: {geomean:.2f} over {len(ratios)} workloads;"
            f" above 1.2: {', '.join(over) or 'none'}"
        )
    return 0


if __name__ == "__main__":
    sys.exit(main())
