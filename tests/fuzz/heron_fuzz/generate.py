"""Generated valid fusions: a seeded generator over dtypes, shapes, layouts and ops.

Mutants mostly test refusals; these test the other half of the contract: a
valid fusion must compile for both targets and agree with the reference
evaluator (exit 0), or be refused with one message (exit 2). A plain
``random.Random`` generator rather than hypothesis strategies: cases must be a
function of (seed, index) alone so that a 10,000-case run and a replay of its
case 4711 build the same module, outside any test runner.
"""

from __future__ import annotations

import random
from dataclasses import dataclass

FLOATS = ("f32", "f16", "bf16", "f64")
INTS = ("s8", "s16", "s32", "s64", "u8", "u32", "s4")
DTYPES = FLOATS + INTS
SIZES = (1, 2, 3, 4, 7, 8, 16, 31, 32, 33, 64, 127, 128, 129)
#: Interpreter time grows with the elements: keep each buffer small.
MAX_ELEMENTS = 1 << 15
UNARY = {"float": ("negate", "abs", "exponential", "tanh", "sqrt", "floor"), "int": ("negate",)}
#: Unary ops the kernels approximate (a few ulps from the reference: expand-math).
APPROXIMATED = ("exponential", "tanh")
BINARY = ("add", "subtract", "multiply", "maximum", "minimum")


@dataclass
class Value:
    """An instruction of the fused computation: its name, type, dims and layout."""

    name: str
    dtype: str
    dims: list[int]
    layout: list[int]

    @property
    def shape(self) -> str:
        return f"{self.dtype}[{','.join(map(str, self.dims))}]{{{','.join(map(str, self.layout))}}}"


def _elements(dims: list[int]) -> int:
    n = 1
    for d in dims:
        n *= d
    return n


class FusionBuilder:
    """Builds one fusion as text, instruction by instruction, keeping it valid."""

    def __init__(self, rng: random.Random) -> None:
        self.rng = rng
        self.lines: list[str] = []
        self.params: list[Value] = []
        self.reducers: set[str] = set()
        self.ops: list[str] = []
        self.counter = 0

    def layout(self, rank: int) -> list[int]:
        """Minor-to-major order: the default (rank-1..0) most often, else a permutation."""
        order = list(range(rank - 1, -1, -1))
        if self.rng.random() < 0.4:
            self.rng.shuffle(order)
        return order

    def fresh(self, stem: str) -> str:
        self.counter += 1
        return f"{stem}.{self.counter}"

    def emit(self, value: Value, expr: str) -> Value:
        self.lines.append(f"  {value.name} = {value.shape} {expr}")
        return value

    def parameter(self, dtype: str, dims: list[int]) -> Value:
        value = Value(f"p{len(self.params)}", dtype, dims, self.layout(len(dims)))
        self.params.append(value)
        return self.emit(value, f"parameter({len(self.params) - 1})")

    def dims(self) -> list[int]:
        while True:
            rank = self.rng.choice((1, 2, 2, 3))
            dims = [self.rng.choice(SIZES) for _ in range(rank)]
            if self.rng.random() < 0.05:
                dims[self.rng.randrange(rank)] = 0
            if _elements(dims) <= MAX_ELEMENTS:
                return dims

    def inexact(self, x: Value) -> bool:
        """Whether ``x`` depends on a float reduction (so differs by rounding)."""
        return x.dtype in FLOATS and "reduce" in self.ops

    def approximate(self, x: Value) -> bool:
        """Whether ``x`` depends on an approximated op (exp, tanh: a few ulps off)."""
        return x.dtype in FLOATS and any(op in APPROXIMATED for op in self.ops)

    def step(self, x: Value) -> Value:
        """One more op on ``x``: elementwise, transpose, broadcast, reduce or convert."""
        rng = self.rng
        op = rng.choice(
            ("unary", "binary", "binary", "transpose", "broadcast", "reduce", "convert")
        )
        if op == "transpose" and len(x.dims) < 2:
            op = "binary"
        if op == "reduce" and len(x.dims) < 1:
            op = "unary"
        if op == "broadcast" and (len(x.dims) >= 3 or _elements(x.dims) * 8 > MAX_ELEMENTS):
            op = "unary"
        self.ops.append(op)
        if op == "unary":
            kind = "float" if x.dtype in FLOATS else "int"
            # After a reduction the value carries its order of summation's rounding:
            # exp or floor of it would turn that into differences past any tolerance.
            name = rng.choice(UNARY[kind] if not self.inexact(x) else ("negate", "abs"))
            if name in APPROXIMATED:
                self.ops.append(name)
            out = Value(self.fresh(name), x.dtype, x.dims, self.layout(len(x.dims)))
            return self.emit(out, f"{name}({x.name})")
        if op == "binary":
            other = x if rng.random() < 0.3 else self.parameter(x.dtype, list(x.dims))
            name = rng.choice(BINARY)
            out = Value(self.fresh(name), x.dtype, x.dims, self.layout(len(x.dims)))
            return self.emit(out, f"{name}({x.name}, {other.name})")
        if op == "transpose":
            perm = list(range(len(x.dims)))
            while perm == sorted(perm):
                rng.shuffle(perm)
            dims = [x.dims[p] for p in perm]
            out = Value(self.fresh("transpose"), x.dtype, dims, self.layout(len(dims)))
            return self.emit(out, f"transpose({x.name}), dimensions={{{','.join(map(str, perm))}}}")
        if op == "broadcast":
            at = rng.randrange(len(x.dims) + 1)
            dims = list(x.dims)
            dims.insert(at, rng.choice((1, 2, 3, 8)))
            kept = [i for i in range(len(dims)) if i != at]
            out = Value(self.fresh("broadcast"), x.dtype, dims, self.layout(len(dims)))
            return self.emit(out, f"broadcast({x.name}), dimensions={{{','.join(map(str, kept))}}}")
        if op == "convert":
            # A float after a reduction converted to an integer turns the order of
            # summation's rounding into a difference of one or of saturation, which no
            # tolerance accepts; so does an approximation's last-bit error (tanh(x) at
            # -0.99999994 where the reference has -1.0 truncates to 0, not -1).
            computed = x.dtype in FLOATS and (self.inexact(x) or self.approximate(x))
            dtype = rng.choice(FLOATS if computed else DTYPES)
            out = Value(self.fresh("convert"), dtype, x.dims, self.layout(len(x.dims)))
            return self.emit(out, f"convert({x.name})")
        # reduce over a non-empty subset of the dimensions, with add.
        rank = len(x.dims)
        reduced = sorted(rng.sample(range(rank), rng.randint(1, rank)))
        dims = [d for i, d in enumerate(x.dims) if i not in reduced]
        init = self.emit(Value(self.fresh("zero"), x.dtype, [], []), "constant(0)")
        self.reducers.add(x.dtype)
        out = Value(self.fresh("reduce"), x.dtype, dims, self.layout(len(dims)))
        return self.emit(
            out,
            f"reduce({x.name}, {init.name}), dimensions={{{','.join(map(str, reduced))}}},"
            f" to_apply=add_{x.dtype}",
        )

    def module(self) -> tuple[str, str]:
        """The whole module and a one-line description of what was generated."""
        x = self.parameter(self.rng.choice(DTYPES), self.dims())
        for _ in range(self.rng.randint(1, 4)):
            x = self.step(x)
        self.lines[-1] = self.lines[-1].replace(f"  {x.name} =", f"  ROOT {x.name} =", 1)
        kind = "kInput" if "reduce" in self.ops else "kLoop"
        parts = ["HloModule generated", ""]
        for dtype in sorted(self.reducers):
            parts += [
                f"add_{dtype} {{",
                f"  a = {dtype}[] parameter(0)",
                f"  b = {dtype}[] parameter(1)",
                f"  ROOT sum = {dtype}[] add(a, b)",
                "}",
                "",
            ]
        parts += ["fused_computation {", *self.lines, "}", "", "ENTRY main {"]
        parts += [f"  {p.name} = {p.shape} parameter({i})" for i, p in enumerate(self.params)]
        args = ", ".join(p.name for p in self.params)
        parts += [f"  ROOT fusion = {x.shape} fusion({args}), kind={kind}, calls=fused_computation"]
        parts += ["}", ""]
        params = ", ".join(p.shape for p in self.params)
        return "\n".join(parts), f"generated {kind} ({params}) -> {x.shape}: {', '.join(self.ops)}"


def generate(rng: random.Random) -> tuple[str, str]:
    """A valid HLO module with one fusion, and its description."""
    return FusionBuilder(rng).module()
