"""Random chains of jax.numpy ops through heron.jax, against jax.jit on the CPU.

heron's fuzzer (``heron_fuzz``) mutates HLO; this one starts where users do, in
JAX: a random array goes through a random chain of transposes, reshapes,
reductions (sum, max, argmax, logsumexp, ...), scans, sorts, top-k, scatters,
gathers, pads and elementwise math, and the last values of the chain are
compared with XLA:CPU's. JAX prints such chains with the layouts its transposes
leave behind (a transpose that moves no data is a bitcast to another layout), a
corner heron's own corpora never reached: its first 60 chains found argmax
over a transposed array returning 1,021 wrong indices of 1,056 (the reduction
emitters read the iota beside the values in the values' layout).

    python tests/fuzz/jax_chains.py --seed 0 --cases 200 [--half] [--wrap vmap|scan] [--mix]

prints each chain heron disagrees on or refuses, with the seed that rebuilds it
(``--first SEED --cases 1``); exit status 1 if there was one. ``--half`` runs
two chains in three in bf16 or f16; a 16-bit chain whose values differ from XLA's
while heron's are exactly its reference evaluator's is counted apart (XLA keeps
excess precision: docs/reliability.md). ``--mix`` adds to each chain a step
that adds to the array a transposed copy of itself, worked on and transposed back
(two layouts of one shape meeting in one add). ``tests/test_jax_chains_sample.py`` runs a
fixed sample in CI.
"""

from __future__ import annotations

import argparse
import sys
from collections.abc import Callable, Sequence
from typing import Any

import attrs
import jax
import jax.numpy as jnp
import numpy as np

#: The step kinds a chain draws from.
KINDS = (
    "transpose",
    "reduce",
    "elementwise",
    "reshape",
    "broadcast",
    "cumsum",
    "sort",
    "argsort",
    "top_k",
    "concatenate",
    "reverse",
    "softmax",
    "cummax",
    "pad",
    "scatter_add",
    "einsum",
    "take",
)
REDUCTIONS = ("sum", "max", "min", "mean", "logsumexp", "argmax")
ELEMENTWISE: dict[str, Callable[[Any], Any]] = {
    "exp": lambda v: jnp.exp(v * 0.1),
    "tanh": jnp.tanh,
    "square": lambda v: v * v,
    "negative_abs": lambda v: -jnp.abs(v),
    "sin": jnp.sin,
}
#: Largest input, in elements: the interpreter runs every kernel.
MAX_ELEMENTS = 60_000
#: How a chain is run: alone, under ``jax.vmap`` over three copies stacked along a
#: drawn axis (batch dimensions moved by JAX's batching rules), or as the body of a
#: ``lax.scan`` over three copies with a carry (a while loop around the chain).
WRAPS = ("none", "vmap", "scan")
#: Copies a wrapped chain runs on.
COPIES = 3


@attrs.frozen
class Chain:
    """One drawn chain: the input's shape and type, the steps, how many last values count."""

    seed: int
    dims: tuple[int, ...]
    dtype: Any
    steps: tuple[tuple[Any, ...], ...]
    outputs: int
    #: One of :data:`WRAPS`, and for ``vmap`` the axis the copies are stacked along.
    wrap: str = "none"
    wrap_axis: int = 0

    def describe(self) -> str:
        name = np.dtype(self.dtype).name
        how = "" if self.wrap == "none" else f" under {self.wrap} (axis {self.wrap_axis})"
        return f"seed {self.seed}: {name}{list(self.dims)} {list(self.steps)}{how}"


#: What a ``mix`` step computes in a transposed copy before adding it back: each
#: leaves the copy in its own layout, so the add meets two layouts of one shape.
MIXES = ("cumsum", "softmax", "sort", "exp")


def draw(seed: int, half: bool = False, wrap: str = "none", mix: bool = False) -> Chain:
    """The chain of ``seed`` (a function of the seed and the options alone). ``mix``:
    the same chain with one more step, ``x + transpose^-1(f(transpose(x)))``, drawn
    after the rest so that the chain around it stays the one of ``seed``."""
    if wrap not in WRAPS:
        raise ValueError(f"wrap {wrap!r}: one of {WRAPS}")
    rng = np.random.default_rng(seed)
    rank = int(rng.integers(2, 5))
    dims = [int(rng.choice([2, 3, 4, 5, 8, 16, 33, 64, 128])) for _ in range(rank)]
    limit = MAX_ELEMENTS if wrap == "none" else MAX_ELEMENTS // COPIES
    while np.prod(dims) > limit:
        dims[int(np.argmax(dims))] //= 2
    shape = list(dims)
    steps: list[tuple[Any, ...]] = []
    ranks = [rank]  # before each step, then after the last
    for _ in range(int(rng.integers(2, 6))):
        step = _step(str(rng.choice(KINDS)), shape, rng)
        steps.append(step)
        ranks.append(len(shape))
    dtype = [np.float32, jnp.bfloat16, np.float16][seed % 3] if half else np.float32
    outputs = int(rng.integers(1, 3))
    axis = int(rng.integers(0, rank + 1)) if wrap == "vmap" else 0
    if mix:
        where = int(rng.integers(0, len(steps) + 1))
        if ranks[where] > 1:
            perm = tuple(int(p) for p in rng.permutation(ranks[where]))
            steps.insert(where, ("mix", perm, str(rng.choice(MIXES))))
    return Chain(seed, tuple(dims), dtype, tuple(steps), outputs, wrap, axis)


def _step(kind: str, shape: list[int], rng: np.random.Generator) -> tuple[Any, ...]:
    """One step of ``kind`` on an array of ``shape`` (updated in place), or an
    elementwise step where ``kind`` does not apply to it."""
    rank = len(shape)
    axis = int(rng.integers(0, rank))
    if kind == "transpose" and rank > 1:
        perm = [int(p) for p in rng.permutation(rank)]
        shape[:] = [shape[p] for p in perm]
        return ("transpose", tuple(perm))
    if kind == "reduce" and rank > 1:
        shape.pop(axis)
        return ("reduce", axis, str(rng.choice(REDUCTIONS)))
    if kind == "reshape" and rank > 1:
        i = int(rng.integers(0, rank - 1))
        shape[i : i + 2] = [shape[i] * shape[i + 1]]
        return ("reshape", tuple(shape))
    if kind == "broadcast" and rank < 4:
        where, n = int(rng.integers(0, rank + 1)), int(rng.choice([2, 3]))
        shape.insert(where, n)
        return ("broadcast", where, n)
    if kind == "top_k" and shape[-1] >= 2:
        k = int(rng.integers(1, min(shape[-1], 8) + 1))
        shape[-1] = k
        return ("top_k", k)
    if kind == "concatenate":
        shape[axis] *= 2
        return ("concatenate", axis)
    if kind == "pad":
        shape[axis] += 3
        return ("pad", axis)
    if kind in ("scatter_add", "einsum", "take") and shape[0] >= 2 and rank >= 2:
        salt = int(rng.integers(0, 1 << 30))
        if kind == "take":
            n = int(rng.integers(1, 6))
            shape[0] = n
            return ("take", salt, n)
        return (kind, salt)
    if kind in ("cumsum", "sort", "argsort", "reverse", "softmax", "cummax"):
        return (kind, axis)
    return ("elementwise", str(rng.choice(sorted(ELEMENTWISE))))


def function(chain: Chain) -> Callable[[Any], list[Any]]:
    """The jax function computing ``chain`` (its last ``outputs`` values)."""

    def apply(x: Any, step: tuple[Any, ...]) -> Any:
        kind = step[0]
        if kind == "transpose":
            return jnp.transpose(x, step[1])
        if kind == "reduce":
            axis, how = step[1], step[2]
            if how == "logsumexp":
                return jax.nn.logsumexp(x, axis=axis)
            if how == "argmax":
                return jnp.argmax(x, axis=axis).astype(x.dtype)
            return getattr(jnp, how)(x, axis=axis)
        if kind == "reshape":
            return x.reshape(step[1])
        if kind == "broadcast":
            return jnp.expand_dims(x, step[1]).repeat(step[2], axis=step[1])
        if kind == "cumsum":
            return jnp.cumsum(x, axis=step[1])
        if kind == "sort":
            return jnp.sort(x, axis=step[1])
        if kind == "argsort":
            return jnp.argsort(x, axis=step[1]).astype(x.dtype) + x
        if kind == "top_k":
            return jax.lax.top_k(x, step[1])[0]
        if kind == "concatenate":
            return jnp.concatenate([x, jnp.flip(x, step[1]) * 2], axis=step[1])
        if kind == "reverse":
            return jnp.flip(x, step[1])
        if kind == "softmax":
            return jax.nn.softmax(x, axis=step[1])
        if kind == "cummax":
            return jax.lax.cummax(x, axis=step[1])
        if kind == "pad":
            pads = [(1, 2) if i == step[1] else (0, 0) for i in range(x.ndim)]
            return jnp.pad(x, pads, mode="edge")
        if kind == "scatter_add":
            r = np.random.default_rng(step[1])
            where = r.integers(0, x.shape[0], (5,))
            return x.at[where].add(r.standard_normal((5, *x.shape[1:])).astype(x.dtype))
        if kind == "einsum":
            r = np.random.default_rng(step[1])
            w = r.standard_normal((x.shape[-2], x.shape[-2])).astype(x.dtype)
            return jnp.einsum("...ij,ik->...kj", x, w)
        if kind == "take":
            r = np.random.default_rng(step[1])
            return jnp.take(x, r.integers(0, x.shape[0], (step[2],)), axis=0)
        if kind == "mix":
            perm, how = step[1], step[2]
            moved = jnp.transpose(x, perm)
            if how == "exp":
                moved = jnp.exp(moved * 0.1)
            else:
                moved = {"cumsum": jnp.cumsum, "softmax": jax.nn.softmax, "sort": jnp.sort}[how](
                    moved, axis=-1
                )
            return x + jnp.transpose(moved, np.argsort(perm))
        return ELEMENTWISE[step[1]](x)

    def run(x: Any) -> list[Any]:
        values = []
        for step in chain.steps:
            x = apply(x, step)
            values.append(x)
        return values[-chain.outputs :]

    if chain.wrap == "vmap":
        return jax.vmap(run, in_axes=chain.wrap_axis)
    if chain.wrap == "scan":

        def scanned(xs: Any) -> list[Any]:
            def body(carry: Any, x: Any) -> tuple[Any, list[Any]]:
                values = run(x + (carry * 0.01).astype(x.dtype))
                return carry + jnp.tanh(jnp.sum(values[-1].astype(jnp.float32))), values

            carry, values = jax.lax.scan(body, jnp.float32(0), xs)
            return [carry, *values]

        return scanned
    return run


def argument(chain: Chain) -> np.ndarray:
    """The chain's input: one array, or the wrapped chain's copies stacked."""
    x = np.random.default_rng(chain.seed + 999).standard_normal(chain.dims).astype(chain.dtype)
    if chain.wrap == "none":
        return x
    copies = [x, (x * 0.5 + 1).astype(chain.dtype), -x]
    return np.stack(copies, axis=chain.wrap_axis)


def disagreement(got: Sequence[Any], expected: Sequence[Any], dtype: Any) -> str | None:
    """Why heron's values are not XLA:CPU's (None when they are, within a relative
    1e-3 of the largest value for f32 and 3e-2 for 16-bit floats: chains reassociate
    sums and round through their type between steps)."""
    relative = 1e-3 if np.dtype(dtype) == np.float32 else 3e-2
    for k, (g, e) in enumerate(zip(got, expected, strict=True)):
        g64, e64 = np.asarray(g).astype(np.float64), np.asarray(e).astype(np.float64)
        if g64.shape != e64.shape:
            return f"value {k}: shape {g64.shape}, XLA's {e64.shape}"
        if (np.isnan(g64) != np.isnan(e64)).any():
            return f"value {k}: NaN where XLA has a number or the other way round"
        if not e64.size:
            continue
        infinite = np.isinf(g64) | np.isinf(e64)
        if (infinite & (g64 != e64)).any():
            return f"value {k}: an infinity where XLA has another value or the other way round"
        finite = ~infinite & ~np.isnan(e64)
        if not finite.any():
            continue
        scale = max(1.0, float(np.abs(e64[finite]).max()))
        error = float(np.abs(g64[finite] - e64[finite]).max())
        if error > relative * scale:
            return f"value {k}: max |difference| {error:.4g} (allowed {relative * scale:.4g})"
    return None


@attrs.frozen
class Outcome:
    """What became of one chain: ``agree``, ``disagree``, ``refused``, ``excess`` (a
    16-bit chain where XLA:CPU's values differ from heron's but heron's are exactly its
    reference evaluator's: XLA computes some 16-bit steps in f32 without rounding
    between them, heron rounds where the HLO says; a sort after such a step then
    orders ties differently), or ``ties`` (an argsort of keys equal or nearly so, whose
    order rounding decides: :func:`_argsorts_near_ties`). ``why`` says how, for all but
    ``agree``."""

    status: str
    why: str = ""


def check(chain: Chain, backend: str = "interpreter") -> Outcome:
    """heron.jax's values of ``chain`` against jax.jit's. A chain jax itself rejects
    agrees (there is nothing to compare)."""
    from heron import jax as heron_jax

    f = function(chain)
    x = argument(chain)
    try:
        expected = jax.jit(f)(x)
    except Exception:  # noqa: BLE001 - a chain jax rejects (a shape it refuses) is no case
        return Outcome("agree")
    try:
        got = heron_jax.jit(f, backend=backend)(x)
    except Exception as exc:  # noqa: BLE001 - a refusal is reported, whatever it is
        return Outcome("refused", f"{type(exc).__name__}: {str(exc)[:400]}")
    why = disagreement(got, expected, chain.dtype)
    if why is None:
        return Outcome("agree")
    if np.dtype(chain.dtype).itemsize == 2 and _is_the_evaluators(f, x, got):
        return Outcome("excess", why)
    if _argsorts_near_ties(chain, x):
        return Outcome("ties", why)
    return Outcome("disagree", why)


#: Keys of an argsort closer than this (relative to the row's largest magnitude) are
#: ordered by rounding: 2^-16 of f32, a few dozen ulps of sums in another order.
NEAR_TIE = {4: 2.0**-16, 2: 2.0**-6}


def _argsorts_near_ties(chain: Chain, x: np.ndarray) -> bool:
    """Whether an argsort of the (unwrapped) chain sorts keys that are equal or nearly so
    along its axis in XLA's values: which index comes first is then decided by the last
    bits of sums each compiler adds in its own order (a softmax's rows summed by an
    einsum and a cumsum are all 1 * the same weights, mathematically tied). heron's
    order is as right as XLA's there; its other values are still compared."""
    if chain.wrap != "none":
        return False
    tie = NEAR_TIE.get(np.dtype(chain.dtype).itemsize, 2.0**-16)
    value = jnp.asarray(x)
    for step in chain.steps:
        if step[0] == "argsort":
            keys = np.moveaxis(np.asarray(value, np.float64), step[1], -1)
            ordered = np.sort(keys, axis=-1)
            scale = np.maximum(np.abs(ordered).max(axis=-1, keepdims=True), 1e-30)
            if (np.diff(ordered, axis=-1) <= tie * scale).any():
                return True
        value = _one_step(chain, value, step)
    return False


def _one_step(chain: Chain, value: Any, step: tuple[Any, ...]) -> Any:
    """``value`` after ``step`` alone, as the chain's function computes it."""
    one = attrs.evolve(chain, steps=(step,), outputs=1, wrap="none")
    return function(one)(value)[-1]


def _is_the_evaluators(f: Callable[[Any], Any], x: np.ndarray, got: Sequence[Any]) -> bool:
    """Whether ``got`` is, bit for bit, what heron's reference evaluator gives for the
    HLO JAX prints for ``f`` (the semantics heron compiles to)."""
    from heron.hlo.evaluator import evaluate_module, flatten_literal
    from heron.hlo.parser import parse_module

    module = parse_module(jax.jit(f).lower(x).as_text(dialect="hlo"))
    reference = flatten_literal(evaluate_module(module, [np.asarray(x)]))
    return len(reference) == len(got) and all(
        np.asarray(g).tobytes() == np.asarray(r).tobytes()
        for g, r in zip(got, reference, strict=True)
    )


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--seed", "--first", type=int, default=0, dest="first")
    parser.add_argument("--cases", type=int, default=100)
    parser.add_argument("--half", action="store_true", help="bf16 and f16 chains too")
    parser.add_argument("--wrap", choices=WRAPS, default="none", help="under vmap or lax.scan")
    parser.add_argument(
        "--mix", action="store_true", help="one more step adding two layouts of one array"
    )
    args = parser.parse_args(argv)
    counts = dict.fromkeys(("agree", "disagree", "refused", "excess", "ties"), 0)
    for seed in range(args.first, args.first + args.cases):
        chain = draw(seed, args.half, args.wrap, args.mix)
        outcome = check(chain)
        counts[outcome.status] += 1
        if outcome.status != "agree":
            print(f"{outcome.status}: {chain.describe()}\n  {outcome.why}", flush=True)
    print(
        f"{args.cases} chains: {counts['agree']} agree, {counts['disagree']} disagree,"
        f" {counts['refused']} refused, {counts['excess']} differ by XLA's excess precision"
        " (heron gives its reference evaluator's values),"
        f" {counts['ties']} argsort nearly tied keys (an order rounding decides)"
    )
    return 1 if counts["disagree"] or counts["refused"] else 0


if __name__ == "__main__":
    sys.exit(main())
