"""How closely a kernel's output must match the reference evaluator's.

* Integers, pred, fp8/f4, and every float output that depends on neither a
  transcendental op nor an f32 division or square root: bitwise (any NaN matches any NaN).
  heron's kernels compute such ops exactly as the evaluator does (IEEE
  arithmetic, the same rounding), so any difference is a bug.
* f32 division, sqrt and rsqrt: within 2, 2 and 3 ulp (``FAST_MATH``), as
  XLA:GPU computes them (``div.full.f32``, ``sqrt.approx.f32``,
  ``rsqrt.approx.f32``: :mod:`heron.emitters.fast_math`); the interpreter
  computes them correctly rounded, so it shows none of that error. f64
  division and sqrt are compared bitwise.
* Float outputs that depend on transcendental ops: within the error bound of
  expand-math's approximation of each (:data:`ULP_BOUNDS`, from the table of
  ``heron.emitters.math_accuracy``, expand-math's own). For f64 add one ulp
  (:data:`F64_REFERENCE_ULPS`): the reference is libm's float64 routine,
  itself up to an ulp off. f16/bf16 results are the f32 result rounded once
  more (:data:`NARROW_ULPS`). Several such ops in a chain add their bounds.
  The bound is also met norm-wise: an absolute error of that many ulps of the
  output's largest finite magnitude is accepted, since an approximation's
  error survives cancellation in a later add (``exp(x) + p`` near 0). And it
  is met as the ops after an approximation amplify its error
  (``expm1(25 * log1p(x))``: about 20 times log1p's), which the reference
  evaluator measures (:mod:`heron.harness.error_propagation`), within the
  fused computation and from the earlier kernels' bounds on its arguments.
  An approximation reused along many paths counts once per path, up to
  :data:`MAX_MERGED_PATHS` where the paths meet: counted without a limit, a value
  reused at every step of a loop or a chain had bounds of 10^7 to 10^13 ulps, under
  which any answer of the right sign passed.
* complex magnitudes (``abs``): within 4 ulps (f64: 2), as kernels compute
  ``max * sqrt(1 + (min / max)^2)`` (:data:`COMPLEX_ULP_BOUNDS`).
* c64 products: within 4 ulps each (:data:`COMPLEX_ULP_BOUNDS`), norm-wise where
  a part cancels: a kernel computes ``(ac - bd) + (ad + bc) i`` in f32 (or with
  fused multiply-adds), the evaluator rounds the complex128 product once. A
  reduce applies its reducer's bounds once per element it combines (a product
  of n values rounds n - 1 times). c128 products as well (LLVM may fuse a part
  into an fma), and a complex sign by its magnitude's bound and a division.
* Float and complex outputs of a reduction emitter that depend on a reduce:
  the kernel sums in its own order, so the moderate inputs are compared
  within the reassociation bounds (:func:`output_tolerance`), and the edge
  inputs, where the order decides between overflow, cancellation and NaN,
  only for write coverage. An element is accepted within either of:

  - ``t * max(1, |reference|)`` (absolute and relative ``t``: 1e-4 for 32/64-bit
    outputs, XLA's test default, 3e-2 for 16-bit: :func:`reassociation_bounds`);
  - the error bound of two summation orders (:func:`summation_bound`),
    ``(n - 1 + ceil(log2 n)) u sum|x_i|`` per output element, ``n`` the
    elements reduced into it, ``x_i`` the reduce's operand values (evaluated
    on the same inputs), ``u`` the unit roundoff of the reduce's own type, the
    type every partial sum is rounded to (2^-8 for bf16, 2^-11 for f16,
    2^-24 for f32; fp8 reductions are covered too). The kernel's order, any
    order, is within ``(n-1) u sum|x_i|`` of the exact sum (to first order);
    the reference's pairwise tree (``heron.hlo.evaluator.reductions``) within
    ``ceil(log2 n) u sum|x_i|``. Plus one ulp of each type the sum is
    converted to afterwards (1 for an integer type). Only for a plain
    add reducer (one operand) whose result reaches the output through
    converts, copies, negates and absolute values; other reducers (max, min: exact in any order) get
    the first bound only. For 16-bit accumulators and more than ~128
    elements the bound exceeds ``sum|x_i|`` (the worst case is that bad): a
    dropped element is then no longer caught on values, a plainly wrong one
    (twice the sum, a wrong sign of a one-signed sum) still is.

  A complex sum is two float sums, of the real parts and of the imaginary
  parts (complex addition is componentwise): each part gets the bounds of its
  component type (f32 for c64), ``sum|x_i|`` taken over that part; through
  copies, negates and converts to a complex type.
* Float outputs that depend on a dot (or a convolution): every kernel of one
  (the GEMM emitter's tiles and MMA fragments, a library's split-K) sums the
  products in its own order, so they get the reassociation bounds whatever
  emitter computed them; so do heron's library calls and long float
  cumulative sums and products, which the compiler computes block by block
  (``heron.compiler.scan_rewriter``): the rule of
  :func:`heron.compiler.summation_order.sums_in_its_own_order`. A cumulative sum
  also gets the summation bound of its prefix, ``2 (n - 1) u sum|x_i|`` over the
  ``n`` terms (the initial value one of them) summed into each element: the
  blocks' order and the reference's sequential one, each within ``(n-1) u
  sum|x_i|`` of the exact prefix (a bf16 cumsum of 26 normal values, partial
  sums near 1 and ``sum|x_i|`` near 20, differs by 8 ulps where the fixed ``t``
  allows about 4). Where the dot
  may round its operands first (TF32, XLA:GPU's default for f32 dots where the
  checked Target has it, ``Target.tf32``: sm_80 and later; a bf16 algorithm:
  :mod:`heron.hlo.dot_precision`), ``t`` grows to what that costs
  (:func:`narrowed_product_tolerance`); on a Target without TF32 it does not.
* Float outputs of a scatter that sums (or multiplies) updates that meet at an
  element, computed by a kernel that may sum in its own order (atomics in arrival
  order on a GPU, a loop launch striding over the updates on the interpreter):
  the reassociation bounds. Integer sums, overwrites (which update wins is no
  rounding), unique indices and serial (variadic) scatters are compared as above.
* A corpus file's RUN line may give ``--abs_error_bound`` / ``--rel_error_bound``:
  an element within either of them is accepted too, as XLA's
  ``gpu_test_correctness`` accepts it.

Complex values are compared part by part, each part as a float of the
component type, and an element differs when either part does (XLA's literal
comparison does the same); an ulp bound is also met by both parts within that
many ulps of the element's magnitude ``|w|`` (a complex op's error is relative to
its value: the real part of ``expm1(1 + i)`` cancels). Distances are counted in
ulps of the output type (:func:`ulp_distance`; of the component type for
complex), so they mean the same for tiny and huge values. +0 and -0 are the same value, 0
ulps apart; a bitwise comparison still tells them apart (``negate(0.0)`` is
``-0.0``), by their sign, not by a distance.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from typing import TYPE_CHECKING

import attrs
import ml_dtypes
import numpy as np

from heron.compiler.scan_rewriter import scan_of
from heron.compiler.summation_order import ORDER_FREE_OPCODES, sums_in_its_own_order
from heron.emitters.math_accuracy import ACCURACY, DIVISION_ULPS, FAST_MATH
from heron.harness.error_propagation import ErrorPropagation, error_propagation
from heron.harness.nan_ties import NanTies, nan_ties
from heron.harness.reference_values import value_of
from heron.harness.sort_orders import SortFreedom, sort_freedom
from heron.hlo import ElementType
from heron.hlo.custom_calls.library import stood_for
from heron.hlo.determinism import order_dependence
from heron.hlo.dot_precision import check_tolerance
from heron.hlo.errors import HloError
from heron.hlo.ir import Instruction
from heron.hlo.shapes import ArrayShape, TupleShape

if TYPE_CHECKING:
    from heron.harness.agreement import WrittenSum
    from heron.harness.random_rounding import RoundingFreedom
    from heron.harness.unrolled import LoopErrorPropagation

__all__ = [
    "is_plain_add",
    "F64_REFERENCE_ULPS",
    "NARROW_ULPS",
    "ULP_BOUNDS",
    "ErrorBounds",
    "Mismatches",
    "OutputTolerance",
    "describe_value",
    "mismatches",
    "approximations_reaching",
    "opcodes_reaching",
    "ordered",
    "leaf_of",
    "output_sources",
    "output_tolerance",
    "own_ulps",
    "reassociation_bounds",
    "scan_summation_bound",
    "summation_bound",
    "ulp_bound",
    "ulp_distance",
]

#: HLO opcode -> the math op expand-math approximates it with (its bounds are
#: :data:`heron.emitters.math_accuracy.ACCURACY`'s, the one table).
_APPROXIMATED_BY = {
    "exponential": "exp",
    "exponential-minus-one": "expm1",
    "log": "log",
    "log-plus-one": "log1p",
    "sine": "sin",
    "cosine": "cos",
    "tan": "tan",
    "atan2": "atan2",
    "asin": "asin",
    "acos": "acos",
    "sinh": "sinh",
    "cosh": "cosh",
    "tanh": "tanh",
    "asinh": "asinh",
    "acosh": "acosh",
    "atanh": "atanh",
    "erf": "erf",
    "cbrt": "cbrt",
    "power": "powf",
    "rsqrt": "rsqrt",
}
#: Max ulps (f32, f64) of expand-math's approximations on the GPU, by HLO opcode. The
#: f32 bounds of the ops that take ``2^r`` from the approximate instruction include its
#: 2 ulp: the interpreter computes ``2^r`` correctly rounded, a GPU does not
#: (docs/pipeline.md, "Accuracy contract: what heron shares with XLA").
ULP_BOUNDS: dict[str, tuple[int, int]] = {
    opcode: ACCURACY[op] for opcode, op in _APPROXIMATED_BY.items()
}
# 1 / (1 + exp(-x)): exp's bound (its error is damped by e/(1+e) <= 1) plus the add's
# rounding and the division's error (f32: within 2 ulp, as XLA divides; f64: rounded).
ULP_BOUNDS["logistic"] = (
    ACCURACY["exp"][0] + 1 + DIVISION_ULPS[0],
    ACCURACY["exp"][1] + 1,
)
# XLA:GPU's fast f32 division, sqrt and rsqrt (heron.emitters.fast_math).
ULP_BOUNDS.update(FAST_MATH)
#: A complex product, which kernels compute in the component type ``(ac - bd) + (ad +
#: bc) i`` (each product and sum rounded, or fused) where the evaluator rounds the
#: complex128 product once: (f32, f64) ulps, read norm-wise (of the output's largest
#: magnitude) where a part cancels.
COMPLEX_MULTIPLY = "multiply (complex)"
#: A complex magnitude, which kernels compute as ``max * sqrt(1 + (min / max)^2)`` (MLIR's
#: formula, XLA's: the squares cannot overflow) where the evaluator rounds the exact
#: ``hypot`` once: the quotient's and the square root's errors (XLA:GPU's fast division
#: and square root in f32) and the other roundings, which the square root halves; f64:
#: four correctly rounded ops. A sweep found ``jnp.abs`` of c64 values 1-2 ulps from the
#: evaluator in a third of 4,096 random elements (XLA:CPU's values, bit for bit).
COMPLEX_ABS = "abs (complex)"
#: A complex sign, ``z / |z|``: the magnitude's bound and the division's rounding (a
#: sweep found c128 ``sign(1 - 2.5i)`` 2 ulps from the evaluator's exact ``hypot``, the
#: value MLIR's magnitude formula gives; XLA:CPU's too).
COMPLEX_SIGN = "sign (complex)"
COMPLEX_ULP_BOUNDS: dict[str, tuple[int, int]] = {
    # f64 as f32: LLVM may fuse ``ac - bd`` into one fma (XLA allows the contraction),
    # 1-5 ulps from numpy's complex128 product in 27 of 64 random c128 elements (sweep 9)
    COMPLEX_MULTIPLY: (4, 4),
    COMPLEX_ABS: (DIVISION_ULPS[0] + FAST_MATH["sqrt"][0], 2),
}
COMPLEX_ULP_BOUNDS[COMPLEX_SIGN] = (
    COMPLEX_ULP_BOUNDS[COMPLEX_ABS][0] + DIVISION_ULPS[0],
    COMPLEX_ULP_BOUNDS[COMPLEX_ABS][1] + 1,
)
#: f16/bf16 results: the f32 result rounded once more.
NARROW_ULPS = 1
#: The f64 reference (numpy's libm routines) is itself up to this many ulps off.
F64_REFERENCE_ULPS = 1
#: The distance of values no ulp bound accepts: a NaN against a number, and any
#: difference in a bitwise-compared type (integers, pred, fp8/f4).
NAN_DISTANCE = 1 << 62


# -- what each output depends on --------------------------------------------------------


def leaf_of(sources: list[Instruction], k: int) -> int:
    """Which of ``sources[k]``'s results output ``k`` is: a tuple-shaped source (a
    variadic reduce kept whole) stands for several outputs in a row, one per leaf."""
    return sum(1 for source in sources[:k] if source is sources[k])


def output_sources(root: Instruction) -> list[Instruction]:
    """The instruction producing each array leaf of ``root`` (tuples looked through).

    For the outputs of a sequential computation (the entry's, whose root
    tuples may nest). A fused computation's outputs come from its roots:
    :func:`heron.hlo.fusion_outputs.output_roots`.
    """
    if root.opcode == "tuple":
        return [leaf for operand in root.operands for leaf in output_sources(operand)]
    if isinstance(root.shape, TupleShape):
        return [root] * len(list(root.shape.leaves()))
    return [root]


def instructions_reaching(instruction: Instruction) -> list[Instruction]:
    """``instruction`` and everything it depends on (called computations too)."""
    seen: set[int] = set()
    reached: list[Instruction] = []
    stack = [instruction]
    while stack:
        current = stack.pop()
        if id(current) in seen:
            continue
        seen.add(id(current))
        reached.append(current)
        stack.extend(current.operands)
        for called in current.called_computations():
            stack.extend(called.instructions)
    return reached


def opcodes_reaching(instruction: Instruction) -> list[str]:
    """Opcodes of ``instruction`` and everything it depends on (called computations too)."""
    return [inst.opcode for inst in instructions_reaching(instruction)]


def narrowed_product_tolerance(source: Instruction, *, tf32: bool) -> float:
    """The widest :func:`heron.hlo.dot_precision.check_tolerance` of the dots and
    convolutions ``source`` depends on: what rounding their operands to TF32 (or
    bf16, as their algorithm says) may cost. ``tf32``: the checked Target's
    :attr:`heron.target.target.Target.tf32` (whether its f32 dots at default
    precision multiply in TF32)."""
    tolerances = [0.0]
    for inst in instructions_reaching(source):
        if inst.opcode in ORDER_FREE_OPCODES:
            tolerances.append(check_tolerance(inst, tf32=tf32))
        elif (replaced := stood_for(inst)) is not None:
            tolerances.append(check_tolerance(replaced, tf32=tf32))
    return max(tolerances)


def ulp_bound(source: Instruction, element: ElementType) -> int:
    """Allowed ulps for an output of type ``element`` produced by ``source`` (0: bitwise)."""
    if not element.is_floating and not element.is_complex:
        return 0
    if element.bit_width <= 8:
        return 0
    bound = 0
    for opcode, paths in approximations_reaching(source).items():
        f32, f64 = ULP_BOUNDS.get(opcode) or COMPLEX_ULP_BOUNDS[opcode]
        if element in (ElementType.F32, ElementType.C64):
            bound += f32 * paths
        elif element in (ElementType.F64, ElementType.C128):
            if f64:  # an f64 op computed exactly (a division) needs no allowance
                bound += (f64 + F64_REFERENCE_ULPS) * paths
        else:
            bound += NARROW_ULPS * paths
    return bound


#: Most times the paths from one approximated opcode's instructions count where they
#: meet again (:func:`approximations_reaching`). Each path carries the error at most
#: unamplified only when no op after it scales it down: a value reused at every step
#: (``y = y * 0.5 + y * 0.5`` forty times) has 2^40 paths from its ``exp`` and its
#: error no larger than exp's, and counting them allowed 3 * 2^40 ulps, so that a
#: result 1000 times the reference passed (a helper's sweep: quadax's ``quadgk``,
#: interpax's splines, a haliax AdamW step had bounds of 10^7 to 10^13 ulps). Where
#: the ops after an approximation do amplify its error, the reference evaluator
#: measures it (:mod:`heron.harness.error_propagation`, :mod:`heron.harness.unrolled`).
MAX_MERGED_PATHS = 8


def approximations_reaching(source: Instruction) -> dict[str, int]:
    """Per approximated opcode (:data:`ULP_BOUNDS`), how many paths lead from its
    instructions to ``source``: an approximation's error reaches the output once
    per path (``exp(x) * exp(x)`` carries exp's error twice), up to
    :data:`MAX_MERGED_PATHS` where paths meet (never fewer than one operand brings
    alone). Called computations count once per calling instruction, a reduce's reducer
    once per element combined."""
    memo: dict[int, dict[str, int]] = {}  # one walk's memo (by id), not a cache
    stack: list[tuple[Instruction, bool]] = [(source, False)]
    while stack:  # post-order without recursion: fused computations can be deep
        inst, ready = stack.pop()
        if id(inst) in memo:
            continue
        called = [c.root_instruction for c in inst.called_computations()]
        inputs = [*inst.operands, *called]
        called_ids = {id(c) for c in called}
        if not ready:
            stack.append((inst, True))
            stack.extend((i, False) for i in inputs if id(i) not in memo)
            continue
        kind = _approximation(inst)
        total: dict[str, int] = {kind: 1} if kind is not None else {}
        for i in inputs:
            times = _applications(inst) if id(i) in called_ids else 1
            for opcode, n in memo[id(i)].items():
                alone = n * times
                merged = min(total.get(opcode, 0) + alone, MAX_MERGED_PATHS)
                total[opcode] = max(merged, alone, total.get(opcode, 0))
        memo[id(inst)] = total
    return memo[id(source)]


def _approximation(inst: Instruction) -> str | None:
    """Which bound of :data:`ULP_BOUNDS` or :data:`COMPLEX_ULP_BOUNDS` ``inst`` adds."""
    if inst.opcode in ULP_BOUNDS:
        return inst.opcode
    if inst.opcode == "multiply" and any(
        leaf.element_type.is_complex for leaf in inst.shape.leaves()
    ):
        return COMPLEX_MULTIPLY
    if (
        inst.opcode == "abs"
        and inst.operands
        and inst.operands[0].array_shape.element_type.is_complex
    ):
        return COMPLEX_ABS
    if inst.opcode == "sign" and inst.array_shape.element_type.is_complex:
        return COMPLEX_SIGN
    return None


def _applications(inst: Instruction) -> int:
    """How many times ``inst`` applies its called computation on the way to one output
    element: a reduce's reducer once per element combined (a product of n complex
    values rounds n - 1 times), everything else once."""
    operand = inst.operands[0] if inst.operands else None
    if operand is None or not isinstance(operand.shape, ArrayShape):
        return 1
    if inst.opcode == "reduce":
        dims = [operand.shape.dims[int(d)] for d in inst.attr("dimensions")]
        return max(1, int(np.prod(dims, dtype=np.int64)) - 1)
    if inst.opcode == "reduce-window" and (window := inst.attributes.get("window")):
        return max(1, int(np.prod([d.size for d in window.dims], dtype=np.int64)) - 1)
    return 1


# -- comparison -----------------------------------------------------------------------


def ordered(values: np.ndarray) -> np.ndarray:
    """Float bits as integers ordered like the floats: neighbours differ by 1.

    Sign and magnitude become one signed number, so +0.0 and -0.0 (the same
    value) are both 0 and the smallest subnormals either side of zero are -1
    and 1. The sign is the type's top bit (bit 3 of a byte holding an f4).
    64-bit types give Python integers (their differences need 64 bits).
    """
    width = values.dtype.itemsize * 8
    raw = np.ascontiguousarray(values).view(f"uint{width}")
    bits = raw.astype(np.int64 if width < 64 else object)
    sign = 1 << (ml_dtypes.finfo(values.dtype).bits - 1)
    negative = bits >= sign
    return np.where(negative, -(bits - sign), bits)


def ulp_distance(a: np.ndarray, b: np.ndarray) -> np.ndarray:
    """Units in the last place between two same-typed float arrays, per element.

    The number of steps between neighbouring values of the type from one to
    the other (:func:`ordered`): 0 for equal values, +0 and -0 included; 1 for
    neighbours; 2 for the smallest subnormals either side of zero. Any NaN
    against any NaN is 0 apart, a NaN against a number :data:`NAN_DISTANCE`.
    """
    nan_a = np.isnan(a.astype(np.float64))
    nan_b = np.isnan(b.astype(np.float64))
    distance = np.abs(ordered(a) - ordered(b))
    return np.where(nan_a | nan_b, np.where(nan_a & nan_b, 0, NAN_DISTANCE), distance)


def _zero_signs_differ(a: np.ndarray, b: np.ndarray) -> np.ndarray:
    """Per element: both zero, of opposite signs (what a bitwise comparison must still see)."""
    if a.dtype == np.bool_ or np.issubdtype(a.dtype, np.integer) or a.dtype.itemsize == 1:
        return np.zeros(a.shape, np.bool_)  # exact or bitwise already
    wide_a, wide_b = a.astype(np.float64), b.astype(np.float64)
    return (wide_a == 0) & (wide_b == 0) & (np.signbit(wide_a) != np.signbit(wide_b))


@attrs.frozen
class Mismatches:
    """Flat (logical, row-major) indices where two arrays differ too much, and by how much.

    ``distances`` are ulps for floats; :data:`NAN_DISTANCE` when one side
    only is a NaN, and for any difference of a bitwise-compared type.
    """

    indices: np.ndarray
    distances: np.ndarray

    @property
    def count(self) -> int:
        return int(self.indices.size)


@attrs.frozen
class ErrorBounds:
    """A RUN line's ``--abs_error_bound`` / ``--rel_error_bound`` (None: not given)."""

    absolute: float | None = None
    relative: float | None = None
    #: An absolute bound per element (flat, row-major, or one value for all):
    #: :func:`summation_bound`'s, for a reduction summed in another order. For a
    #: complex output a complex array: the real part's bound in ``.real``, the
    #: imaginary part's in ``.imag``.
    per_element: np.ndarray | None = attrs.field(default=None, eq=False)

    def part(self, which: str) -> ErrorBounds:
        """The bounds of a complex output's ``"real"`` or ``"imag"`` part."""
        if which not in ("real", "imag"):
            raise ValueError(f"part {which!r}: expected 'real' or 'imag'")
        bound = self.per_element
        if bound is not None and np.iscomplexobj(bound):
            bound = np.asarray(getattr(np.asarray(bound), which), np.float64)
        return attrs.evolve(self, per_element=bound)

    def accepts(self, kernel: np.ndarray, reference: np.ndarray) -> np.ndarray:
        """Per element: within the absolute, the relative or the per-element bound
        (complex values: both parts, each within its own)."""
        if self.absolute is None and self.relative is None and self.per_element is None:
            return np.zeros(kernel.shape, np.bool_)
        if np.iscomplexobj(kernel):
            real = self.part("real").accepts(kernel.real, reference.real)
            return real & self.part("imag").accepts(kernel.imag, reference.imag)
        a = kernel.astype(np.float64)
        b = reference.astype(a.dtype)
        with np.errstate(all="ignore"):
            error = np.abs(a - b)
            ok = np.zeros(kernel.shape, np.bool_)
            if self.absolute is not None:
                ok |= error <= self.absolute
            if self.relative is not None:
                ok |= error <= self.relative * np.abs(b)
            if self.per_element is not None:
                bound = np.asarray(self.per_element, np.float64)
                ok |= error <= (bound.reshape(kernel.shape) if bound.size > 1 else bound)
        return ok


#: Relative tolerance of a float reduction computed in another order (XLA's test default
#: for 32/64-bit; 16-bit types keep about 3 decimal digits).
REASSOCIATION_TOLERANCE = {16: 3e-2, 32: 1e-4, 64: 1e-4}


def reassociation_bounds(
    element: ElementType, given: ErrorBounds, floor: float = 0.0
) -> ErrorBounds | None:
    """Bounds for a float output a parallel reduction computes in its own order.

    A tree of partial sums cannot match the reference's sequential sum bit
    for bit; the error allowed is ``t * max(1, |reference|)`` (absolute and
    relative ``t``), or the RUN line's bounds where those are wider; for a
    complex type, those of its component type, part by part. None for types
    whose reductions are exact in any order (integers, pred) or that this
    does not cover (fp8, f4: compared as usual). ``floor``: a wider ``t`` the
    computation needs (:func:`narrowed_product_tolerance`).
    """
    part = element.component_type
    if not part.is_floating or part.bit_width not in REASSOCIATION_TOLERANCE:
        return None
    t = max(REASSOCIATION_TOLERANCE[part.bit_width], floor)
    return ErrorBounds(
        absolute=max(t, given.absolute or 0.0), relative=max(t, given.relative or 0.0)
    )


#: Ops that carry a reduce's result to an output element for element, moving two values
#: no further apart (the bound follows; a convert adds its own rounding).
_CARRIERS = frozenset({"convert", "copy", "negate", "abs"})
#: Ops that carry it scaled by a constant factor (``jnp.mean``'s divide by the count):
#: the bound scales with it and gains the op's own rounding.
_SCALINGS = ("multiply", "divide")
#: What a constant factor may pass through on its way from its ``constant``.
_FACTOR_CARRIERS = frozenset({"broadcast", "reshape", "bitcast", "convert", "copy"})


def _constant_factor(inst: Instruction) -> bool:
    """Whether ``inst`` is a constant, broadcast, reshaped or converted: a value the
    check knows exactly."""
    while inst.opcode in _FACTOR_CARRIERS and len(inst.operands) == 1:
        inst = inst.operands[0]
    return inst.opcode == "constant"


def _scaled(inst: Instruction) -> Instruction | None:
    """The operand a multiply or divide scales by a constant factor (a divide's
    numerator only), or None."""
    if inst.opcode not in _SCALINGS or len(inst.operands) != 2:
        return None
    value, factor = inst.operands
    if _constant_factor(factor):
        return value
    if inst.opcode == "multiply" and _constant_factor(value):
        return factor
    return None


def is_plain_add(reduce: Instruction) -> bool:
    """A one-operand reduce whose reducer is ``add(parameter, parameter)``."""
    if len(reduce.operands) != 2:
        return False
    reducer = reduce.called("to_apply")
    root = reducer.root_instruction
    return root.opcode == "add" and all(o.opcode == "parameter" for o in root.operands)


def _reduce_feeding(source: Instruction) -> tuple[Instruction, list[Instruction]] | None:
    """The reduce ``source`` is computed from through carriers only, and the carriers."""
    carriers = []
    current = source
    while True:
        if current.opcode in _CARRIERS and len(current.operands) == 1:
            carriers.append(current)
            current = current.operands[0]
        elif (scaled := _scaled(current)) is not None:
            carriers.append(current)
            current = scaled
        else:
            break
    if (
        current.opcode not in ("reduce", "dot")
        and _add_scan(current) is None
        and not is_summing_scatter(current)
    ):
        return None
    return current, carriers


def is_summing_scatter(scatter: Instruction) -> bool:
    """A one-operand scatter whose combiner is ``add(parameter, parameter)``: each element
    is the operand's value plus the updates that land there, summed in whatever order
    its kernel meets them (atomics; a sorted scatter's segmented scan)."""
    if scatter.opcode != "scatter" or len(scatter.operands) != 3:
        return False
    root = scatter.called("to_apply").root_instruction
    return root.opcode == "add" and all(o.opcode == "parameter" for o in root.operands)


def _add_scan(inst: Instruction) -> tuple[int, bool] | None:
    """(dimension, reversed) of a cumulative sum the scan rewriter regroups; else None."""
    found = scan_of(inst)
    if found is None or found[2] != "add":
        return None
    return found[0], found[1]


def _summed_reduce(
    source: Instruction,
) -> tuple[Instruction, list[Instruction], ElementType] | None:
    """(reduce, carriers, its type) when :func:`summation_bound` covers ``source``.

    A complex sum only through carriers that keep it complex (copies, negates,
    converts to a complex type): each part's bound stays that part's. Its
    ``abs`` mixes the parts and gets the fixed bounds only.
    """
    found = _reduce_feeding(source)
    if found is None:
        return None
    reduce, carriers = found
    if isinstance(reduce.shape, TupleShape):
        return None
    if reduce.opcode == "dot":
        if not reduce.shape.element_type.is_floating or reduce.shape.element_type.is_complex:
            return None
    elif reduce.opcode == "scatter":
        if reduce.shape.element_type.is_complex:
            return None
    elif not is_plain_add(reduce):
        return None
    element = reduce.shape.element_type
    if not element.component_type.is_floating:
        return None
    if element.is_complex and not all(c.shape.element_type.is_complex for c in carriers):
        return None
    if element.is_complex and any(c.opcode in _SCALINGS for c in carriers):
        return None  # a complex factor mixes the parts' bounds
    return reduce, carriers, element


def unit_roundoff(element: ElementType) -> float:
    """Half the epsilon of a float type: the largest relative error of one rounding."""
    return float(ml_dtypes.finfo(element.numpy_dtype).eps) / 2


def summation_bound(source: Instruction, computation, args) -> np.ndarray | None:
    """Per element of ``source``'s output: how far two summation orders may differ.

    ``(n - 1 + ceil(log2 n)) u sum|x_i|`` over the elements ``x_i`` reduced
    into it (see the module docstring), ``x`` the reduce's operand evaluated by the reference
    evaluator from ``args`` (the arguments of ``computation``, the fused
    computation holding ``source``), plus one ulp of the output type when a
    convert after it (1 for an integer type); for a cumulative sum the compiler regroups,
    ``2 (n - 1) u sum|x_i|`` over each element's prefix (the module docstring). None when
    ``source`` is neither a plain-add float reduce nor such a sum reaching the output
    through converts, copies, negates and absolute values.
    A complex sum's bound is complex: its real part bounds the real parts' sum, its
    imaginary part the imaginary parts' (:attr:`ErrorBounds.per_element`).
    """

    summed = _summed_reduce(source)
    if summed is None:
        return None
    reduce, carriers, element = summed
    try:
        values = np.asarray(value_of(computation, reduce.operands[0], args))
        init = np.asarray(value_of(computation, reduce.operands[1], args))
    except HloError:  # e.g. over the memory budget: the fixed bounds only
        return None
    if reduce.opcode == "dot":  # the sums of products: sum|a_k b_k| per output element
        values, init = _dot_magnitudes(reduce, values, init), None
    elif reduce.opcode == "scatter":  # sum|x| and the terms met at each operand element
        try:
            updates = np.asarray(value_of(computation, reduce.operands[2], args))
        except HloError:
            return None
        values, init = _scatter_magnitudes(reduce, values, init, updates), None
    factors = {}
    for carrier in carriers:
        if carrier.opcode in _SCALINGS:
            factor = carrier.operands[1] if _constant_factor(carrier.operands[1]) else None
            factor = factor if factor is not None else carrier.operands[0]
            try:
                value = np.abs(np.asarray(value_of(computation, factor, args), np.float64))
            except HloError:
                return None
            factors[carrier] = 1.0 / value if carrier.opcode == "divide" else value
    if element.is_complex:  # two float sums: each part's bound from that part's values
        real = _part_bound(reduce, values.real, init.real, element.component_type, carriers)
        imag = _part_bound(reduce, values.imag, init.imag, element.component_type, carriers)
        bound = np.empty(real.shape, np.complex128)  # not real + 1j * imag: 1j * inf is nan
        bound.real, bound.imag = real, imag
        return bound.reshape(-1)
    return _part_bound(reduce, values, init, element, carriers, factors).reshape(-1)


def scan_summation_bound(source: Instruction, computation, args) -> np.ndarray | None:
    """:func:`summation_bound` where ``source`` is (through carriers) a cumulative sum the
    compiler regroups into blocks (``heron.compiler.scan_rewriter``); else None. Asked of
    the module as written: after the rewrite no one instruction sums the prefix."""
    summed = _summed_reduce(source)
    if summed is None or _add_scan(summed[0]) is None:
        return None
    return summation_bound(source, computation, args)


def _magnitudes_and_steps(
    reduce: Instruction, values: np.ndarray, init: np.ndarray
) -> tuple[np.ndarray, np.ndarray | int]:
    """``sum|x_i|`` per output element of ``reduce`` (a reduce or a cumulative sum) and
    the roundings two of its summation orders may differ by, each to first order."""
    if reduce.opcode == "dot":  # ``values``: sum|a_k b_k| already
        contracted = tuple(reduce.attributes.get("lhs_contracting_dims", ()))
        shape = reduce.operands[0].shape.dims
        k = int(np.prod([shape[d] for d in contracted], dtype=np.int64)) if contracted else 1
        # each product rounded, then any order of the sum against the reference's
        return values, k + max(k - 1, 0) + (math.ceil(math.log2(k)) if k > 1 else 0)
    if reduce.opcode == "scatter":  # ``values``: (sum|x|, terms) per operand element
        magnitudes, terms = values
        steps = terms - 1 + np.ceil(np.log2(terms))
        return magnitudes, steps
    with np.errstate(all="ignore"):
        magnitudes = np.abs(values.astype(np.float64))
        scan = _add_scan(reduce)
        if scan is not None:
            # Each element sums its prefix (suffix, reversed) and the initial value:
            # the blocks' order and the reference's sequential one, (n - 1) u each.
            dim, backwards = scan
            if backwards:
                magnitudes = np.flip(magnitudes, dim)
            prefix = np.cumsum(magnitudes, axis=dim) + abs(float(init))
            terms = np.arange(1, values.shape[dim] + 1) + 1  # with the initial value
            terms = terms.reshape([-1 if d == dim else 1 for d in range(values.ndim)])
            if backwards:
                prefix, terms = np.flip(prefix, dim), np.flip(terms, dim)
            return prefix, 2 * (terms - 1)
        dims = tuple(int(d) for d in reduce.attr("dimensions"))
        n = int(np.prod([values.shape[d] for d in dims], dtype=np.int64)) if dims else 1
        # Any order (the kernel's) and the reference's pairwise tree, each against the
        # exact sum.
        steps = max(n - 1, 0) + (math.ceil(math.log2(n)) if n > 1 else 0)
        return magnitudes.sum(axis=dims), steps


def _scatter_magnitudes(
    scatter: Instruction, operand: np.ndarray, indices: np.ndarray, updates: np.ndarray
) -> tuple[np.ndarray, np.ndarray]:
    """Per element of a summing scatter's operand: ``|operand| + sum|update|`` over the
    updates that land there, and how many terms that sum has (the operand's value
    included), in float64: where the updates go is the evaluator's
    (:func:`heron.hlo.evaluator.indexing_ops.scatter_destinations`)."""
    from heron.hlo.evaluator.indexing_ops import scatter_destinations

    targets, sources = scatter_destinations(scatter, indices, updates.shape, operand.shape)
    with np.errstate(all="ignore"):
        magnitudes = np.abs(operand.astype(np.float64)).reshape(-1)
        np.add.at(magnitudes, targets, np.abs(updates.astype(np.float64)).reshape(-1)[sources])
    terms = np.ones(magnitudes.size, np.float64)
    np.add.at(terms, targets, 1.0)
    return magnitudes.reshape(operand.shape), terms.reshape(operand.shape)


def _dot_magnitudes(dot: Instruction, lhs: np.ndarray, rhs: np.ndarray) -> np.ndarray:
    """``sum_k |a_k| |b_k|`` for each element of ``dot``'s result, in float64."""
    from heron.hlo.evaluator.linalg import dot_product

    with np.errstate(all="ignore"):
        return dot_product(
            dot, np.abs(lhs.astype(np.float64)), np.abs(rhs.astype(np.float64)), np.float64
        )


def _part_bound(
    reduce: Instruction,
    values: np.ndarray,
    init: np.ndarray,
    element: ElementType,
    carriers: list[Instruction],
    factors: dict[Instruction, np.ndarray] | None = None,
) -> np.ndarray:
    """:func:`summation_bound` of ``reduce``'s float sum of ``values``, rounded to
    ``element``, then through ``carriers`` (a complex sum: one part of it; ``factors``:
    the magnitude each scaling carrier multiplies by)."""
    magnitudes, steps = _magnitudes_and_steps(reduce, values, init)
    bound = steps * unit_roundoff(element) * magnitudes
    for carrier in reversed(carriers):  # from the reduce outwards
        if carrier.opcode in _SCALINGS:
            # both sums scaled, then rounded once more: one ulp at the larger
            factor = (factors or {})[carrier]
            with np.errstate(all="ignore"):
                magnitudes, bound = magnitudes * factor, bound * factor
                top = (magnitudes + bound).astype(carrier.shape.element_type.numpy_dtype)
                bound = bound + np.abs(np.spacing(top).astype(np.float64))
            continue
        if carrier.opcode != "convert":
            continue  # copy, negate, abs: exact, and no wider apart
        to = carrier.shape.element_type.component_type
        if to.is_floating:
            # A convert rounds both sums once more: one ulp of its type at the larger.
            with np.errstate(all="ignore"):
                top = (magnitudes + bound).astype(to.numpy_dtype)
                bound = bound + np.abs(np.spacing(top).astype(np.float64))
        else:
            bound = bound + 1.0  # a convert to an integer type truncates both sums
    return np.where(np.isnan(bound), np.inf, bound)


@attrs.frozen
class OutputTolerance:
    """How one output is compared: ulps, bounds, and whether its sum's order may differ.

    ``reordered``: a float reduction the kernel sums in its own order (the
    reassociation bounds apply; edge inputs are compared for coverage only).
    """

    ulps: int = 0
    bounds: ErrorBounds = ErrorBounds()
    reordered: bool = False
    #: An arg-reduction's index output over rows with several NaNs: either NaN's index
    #: is accepted (:mod:`heron.harness.nan_ties`).
    ties: NanTies | None = attrs.field(default=None, eq=False)
    #: A sort's output whose order is open where keys are equivalent (an unstable sort)
    #: or the comparator is not a strict weak order: any order of those positions' values
    #: is accepted (:mod:`heron.harness.sort_orders`).
    orders: SortFreedom | None = attrs.field(default=None, eq=False)
    #: The approximations' errors as the ops after them amplify them, measured where the
    #: ulp bound refuses an element (:mod:`heron.harness.error_propagation`).
    #: An output a loop reaches: its errors as every trip carries them on, measured on the
    #: program unrolled (:mod:`heron.harness.unrolled`).
    amplified: ErrorPropagation | LoopErrorPropagation | None = attrs.field(default=None, eq=False)
    #: A sum of the module as written, carried to this output, that a kernel before the
    #: output's own summed in its order: that sum's bound per element
    #: (:class:`heron.harness.agreement.WrittenSum`).
    summed: WrittenSum | None = attrs.field(default=None, eq=False)
    #: An output of a program whose decisions (loops, conditionals, comparisons of floats)
    #: rounding changes: any value in the spread of random roundings of the reference
    #: (:mod:`heron.harness.random_rounding`).
    rounding: RoundingFreedom | None = attrs.field(default=None, eq=False)

    def mismatches(self, kernel: np.ndarray, reference: np.ndarray) -> Mismatches:
        found = mismatches(kernel, reference, self.ulps, self.bounds)
        for freedom in (self.amplified, self.summed, self.ties, self.orders, self.rounding):
            if freedom is None or not found.count:
                continue
            accepted = freedom.accepts(kernel, reference)[found.indices]
            found = Mismatches(found.indices[~accepted], found.distances[~accepted])
        return found

    def describe(self) -> str:
        """A few words: ``bitwise``, ``2 ulps of ...``, ``reassociation bounds``, RUN-line
        bounds, ``any NaN's index``. An ulp bound names both of its readings (the
        element's own ulps, or as many of the output's largest magnitude:
        :func:`_within_normwise`), so that a report's "max 1060 ulp" beside "2 ulps"
        does not read as a contradiction."""
        parts = []
        if self.ulps:
            ulps = f"{self.ulps} ulp{'s' * (self.ulps != 1)}"
            parts.append(f"{ulps} of the element or of the output's largest magnitude")
        if self.amplified is not None:
            parts.append("or as the ops after an approximation amplify its error")
        if self.reordered:
            parts.append("reassociation bounds")
        else:
            if self.bounds.absolute is not None:
                parts.append(f"abs {self.bounds.absolute:g}")
            if self.bounds.relative is not None:
                parts.append(f"rel {self.bounds.relative:g}")
        if self.ties is not None:
            parts.append("any NaN's index where a row has several")
        if self.orders is not None:
            parts.append("any order of keys the sort may order freely")
        if self.rounding is not None and (said := self.rounding.describe()):
            parts.append(said)
        return ", ".join(parts) or "bitwise"


def output_tolerance(
    source: Instruction,
    element: ElementType,
    given: ErrorBounds | None = None,
    *,
    reordering: bool = False,
    reduction: tuple[Instruction, object, object] | None = None,
    tf32: bool,
    leaf: int = 0,
    summation_bounds: bool = True,
    parameter_ulps: Sequence[int] = (),
) -> OutputTolerance:
    """The tolerance of an output of type ``element`` produced by ``source``: the one decision.

    ``heron check`` and ``heron run --check`` both ask this. ``given``: the RUN
    line's bounds. ``reordering``: the kernel computing it (or one it depends
    on) may sum in its own order
    (:attr:`heron.compiler.driver.CompiledKernel.sums_in_its_own_order`: a
    reduction emitter's, a GEMM kernel's). ``reduction``: ``(source, computation, args)`` inside
    the fusion computing the output, for the per-element
    :func:`summation_bound` (evaluated only with it; without it only
    :func:`reassociation_bounds` apply). ``tf32``: the checked Target's
    :attr:`heron.target.target.Target.tf32`, whether its f32 dots multiply in TF32
    (:func:`narrowed_product_tolerance`); required, since only the Target knows.
    ``leaf``: which of ``source``'s results the output is, when it has several (a
    variadic reduce a multi-output fusion returns whole).

    An output that an instruction
    :func:`heron.compiler.summation_order.sums_in_its_own_order` names reaches (a
    dot, a convolution, a library call, a regrouped scan) gets the reassociation
    bounds whatever kernel computed it, and a reduce where ``reordering``. The index
    output of an arg-reduction over rows with several NaNs accepts any of their
    indices (:func:`heron.harness.nan_ties.nan_ties`, from ``reduction``'s values), and
    a sort's output any order its comparator leaves open
    (:func:`heron.harness.sort_orders.sort_freedom`).
    ``summation_bounds``: whether ``reduction`` is also evaluated for the per-element
    bound (not on edge inputs, where a float reduction is not compared: its order
    decides overflow and NaN; its NaN ties still are).
    An output with an ulp bound also accepts the approximations' errors as the ops
    after them in ``reduction``'s computation amplify them
    (:func:`heron.harness.error_propagation.error_propagation`); ``parameter_ulps``:
    the bound, by parameter number, of what earlier kernels' approximations left in
    the computation's arguments.
    """
    tolerance = _output_tolerance(
        source,
        element,
        given,
        reordering=reordering,
        reduction=reduction if summation_bounds else None,
        tf32=tf32,
    )
    if reduction is not None and reduction[2] is not None:
        ties = nan_ties(*reduction, leaf=leaf)
        if ties is not None:
            tolerance = attrs.evolve(tolerance, ties=ties)
        orders = sort_freedom(*reduction, leaf=leaf)
        if orders is not None:
            tolerance = attrs.evolve(tolerance, orders=orders)
        if tolerance.ulps or any(parameter_ulps):
            amplified = error_propagation(
                *reduction, op_ulps=own_ulps, leaf=leaf, parameter_ulps=parameter_ulps
            )
            if amplified is not None:
                tolerance = attrs.evolve(tolerance, amplified=amplified)
    return tolerance


def own_ulps(inst: Instruction) -> int:
    """The ulps of ``inst``'s own approximation (:data:`ULP_BOUNDS`), not of those before
    it: what :mod:`heron.harness.error_propagation` moves it by."""
    if _approximation(inst) is None:
        return 0
    operands = [
        Instruction(f"{inst.name}.operand{i}", "parameter", o.shape, parameter_number=i)
        for i, o in enumerate(inst.operands)
    ]
    return ulp_bound(inst.clone(operands), inst.shape.element_type)


def _output_tolerance(
    source: Instruction,
    element: ElementType,
    given: ErrorBounds | None,
    *,
    reordering: bool,
    reduction: tuple[Instruction, object, object] | None,
    tf32: bool,
) -> OutputTolerance:
    given = given or ErrorBounds()
    ulps = ulp_bound(source, element)
    reached = instructions_reaching(source)
    opcodes = [inst.opcode for inst in reached]
    if any(map(sums_in_its_own_order, reached)):
        # Whatever kernel computes it, a dot sums its products in the kernel's order
        # (GEMM tiles, MMA fragments, a library's split-K), never the reference's; a
        # long float cumsum or cumprod is regrouped into blocks (the scan rewriter).
        floor = narrowed_product_tolerance(source, tf32=tf32)
        wide = reassociation_bounds(element, given, floor)
        return OutputTolerance(ulps, wide or given, reordered=wide is not None)
    if reordering and any(map(_combines_in_arrival_order, reached)):
        # A scatter whose updates meet at an element: its kernel adds (or multiplies)
        # them in the order they arrive (atomics on a GPU; a thread looping over the
        # updates strided on the interpreter), not in the reference's update order; a sum
        # that cancels is bounded by the updates that meet at each element.
        wide = reassociation_bounds(element, given)
        sound = summation_bound(*reduction) if reduction is not None else None
        if wide is None or sound is None:
            return OutputTolerance(ulps, wide or given, reordered=wide is not None)
        return OutputTolerance(ulps, attrs.evolve(wide, per_element=sound), reordered=True)
    if not reordering or "reduce" not in opcodes:
        return OutputTolerance(ulps, given)
    wide = reassociation_bounds(element, given)
    if wide is None and _summed_reduce(source) is None:
        return OutputTolerance(ulps, given)
    sound = summation_bound(*reduction) if reduction is not None else None
    return OutputTolerance(ulps, attrs.evolve(wide or given, per_element=sound), reordered=True)


def _combines_in_arrival_order(inst: Instruction) -> bool:
    """A float scatter whose updates that meet are summed or multiplied in the order they
    arrive (:func:`heron.hlo.determinism.order_dependence`): a reassociation, which the
    reassociation bounds cover. An overwrite is not one (which update wins is no
    rounding); integer sums are exact in any order."""
    if inst.opcode != "scatter" or len(inst.operands) != 3:  # variadic: serial, in order
        return False
    root = inst.called("to_apply").root_instruction
    if root.opcode not in ("add", "multiply"):
        return False
    return inst.operands[0].array_shape.element_type.is_floating and (
        order_dependence(inst) is not None
    )


def _check_same_form(kernel: np.ndarray, reference: np.ndarray) -> None:
    if kernel.dtype != reference.dtype or kernel.shape != reference.shape:
        raise ValueError(
            f"the kernel gave {kernel.dtype}{list(kernel.shape)}, the reference"
            f" {reference.dtype}{list(reference.shape)}"
        )


def _distances(a: np.ndarray, b: np.ndarray) -> np.ndarray:
    """Per-element distance of two flat arrays of one real dtype (0 = equal)."""
    if a.dtype == np.bool_ or np.issubdtype(a.dtype, np.integer):
        return np.where(a != b, NAN_DISTANCE, 0).astype(np.int64)
    if a.dtype.itemsize == 1:  # fp8 and f4 (as ml_dtypes): bitwise, any NaN matches any NaN
        nan = np.isnan(a.astype(np.float32)) & np.isnan(b.astype(np.float32))
        different = a.view(np.uint8) != b.view(np.uint8)
        return np.where(different & ~nan, NAN_DISTANCE, 0).astype(np.int64)
    return ulp_distance(a, b)


def _within_normwise(a: np.ndarray, b: np.ndarray, ulps: int) -> np.ndarray:
    """Per element: within ``ulps`` ulps of the largest finite reference magnitude.

    An approximation's error is relative to *its* result, not to the
    output's: ``exp(x) + p`` where the two nearly cancel keeps exp's absolute
    error in a much smaller sum. Measuring the error against the output's
    largest magnitude (a norm-wise bound) accepts that and nothing coarser.
    """
    if not np.issubdtype(b.dtype, np.floating) or b.dtype.itemsize == 1:
        return np.zeros(b.shape, np.bool_)
    wide = b.astype(np.float64)
    finite = np.abs(wide[np.isfinite(wide)])
    if finite.size == 0:
        return np.zeros(b.shape, np.bool_)
    top = b.dtype.type(finite.max())
    with np.errstate(over="ignore"):
        scale = float(np.spacing(top))
    if not math.isfinite(scale):  # the type's largest finite value: the gap below it
        scale = float(top) - float(np.nextafter(top, b.dtype.type(0)))
    with np.errstate(all="ignore"):
        return np.abs(a.astype(np.float64) - wide) <= ulps * scale


def _within_modulus(a: np.ndarray, b: np.ndarray, ulps: int) -> np.ndarray:
    """Per element of two complex arrays: both parts within ``ulps`` ulps (of the
    component type) of the reference's magnitude ``|b|``. A complex op's error is
    bounded relative to its value, not to each part: the real part of ``expm1(1 + i)``,
    0.47 beside an imaginary 2.29, is the difference of 0.93 and 0.46 and keeps their
    rounding errors."""
    component = b.real.dtype
    with np.errstate(all="ignore"):
        magnitude = np.abs(b.astype(np.complex128))
        scale = np.spacing(magnitude.astype(component)).astype(np.float64)
        real_error = np.abs(a.real.astype(np.float64) - b.real.astype(np.float64))
        imag_error = np.abs(a.imag.astype(np.float64) - b.imag.astype(np.float64))
    finite = np.isfinite(magnitude) & np.isfinite(scale)
    return finite & (real_error <= ulps * scale) & (imag_error <= ulps * scale)


def mismatches(
    kernel: np.ndarray,
    reference: np.ndarray,
    ulps: int,
    bounds: ErrorBounds | None = None,
) -> Mismatches:
    """Where ``kernel`` differs from ``reference`` by more than ``ulps`` (and ``bounds``).

    With ``ulps`` 0 the comparison is bitwise: zeros of opposite sign differ
    too (at a distance of 0 ulps). Complex values are compared part by part
    (:func:`_outside`).
    """
    _check_same_form(kernel, reference)
    a = np.ascontiguousarray(kernel).reshape(-1)
    b = np.ascontiguousarray(reference).reshape(-1)
    bad, distance = _outside(a, b, ulps, bounds)
    indices = np.flatnonzero(bad)
    return Mismatches(indices, np.asarray([int(d) for d in distance[indices]], np.int64))


def _outside(
    a: np.ndarray, b: np.ndarray, ulps: int, bounds: ErrorBounds | None
) -> tuple[np.ndarray, np.ndarray]:
    """Per element of two flat arrays: outside the tolerance, and the distance.

    A complex element is two floats of the component type, compared one by
    one, each within its part's bounds (complex addition is componentwise, so
    a sum's parts are two sums; XLA's literal comparison does the same): it
    is outside when either part is, at the larger of the two distances.
    """
    if np.issubdtype(a.dtype, np.complexfloating):
        parts = [
            _outside(
                getattr(a, which).copy(),
                getattr(b, which).copy(),
                ulps,
                None if bounds is None else bounds.part(which),
            )
            for which in ("real", "imag")
        ]
        (bad_real, real), (bad_imag, imag) = parts
        bad = bad_real | bad_imag
        if ulps > 0 and bad.any():
            bad &= ~_within_modulus(a, b, ulps)
        return bad, np.maximum(real.astype(object), imag.astype(object))
    distance = _distances(a, b)
    bad = np.asarray(distance > ulps, np.bool_)
    if ulps == 0:
        bad |= _zero_signs_differ(a, b)
    if ulps > 0 and bad.any():
        bad &= ~_within_normwise(a, b, ulps)
    if bounds is not None and bad.any():
        bad &= ~bounds.accepts(a, b)
    return bad, distance


def describe_value(values: np.ndarray, index: int) -> str:
    """Element ``index`` (flat) of ``values`` with its bits, e.g. ``-0.0 (0x80000000)``."""
    value = values.reshape(-1)[index]
    if values.dtype.itemsize <= 8 and not np.issubdtype(values.dtype, np.complexfloating):
        bits = np.asarray(value).view(f"uint{values.dtype.itemsize * 8}")
        return f"{_plain(value)} ({int(bits):#x})"
    return _plain(value)


def _plain(value) -> str:
    """A scalar without numpy's ``np.float32(...)`` wrapping."""
    item = value.item() if hasattr(value, "item") else value
    if isinstance(item, float | int | bool | complex):
        return repr(item)
    return str(value)
