"""Outputs that rounding decides: loops whose trip counts turn on a rounding error.

An optimizer's loop runs until its gradient's norm falls under a tolerance. Near
the solution that norm is a difference of nearly equal values, as much rounding
error as signal: jaxopt's ``LevenbergMarquardt`` stopped after 4 trips on the
reference evaluator and after 5 on heron and on XLA:CPU, its iteration counter
(an s32 output, compared exactly) and its solution a few ulps apart. Five such
optimizers of optimistix and jaxopt (a helper's sweep) made ``heron run --check``
call correct programs wrong; no ulp bound covers them, since the loop's last trip
is decided, not computed. So is a comparison of two values equal in exact arithmetic
(``sum(x) > sum(reverse(x))``, an argmax over logits that tie): which one rounds
larger depends on the order each was summed in, and XLA:CPU, heron's kernels and the
reference each answered otherwise in 12 of 32 rows (sweep 8).

Random rounding (Monte Carlo arithmetic, the random-rounding mode of Verificarlo and
CADNA) measures how much of an output rounding decides: the reference is evaluated
again several times, each floating-point result of an arithmetic op (elementwise math,
a dot, a sum) rounded at random to one of the two values of its type around the exact
result (float64's) instead of to the nearer one, and each sum (a reduce adding) summed
in its type with its terms in a random order, pairwise or one after another. Every op
stays within one ulp, and every sum within the reordering a compiler may make, as any
correct compiler's are, while the roundings vary. Where some of these evaluations take
a loop for another number of trips (or a conditional down another branch, a comparison
of floats the other way (:func:`decides`), or a sort of floats into another order: an
argsort of keys that tie in exact arithmetic, the fuzzer's seed 92010) than the
reference does, the program's decisions turn on rounding, and an output they reach is
accepted anywhere in the range the evaluations spread over, widened by that range's
width (the samples are few); an element no evaluation moves is still compared as
before. A program whose decisions no rounding changes gains nothing from them: its
outputs keep the ulp and propagation bounds, except an output a sum in the kernels' own
order reaches (:attr:`RoundingFreedom.reordered`). The evaluations reorder every sum and
carry that through the ops after it; where those amplify a sum's rounding noise into the
value (the gradient of a bias before a batch mean is subtracted, exactly 0 in exact
arithmetic, which Lamb normalises into a full step: the thirteenth sweep), the spread is
what rounding can produce, and where they do not it is a few ulps, inside the
reassociation bounds such an output has already. Float64 has no wider type to hold an
exact result, so a float64 add, subtract, multiply, divide or square root takes the side
its exact result lies on from an error-free transformation (:func:`_float64_residual`:
Knuth's TwoSum, Dekker's product), and sums and dots are reordered in float64; its other
ops keep their nearest rounding, as ops outside :data:`EXACT_OPS` do in every type.
(Before, float64 programs had no random rounding at all: two optimistix least-squares
solves in float64 stopped after 11 steps on heron's kernels and on XLA:CPU and after 7
on the reference, and the check called them wrong: the tenth sweep.)

:class:`RandomRoundings` evaluates the samples on first use (only where an output
is outside every other bound) and shares them among a program's outputs;
:class:`RoundingFreedom` is one output's freedom, as :class:`OutputTolerance`
takes it.
"""

from __future__ import annotations

import hashlib
import warnings
from collections.abc import Callable, Sequence

import attrs
import numpy as np

from heron.harness.tolerance import is_plain_add
from heron.hlo.errors import HloError
from heron.hlo.evaluator import evaluate_module, flatten_literal
from heron.hlo.evaluator.interpreter import Evaluator
from heron.hlo.evaluator.linalg import dot_matrices, dot_product
from heron.hlo.evaluator.reductions import sort_permutation
from heron.hlo.ir import Instruction, Module
from heron.hlo.shapes import ArrayShape

__all__ = [
    "EXACT_OPS",
    "MORE_SAMPLES",
    "SAMPLES",
    "RandomRounding",
    "RandomRoundings",
    "RoundingFreedom",
    "decides",
]

#: Random roundings of the reference evaluated per program.
SAMPLES = 8
#: At most as many, where an output lies outside the first ones' spread though they do
#: change the program's decisions: a near tie that one order in ten decides the other
#: way is missed by 8 samples four times in ten, by 64 about once in 800.
MORE_SAMPLES = 64
#: The first seed; sample k uses ``SEED + k`` (a check is repeatable).
SEED = 20261204


#: The elementwise ops whose exact result float64 gives (to within its own rounding):
#: their float64 value from the operands in float64.
EXACT_OPS: dict[str, Callable[..., np.ndarray]] = {
    "add": np.add,
    "subtract": np.subtract,
    "multiply": np.multiply,
    "divide": np.divide,
    "sqrt": np.sqrt,
    "rsqrt": lambda x: 1.0 / np.sqrt(x),
    "cbrt": np.cbrt,
    "exponential": np.exp,
    "exponential-minus-one": np.expm1,
    "log": np.log,
    "log-plus-one": np.log1p,
    "logistic": lambda x: 0.5 * np.tanh(0.5 * x) + 0.5,
    "tanh": np.tanh,
    "sine": np.sin,
    "cosine": np.cos,
    "tan": np.tan,
    "power": np.power,
    "atan2": np.arctan2,
}

#: Result widths (bits) of the floats rounded at random (float64: :func:`_float64_residual`).
_ROUNDED_WIDTHS = (16, 32, 64)


class RandomRounding:
    """An evaluator hook (:data:`heron.hlo.evaluator.interpreter.StepHook`) that rounds
    each result of :data:`EXACT_OPS`, a dot or a sum at random (``seed``; None: as the
    reference rounds) and records the program's control-flow decisions in order: each
    value of a while condition's root, a conditional's selector or another decision
    (:func:`decides`) in ``deciding``, as a digest."""

    def __init__(self, seed: int | None, deciding: frozenset[Instruction]) -> None:
        self._random = None if seed is None else np.random.default_rng(seed)
        self._deciding = deciding
        self._sorter: Evaluator | None = None
        self.decisions: list[tuple[str, bytes]] = []

    def __call__(self, inst: Instruction, operands: list, value):
        if inst in self._deciding:
            decided = self._order(inst, operands) if inst.opcode == "sort" else value
            digest = hashlib.blake2b(np.asarray(decided).tobytes(), digest_size=16).digest()
            self.decisions.append((inst.name, digest))
        if self._random is None or not _rounded(inst, value):
            return value
        if inst.opcode == "reduce" and is_plain_add(inst):
            return _reordered_sum(inst, operands, value, self._random)
        if inst.opcode == "dot" and len(operands) == 2:
            reordered = _reordered_dot(inst, operands, value, self._random)
            if reordered is not None:
                return reordered
        if value.dtype == np.float64:
            residual = _float64_residual(inst, operands, value)
            if residual is None:
                return value
            return _step_at_random(value, residual, self._random)
        exact = _exact(inst, operands)
        if exact is None:
            return value
        return _round_at_random(value, np.broadcast_to(exact, value.shape), self._random)

    def _order(self, inst: Instruction, operands: list) -> np.ndarray:
        """The permutation a sort applies: what it decides (its sorted keys move with
        every rounding of its operands; which element goes where only at a near tie)."""
        if self._sorter is None:
            self._sorter = Evaluator()
        return sort_permutation(self._sorter, inst, operands)


def _rounded(inst: Instruction, value) -> bool:
    shape = inst.shape
    return (
        isinstance(value, np.ndarray)
        and isinstance(shape, ArrayShape)
        and shape.element_type.is_floating
        and not shape.element_type.is_complex
        and shape.element_type.bit_width in _ROUNDED_WIDTHS
    )


def _exact(inst: Instruction, operands: list) -> np.ndarray | None:
    """``inst``'s result in float64 from its operands, or None (no exact form here)."""
    with np.errstate(all="ignore"):
        function = EXACT_OPS.get(inst.opcode)
        if function is not None:
            return function(*(np.asarray(o).astype(np.float64) for o in operands))
        if inst.opcode == "dot" and len(operands) == 2:
            return dot_product(inst, operands[0], operands[1], np.float64)
        if inst.opcode == "reduce" and is_plain_add(inst):
            operand, init = (np.asarray(o).astype(np.float64) for o in operands)
            return np.sum(operand, axis=tuple(inst.attr("dimensions"))) + init
    return None


def _reordered_sum(inst: Instruction, operands: list, value: np.ndarray, random) -> np.ndarray:
    """A plain-add reduce's sum in its type, its terms in a random order (each result its
    own): a kernel may sum them in any order, and a sum of nearly cancelling terms moves
    by far more than an ulp of its value from one order to another (two sums of the same
    500 values, compared, came out the other way in 12 of 32 rows). A sum every order
    makes exactly (small integers) stays exact."""
    operand, init = (np.asarray(o) for o in operands)
    dims = tuple(inst.attr("dimensions"))
    kept = [d for d in range(operand.ndim) if d not in dims]
    terms = np.transpose(operand, kept + list(dims)).reshape(*value.shape, -1)
    if terms.shape[-1] < 2:
        return value
    with np.errstate(all="ignore"):
        total = _summed_in_random_order(terms, random) + init.astype(terms.dtype)
    return np.asarray(total, dtype=value.dtype).reshape(value.shape)


def _summed_in_random_order(terms: np.ndarray, random) -> np.ndarray:
    """``terms`` summed along the last axis in their type, each row in an order of its
    own, added pairwise (numpy's sum: a GPU kernel's tree) or, at random, one term after
    another (a CPU's loop), whose rounding errors grow with the count rather than its
    logarithm: pairwise sums alone left the sums of one row's values in other orders two
    values apart where a loop's are seven, and an argsort of them outside their spread."""
    order = np.argsort(random.random(terms.shape), axis=-1)
    shuffled = np.take_along_axis(terms, order, axis=-1)
    if random.random() < 0.5:
        return shuffled.sum(axis=-1, dtype=terms.dtype)
    return np.cumsum(shuffled, axis=-1, dtype=terms.dtype)[..., -1]


#: Products a dot may have for :func:`_reordered_dot` (each one held in float64).
_MAX_DOT_TERMS = 1 << 22


def _reordered_dot(
    inst: Instruction, operands: list, value: np.ndarray, random
) -> np.ndarray | None:
    """A dot's result with each element's products summed in its type in a random order,
    as :func:`_reordered_sum` sums; None for a dot of more than :data:`_MAX_DOT_TERMS`
    products (rounded at random instead) or of a complex or integer result."""
    left, right, shape = dot_matrices(inst, operands[0], operands[1], np.float64)
    batch, rows, depth = left.shape
    columns = right.shape[2]
    if batch * rows * columns * depth > _MAX_DOT_TERMS or depth < 2:
        return None
    with np.errstate(all="ignore"):
        terms = (left[:, :, None, :] * np.swapaxes(right, 1, 2)[:, None, :, :]).astype(value.dtype)
        total = _summed_in_random_order(terms, random)
    return np.asarray(total, dtype=value.dtype).reshape(shape)


def _round_at_random(value: np.ndarray, exact: np.ndarray, random) -> np.ndarray:
    """Each element of ``value`` (the nearest rounding of ``exact``), or its neighbour on
    ``exact``'s side, at even odds; exact and non-finite elements stay."""
    wide = value.astype(np.float64)
    with np.errstate(invalid="ignore"):
        inexact = np.isfinite(wide) & np.isfinite(exact) & (wide != exact)
    if not inexact.any():
        return value
    take = inexact & (random.random(value.shape) < 0.5)
    return np.where(take, _neighbour(value, exact > wide), value)


def _step_at_random(value: np.ndarray, residual: np.ndarray, random) -> np.ndarray:
    """Each element of float64 ``value``, or at even odds its neighbour on the side of its
    ``residual`` (the exact result minus ``value``, in sign); exact (residual 0) and
    non-finite elements stay."""
    with np.errstate(invalid="ignore"):
        inexact = np.isfinite(value) & np.isfinite(residual) & (residual != 0)
    if not inexact.any():
        return value
    take = inexact & (random.random(value.shape) < 0.5)
    return np.where(take, np.nextafter(value, np.where(residual > 0, np.inf, -np.inf)), value)


#: Dekker's splitter for float64: 2^27 + 1.
_SPLITTER = 134217729.0


def _product_error(a: np.ndarray, b: np.ndarray, product: np.ndarray) -> np.ndarray:
    """``a * b - product`` exactly, for ``product`` the float64 product (Dekker's
    TwoProduct; NaN where splitting overflows, near the largest floats)."""
    a_high = _SPLITTER * a - (_SPLITTER * a - a)
    b_high = _SPLITTER * b - (_SPLITTER * b - b)
    a_low, b_low = a - a_high, b - b_high
    return ((a_high * b_high - product) + a_high * b_low + a_low * b_high) + a_low * b_low


def _float64_residual(inst: Instruction, operands: list, value: np.ndarray) -> np.ndarray | None:
    """The exact result of a float64 add, subtract, multiply, divide or square root minus
    its nearest rounding ``value``, in sign at least (an error-free transformation of the
    operands: Knuth's TwoSum, Dekker's product, a division's or a root's remainder), or
    None for other ops (no exact result to take a side from)."""
    opcode = inst.opcode
    if opcode not in ("add", "subtract", "multiply", "divide", "sqrt"):
        return None
    parts = [np.broadcast_to(np.asarray(o, np.float64), value.shape) for o in operands]
    with np.errstate(all="ignore"):
        if opcode in ("add", "subtract"):
            a, b = parts[0], parts[1] if opcode == "add" else -parts[1]
            b_virtual = value - a
            return (a - (value - b_virtual)) + (b - b_virtual)
        if opcode == "multiply":
            return _product_error(parts[0], parts[1], value)
        if opcode == "divide":  # a / b - q has the sign of (a - q b) / b
            a, b = parts
            remainder = (a - value * b) - _product_error(value, b, value * b)
            return remainder * np.sign(b)
        (a,) = parts  # sqrt(a) - q has the sign of a - q q
        return (a - value * value) - _product_error(value, value, value * value)


def _neighbour(value: np.ndarray, upward: np.ndarray) -> np.ndarray:
    """The next value of ``value``'s type above (``upward``) or below each element."""
    unsigned = np.dtype(f"u{value.dtype.itemsize}")
    bits = np.ascontiguousarray(value).view(unsigned).astype(np.int64)
    sign = 1 << (8 * value.dtype.itemsize - 1)
    negative = (bits & sign) != 0
    magnitude = bits & (sign - 1)
    grows = upward != negative
    stepped = np.where(grows, bits + 1, bits - 1)
    from_zero = np.where(upward, 1, sign | 1)  # the smallest subnormal of either sign
    stepped = np.where(magnitude == 0, from_zero, stepped)
    return stepped.astype(unsigned).view(value.dtype).reshape(value.shape)


#: Ops whose result jumps where a float operand crosses a point: rounding may decide them.
_THRESHOLD_OPS = frozenset({"floor", "ceil", "round-nearest-afz", "round-nearest-even"})


def decides(inst: Instruction) -> bool:
    """Whether ``inst`` decides rather than computes, on floats: a comparison of
    floating-point values, a float's conversion to an integer or a predicate, a floor,
    a ceiling or a rounding. A rounding error in its operands can flip its result
    whole (besides loops and conditionals, whose deciding values are such ops or
    read them)."""
    operands = inst.operands
    if not operands or not isinstance(operands[0].shape, ArrayShape):
        return False
    if not operands[0].shape.element_type.is_floating:
        return False
    if inst.opcode in ("compare", *_THRESHOLD_OPS):
        return True
    shape = inst.shape
    return (
        inst.opcode == "convert"
        and isinstance(shape, ArrayShape)
        and not shape.element_type.is_floating
    )


def _deciding(module: Module) -> frozenset[Instruction]:
    """The instructions whose values decide: each while condition's root, each
    conditional's selector, every decision on floats (:func:`decides`), and each sort
    whose comparator makes one (its order: the evaluator may sort by keys without
    evaluating the comparator's comparisons one by one, so they would record nothing)."""
    found = set()
    for computation in module.computations:
        for inst in computation.instructions:
            if inst.opcode == "while":
                found.add(inst.called("condition").root_instruction)
            elif inst.opcode == "conditional":
                found.add(inst.operands[0])
            elif decides(inst) or (
                inst.opcode == "sort"
                and any(decides(step) for step in inst.called("to_apply").instructions)
            ):
                found.add(inst)
    return frozenset(found)


@attrs.frozen
class _Spread:
    """The reference's outputs and those of each random rounding, and whether any
    rounding changed a decision."""

    outputs: tuple[tuple[np.ndarray, ...], ...]
    decided_by_rounding: bool


class RandomRoundings:
    """:data:`SAMPLES` random roundings of ``module``'s entry on ``arguments``, evaluated
    on first use (a check that passes never evaluates them) and shared by its outputs."""

    def __init__(self, module: Module, arguments: Sequence, samples: int = SAMPLES) -> None:
        self._module, self._arguments, self._samples = module, list(arguments), samples
        self._deciding: frozenset[Instruction] | None = None
        self._runs: list[tuple[tuple[np.ndarray, ...], list]] = []
        self._spread: _Spread | None = None
        self._failed = False

    def spread(self, samples: int | None = None, *, values: bool = False) -> _Spread | None:
        """The reference and ``samples`` random roundings (default: this one's count),
        evaluated as far as not yet; None when the reference could not be evaluated
        (over the memory budget, a loop past the evaluator's limit under some rounding)
        or the program decides nothing and ``values`` (an output's values asked for, not
        only its decisions: :attr:`RoundingFreedom.reordered`) is not set."""
        wanted = 1 + (self._samples if samples is None else samples)
        if self._failed or len(self._runs) >= wanted:
            return self._spread
        if self._deciding is None:
            self._deciding = _deciding(self._module)
        if not self._deciding and not values:
            return None
        try:
            for k in range(len(self._runs), wanted):
                hook = RandomRounding(None if k == 0 else SEED + k - 1, self._deciding)
                result = evaluate_module(self._module, self._arguments, hook=hook)
                self._runs.append(
                    (tuple(np.asarray(v) for v in flatten_literal(result)), hook.decisions)
                )
        except HloError:
            self._failed, self._spread = True, None
            return None
        reference_decisions = self._runs[0][1]
        changed = any(decisions != reference_decisions for _, decisions in self._runs[1:])
        self._spread = _Spread(tuple(outputs for outputs, _ in self._runs), changed)
        return self._spread

    def evaluated(self) -> _Spread | None:
        """The spread if it was evaluated, without evaluating it."""
        return self._spread


@attrs.frozen(eq=False)
class RoundingFreedom:
    """Output ``output`` (flattened) of a program whose decisions rounding changes:
    any value within the random roundings' spread (see the module docstring).

    ``reordered``: a sum the kernels add in their own order reaches the output (its
    tolerance is :attr:`heron.harness.tolerance.OutputTolerance.reordered`); then the
    spread applies whether or not the roundings change a decision. The roundings add
    every sum and dot in other orders and carry that on through every op after it, as
    a kernel's own order is carried: a sum that cancels to rounding noise (a bias's
    gradient before a batch mean is subtracted, exactly 0 in exact arithmetic), which
    an optimizer normalises (Lamb's ``m / sqrt(v)`` and ``||p|| / ||u||``) into a step
    of full size in a direction only the noise sets. The reassociation bounds bound the
    sum alone, and error propagation moves the approximations only, not the sum."""

    roundings: RandomRoundings
    output: int
    reordered: bool = False

    def describe(self) -> str:
        """A few words for the report once the roundings were evaluated and change the
        program's decisions (or, for a :attr:`reordered` output, at all); empty before
        (the freedom has not been used)."""
        spread = self.roundings.evaluated()
        if spread is None:
            return ""
        samples = len(spread.outputs) - 1
        if spread.decided_by_rounding:
            return (
                f"within the spread of {samples} random roundings of the"
                " reference, which decide its loops, branches or comparisons another way"
            )
        if self.reordered:
            return (
                f"within the spread of {samples} random roundings of the reference,"
                " which sum in other orders"
            )
        return ""

    def accepts(self, kernel: np.ndarray, reference: np.ndarray) -> np.ndarray:
        kernel = np.asarray(kernel).reshape(-1)
        spread = self.roundings.spread(values=self.reordered)
        if spread is None or not (spread.decided_by_rounding or self.reordered):
            return np.zeros(kernel.size, np.bool_)
        accepted = self._within_spread(kernel, spread)
        if not accepted.all() and spread.decided_by_rounding:
            # a rarer decision: more samples (MORE_SAMPLES); a value's spread needs none
            spread = self.roundings.spread(MORE_SAMPLES, values=self.reordered)
            if spread is not None:
                accepted = self._within_spread(kernel, spread)
        return accepted

    def nan_roundings(self, index: int) -> tuple[int, int] | None:
        """How many of the evaluated random roundings give NaN at element ``index``
        (flat) of this output, and how many were evaluated; None before any were (or
        where they could not be)."""
        spread = self.roundings.evaluated()
        if spread is None:
            return None
        values = [np.asarray(run[self.output]).reshape(-1) for run in spread.outputs[1:]]
        if not values or any(index >= v.size or v.dtype.kind not in "fc" for v in values):
            return None
        return sum(bool(np.isnan(v[index])) for v in values), len(values)

    def _within_spread(self, kernel: np.ndarray, spread: _Spread) -> np.ndarray:
        values = [np.asarray(run[self.output]).reshape(-1) for run in spread.outputs]
        if any(v.size != kernel.size or v.dtype != kernel.dtype for v in values):
            return np.zeros(kernel.size, np.bool_)
        if kernel.dtype.kind == "c":
            return _within(kernel.real, [v.real for v in values]) & _within(
                kernel.imag, [v.imag for v in values]
            )
        if kernel.dtype == np.bool_:
            return np.any(np.stack(values) == kernel, axis=0)
        return _within(kernel, values)


def _within(kernel: np.ndarray, values: list[np.ndarray]) -> np.ndarray:
    """Per element: ``kernel`` within the values' range widened by its width on each
    side, or NaN where some value is NaN."""
    wide = np.stack([v.astype(np.float64) for v in values])
    actual = kernel.astype(np.float64)
    with warnings.catch_warnings(), np.errstate(invalid="ignore"):
        warnings.simplefilter("ignore", RuntimeWarning)  # an element NaN in every value
        low, high = np.nanmin(wide, axis=0), np.nanmax(wide, axis=0)
        width = high - low
        inside = (actual >= low - width) & (actual <= high + width)
    nan_seen = np.isnan(wide).any(axis=0)
    return inside | (np.isnan(actual) & nan_seen)
