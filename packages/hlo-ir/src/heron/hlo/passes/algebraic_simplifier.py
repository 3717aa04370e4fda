"""The algebraic simplifier: identities, no-op data movement, folded chains, constants.

Every rule here is exact: the rewritten module computes the same bits as the
original on every input (the property tests check this with the reference
evaluator). That excludes some of XLA's rules on purpose: ``x + 0.0`` is not
``x`` when ``x`` is ``-0.0`` (``x + -0.0`` is), and ``x * 0`` is not ``0`` for
NaN and infinities.

The rules, by opcode (each a function registered with :func:`_rule`):

- identities: ``x + -0.0``/``x + 0`` (integers), ``x - 0``, ``x * 1``,
  ``x / 1``, ``x & true``, ``x | false``, ``max(x, x)``, ``min(x, x)``,
  ``max(x, -inf)``/``min(x, +inf)`` (the type's lowest/highest for
  integers), ``x & x``, ``x | x``, ``-(-x)``, ``not(not(x))``,
  ``select(p, a, a)`` and ``select`` on a constant predicate;
- a ``reduce`` over size-1 dimensions only (as many elements out as in,
  XLA's condition) whose reducer is one binary elementwise op of its two
  parameters becomes that op applied elementwise to the broadcast init and
  the input reshaped: ``f(init, x)``, what the reduce computes for its one
  element. Where the init is an exact identity of the op the identity rules
  leave the bare ``reshape(x)``, which is XLA's rewrite (``HandleReduce``:
  ``ReplaceReduceWithReshape``). XLA drops the init in every case, trusting
  it to be an identity; heron keeps it where dropping it would change bits
  (``+0.0`` for an add, where ``-0.0 + 0.0`` is ``+0.0``; a non-identity
  init). A variadic reduce (XLA: a tuple of reshapes) and other reducers
  are left alone;
- data movement that moves nothing (same shape and layout in and out):
  ``reshape``, ``bitcast``, ``copy``, ``convert`` to the same type,
  ``transpose`` by the identity, ``broadcast`` onto the same dimensions, a
  full ``slice``, ``reverse`` of no dimension or of size-1 dimensions, an
  all-zero ``pad``, a one-operand ``concatenate``, a ``dynamic-update-slice``
  whose update is the whole operand;
- chains folded into one instruction: ``reshape(reshape)``, ``bitcast(bitcast)``,
  ``broadcast(broadcast)``, ``transpose(transpose)``, ``slice(slice)``, and a
  ``dynamic-slice`` with constant start indices becomes a ``slice`` (with the
  clamping ``dynamic-slice`` applies);
- ``transpose(dot(a, b))`` swapping the dot's two free dimensions becomes
  ``dot(b^T, a^T)`` (XLA's ``transpose(dot(a,b)) -> dot(b,a)``, for the
  canonical dots heron has here): exact up to the order of the dot's own
  sum, which no kernel or library fixes;
- canonical operand order: ``compare(constant, x)`` becomes
  ``compare(x, constant)`` with the direction mirrored;
- constant folding: an instruction whose operands are all constants is
  evaluated (by the reference evaluator, so the bits are the evaluator's) when
  its result has at most :data:`FOLD_LIMIT` elements. Like XLA, broadcasts and
  iotas are not folded: they would turn a scalar into a large constant.
"""

from __future__ import annotations

from collections.abc import Callable

import ml_dtypes
import numpy as np

from heron.hlo.attributes import RawAttribute, SliceRange
from heron.hlo.errors import HloError
from heron.hlo.evaluator import evaluate_computation
from heron.hlo.ir import Computation, Instruction, Module
from heron.hlo.opcodes import Category, opcode_info
from heron.hlo.passes.dot_decomposer import is_canonical_dot
from heron.hlo.passes.registry import hlo_pass
from heron.hlo.passes.rewrite import (
    Inserter,
    has_side_effect,
    module_names,
    non_fusion_computations,
    remove_instructions,
)
from heron.hlo.shapes import ArrayShape, Layout, Shape

__all__ = ["FOLD_LIMIT", "simplify_algebra"]

#: The most elements a folded constant may have: folding trades work at run time
#: for bytes in the module, and a big constant costs more to move than to compute.
FOLD_LIMIT = 1 << 16

#: Never folded even with constant operands: they would grow a scalar into an
#: array (broadcast, iota), they have effects or call computations whose folding
#: is not this pass's business.
_NOT_FOLDED = frozenset(
    {
        "parameter",
        "constant",
        "broadcast",
        "iota",
        "tuple",
        "get-tuple-element",
        "call",
        "fusion",
        "while",
        "conditional",
        "custom-call",
        "rng",
        "rng-bit-generator",
        "rng-get-and-update-state",
        "after-all",
        "partition-id",
        "replica-id",
        "optimization-barrier",
        "opt-barrier",
    }
)


Rule = Callable[[Instruction, Inserter], Instruction | None]
_RULES: dict[str, list[Rule]] = {}


def _rule(*opcodes: str) -> Callable[[Rule], Rule]:
    """Register a rule for ``opcodes``; the same rule twice for one opcode is refused."""

    def register(rule: Rule) -> Rule:
        for opcode in opcodes:
            rules = _RULES.setdefault(opcode, [])
            if rule in rules:
                raise ValueError(f"rule {rule.__name__} is already registered for {opcode}")
            rules.append(rule)
        return rule

    return register


@hlo_pass("algebraic-simplifier", "exact identities, no-op data movement, chains, constants")
def simplify_algebra(module: Module) -> bool:
    """Apply every rule until none applies, in each computation outside fusion bodies."""
    names = module_names(module)
    changed = False
    for computation in non_fusion_computations(module):
        rewriter = Inserter(computation, names)
        replaced: list[Instruction] = []
        for inst in computation.post_order():
            replacement = _simplify(inst, rewriter)
            if replacement is not None and rewriter.replace(inst, replacement):
                replaced.append(inst)
                changed = True
        # What was replaced is dead unless it has an effect (dce removes the rest).
        remove_instructions(computation, [i for i in replaced if not has_side_effect(i)])
    return changed


def _simplify(inst: Instruction, rewriter: Inserter) -> Instruction | None:
    """The instruction ``inst`` becomes after its rules applied until none does."""
    current = inst
    for _ in range(16):  # chains shorten every step; the bound only guards a bad rule
        step = _apply_rules(current, rewriter)
        if step is None or step is current:
            break
        current = step
    return None if current is inst else current


def _apply_rules(inst: Instruction, rewriter: Inserter) -> Instruction | None:
    if has_side_effect(inst) or "control-predecessors" in inst.attributes:
        return None
    for rule in _RULES.get(inst.opcode, ()):
        result = rule(inst, rewriter)
        if result is not None:
            return result
    return _fold_constant(inst, rewriter)


# -- helpers ---------------------------------------------------------------------------


def _row_major_or_free(shape: Shape) -> bool:
    """Whether ``shape`` has no layout yet or lays its elements out row-major."""
    return isinstance(shape, ArrayShape) and (
        shape.layout is None or list(shape.minor_to_major) == list(reversed(range(len(shape.dims))))
    )


def _same_layout_shape(a: Shape, b: Shape) -> bool:
    """Equal element type, dimensions and physical order (no layout means row-major)."""
    if not isinstance(a, ArrayShape) or not isinstance(b, ArrayShape):
        return a == b
    return (
        a.element_type is b.element_type
        and a.dims == b.dims
        and a.minor_to_major == b.minor_to_major
        and a.dynamic == b.dynamic
        and (a.layout.suffix if a.layout else "") == (b.layout.suffix if b.layout else "")
    )


def _passes_through(inst: Instruction, operand: Instruction) -> Instruction | None:
    """``operand`` when it can stand for ``inst`` (same shape and layout), else None."""
    return operand if _same_layout_shape(inst.shape, operand.shape) else None


def _splat(inst: Instruction) -> object | None:
    """The one value every element of ``inst`` has, when it is a constant or its broadcast."""
    while inst.opcode in ("broadcast", "reshape") and inst.operands:
        inst = inst.operands[0]
    if inst.opcode != "constant" or not isinstance(inst.literal, np.ndarray | np.generic):
        return None
    values = np.asarray(inst.literal)
    if values.size == 0:
        return None
    first = values.reshape(-1)[0]
    if values.dtype.kind not in "biu":  # floats (ml_dtypes' are kind "V"): by bits, -0.0 too
        if not (values.view(_uint_of(values.dtype)) == first.view(_uint_of(values.dtype))).all():
            return None
    elif not (values == first).all():
        return None
    return first


def _constant_like(inst: Instruction) -> bool:
    """A constant, or a broadcast or reshape of one."""
    while inst.opcode in ("broadcast", "reshape") and inst.operands:
        inst = inst.operands[0]
    return inst.opcode == "constant"


def _uint_of(dtype: np.dtype) -> np.dtype:
    return np.dtype(f"u{dtype.itemsize}") if dtype.itemsize in (1, 2, 4, 8) else np.dtype("V")


def _is_value(inst: Instruction, wanted: float, *, negative_zero: bool = False) -> bool:
    value = _splat(inst)
    if value is None:
        return False
    kind = np.asarray(value).dtype.kind
    if kind == "c":
        return False
    if kind not in "biu" and wanted == 0:  # floats, ml_dtypes' (kind "V") too: the sign counts
        as_double = np.asarray(value).astype(np.float64)
        return bool(as_double == 0) and bool(np.signbit(as_double)) == negative_zero
    return bool(value == wanted)


def _elementwise_operand(inst: Instruction, index: int) -> Instruction | None:
    return _passes_through(inst, inst.operands[index])


# -- identities ------------------------------------------------------------------------


def _floating(inst: Instruction) -> bool:
    return isinstance(inst.shape, ArrayShape) and inst.shape.element_type.is_floating


def _integral(inst: Instruction) -> bool:
    shape = inst.shape
    return isinstance(shape, ArrayShape) and (
        shape.element_type.is_integral or shape.element_type.is_pred
    )


@_rule("add")
def _add_zero(inst: Instruction, rewriter: Inserter) -> Instruction | None:
    for keep, other in ((0, 1), (1, 0)):
        zero = inst.operands[other]
        if _floating(inst) and _is_value(zero, 0, negative_zero=True):
            return _elementwise_operand(inst, keep)
        if _integral(inst) and not inst.shape.element_type.is_pred and _is_value(zero, 0):
            return _elementwise_operand(inst, keep)
    return None


@_rule("subtract")
def _subtract_zero(inst: Instruction, rewriter: Inserter) -> Instruction | None:
    zero = inst.operands[1]
    if (_floating(inst) and _is_value(zero, 0)) or (_integral(inst) and _is_value(zero, 0)):
        return _elementwise_operand(inst, 0)
    return None


@_rule("multiply")
def _multiply_one(inst: Instruction, rewriter: Inserter) -> Instruction | None:
    if not (_floating(inst) or _integral(inst)) or inst.shape.element_type.is_pred:
        return None
    for keep, other in ((0, 1), (1, 0)):
        if _is_value(inst.operands[other], 1):
            return _elementwise_operand(inst, keep)
    return None


@_rule("divide")
def _divide_one(inst: Instruction, rewriter: Inserter) -> Instruction | None:
    if (_floating(inst) or _integral(inst)) and _is_value(inst.operands[1], 1):
        return _elementwise_operand(inst, 0)
    return None


@_rule("and", "or", "maximum", "minimum")
def _same_operands(inst: Instruction, rewriter: Inserter) -> Instruction | None:
    if inst.operands[0] is inst.operands[1]:
        return _elementwise_operand(inst, 0)
    return None


@_rule("and", "or")
def _logical_identity(inst: Instruction, rewriter: Inserter) -> Instruction | None:
    if not _integral(inst):
        return None
    dtype = inst.shape.element_type.numpy_dtype
    all_ones = True if inst.shape.element_type.is_pred else np.array(-1).astype(dtype)
    neutral = all_ones if inst.opcode == "and" else 0
    for keep, other in ((0, 1), (1, 0)):
        value = _splat(inst.operands[other])
        if value is not None and bool(np.asarray(value) == np.asarray(neutral).astype(dtype)):
            return _elementwise_operand(inst, keep)
    return None


@_rule("maximum", "minimum")
def _extreme_identity(inst: Instruction, rewriter: Inserter) -> Instruction | None:
    """``max(x, lowest)`` and ``min(x, highest)`` are ``x``: NaN still wins, -0.0 stays."""
    shape = inst.shape
    if not isinstance(shape, ArrayShape) or not (_floating(inst) or _integral(inst)):
        return None
    dtype = shape.element_type.numpy_dtype
    if shape.element_type.is_pred:
        lowest, highest = False, True
    elif shape.element_type.is_floating:
        lowest, highest = -np.inf, np.inf
    else:
        info = ml_dtypes.iinfo(dtype)  # numpy's knows no s4/u4/s2
        lowest, highest = info.min, info.max
    neutral = lowest if inst.opcode == "maximum" else highest
    for keep, other in ((0, 1), (1, 0)):
        value = _splat(inst.operands[other])
        if value is not None and bool(np.asarray(value) == neutral):
            return _elementwise_operand(inst, keep)
    return None


@_rule("negate", "not")
def _twice(inst: Instruction, rewriter: Inserter) -> Instruction | None:
    inner = inst.operands[0]
    if inner.opcode == inst.opcode:
        return _passes_through(inst, inner.operands[0])
    return None


@_rule("select")
def _select(inst: Instruction, rewriter: Inserter) -> Instruction | None:
    predicate, on_true, on_false = inst.operands
    if on_true is on_false:
        return _passes_through(inst, on_true)
    value = _splat(predicate)
    if value is not None:
        return _passes_through(inst, on_true if bool(value) else on_false)
    return None


_MIRRORED = {"EQ": "EQ", "NE": "NE", "LT": "GT", "GT": "LT", "LE": "GE", "GE": "LE"}


@_rule("compare")
def _constant_to_the_right(inst: Instruction, rewriter: Inserter) -> Instruction | None:
    lhs, rhs = inst.operands
    if not _constant_like(lhs) or _constant_like(rhs):
        return None
    direction = str(inst.attr("direction"))
    if direction not in _MIRRORED:
        return None
    attributes = dict(inst.attributes)
    attributes["direction"] = _MIRRORED[direction]
    return rewriter.add("compare", inst.shape, [rhs, lhs], attributes, like=inst)


# -- data movement that moves nothing, and chains ---------------------------------------


@_rule("reshape", "bitcast", "copy")
def _no_op_move(inst: Instruction, rewriter: Inserter) -> Instruction | None:
    return _passes_through(inst, inst.operands[0])


@_rule("bitcast")
def _bitcast_chain(inst: Instruction, rewriter: Inserter) -> Instruction | None:
    operand = inst.operands[0]
    if operand.opcode != "bitcast":
        return None
    inner = operand.operands[0]
    if _same_layout_shape(inst.shape, inner.shape):
        return inner
    return rewriter.add("bitcast", inst.shape, [inner], like=inst)


@_rule("convert")
def _same_type_convert(inst: Instruction, rewriter: Inserter) -> Instruction | None:
    return _passes_through(inst, inst.operands[0])


@_rule("transpose")
def _transpose(inst: Instruction, rewriter: Inserter) -> Instruction | None:
    permutation = tuple(inst.attr("dimensions"))
    operand = inst.operands[0]
    if permutation == tuple(range(len(permutation))):
        return _passes_through(inst, operand)
    if operand.opcode == "transpose":
        inner = tuple(operand.attr("dimensions"))
        composed = tuple(inner[p] for p in permutation)
        return rewriter.add(
            "transpose", inst.shape, [operand.operands[0]], {"dimensions": composed}, like=inst
        )
    if operand.opcode == "dot" and len(rewriter.uses.users(operand)) == 1:
        return _transposed_dot(inst, operand, rewriter)
    return None


def _transposed_dot(
    transpose: Instruction, dot: Instruction, rewriter: Inserter
) -> Instruction | None:
    """``transpose(dot(a, b))`` as ``dot(b^T, a^T)`` where the transpose swaps the dot's
    two free dimensions: XLA's algebraic simplifier turns ``transpose(dot(a, b))`` into
    ``dot(b, a)`` (``HandleTranspose``; checked against XLA:GPU 0.12's decisions: the
    batch dimensions lead both operands in the same order, one free dimension a side,
    no other user of the dot). Here the dots are canonical already
    (``dot-decomposer`` runs first), so the swapped operands are transposed back into
    canonical form: those transposes fold into the ones canonicalisation made, and a
    GEMM library reads any that is left as a transposed operand. Exact up to the order
    of the dot's own sum, which no rule fixes (every kernel and library sums a dot in
    its own order). jax writes such transposes for ``vmap`` over a layer computing
    ``W @ x`` (equinox's Linear): the swapped dot writes the result itself, with no
    transpose kernel after a library GEMM."""
    if not is_canonical_dot(dot) or not isinstance(dot.shape, ArrayShape):
        return None
    lhs, rhs = dot.operands
    rank = len(dot.shape.dims)
    batch = tuple(range(rank - 2))
    if len(lhs.shape.dims) != rank or len(rhs.shape.dims) != rank:
        return None  # a side without a free dimension, or nothing contracted
    swap = (*batch, rank - 1, rank - 2)
    if tuple(transpose.attr("dimensions")) != swap:
        return None
    if not (_row_major_or_free(dot.shape) and _row_major_or_free(transpose.shape)):
        # heron keeps the layouts jax printed (XLA assigns its own after this rule): a
        # transpose into another layout moves nothing already, and the swapped dot
        # would write its result column-major, which no GEMM does.
        return None

    def transposed(operand: Instruction) -> Instruction:
        shape = operand.array_shape
        dims = tuple(shape.dims[d] for d in swap)
        layout = Layout.default_for_rank(rank) if shape.layout is not None else None
        moved = ArrayShape(shape.element_type, dims, layout)
        return rewriter.add(
            "transpose", moved, [operand], {"dimensions": swap}, like=dot, suffix="swapped"
        )

    attributes = dict(dot.attributes)
    precision = attributes.get("operand_precision")
    if precision is not None:
        text = getattr(precision, "text", str(precision))
        names = [part.strip() for part in text.strip("{} ").split(",")]
        attributes["operand_precision"] = RawAttribute("{" + ",".join(reversed(names)) + "}")
    operands = [transposed(rhs), transposed(lhs)]
    return rewriter.add("dot", transpose.shape, operands, attributes, like=dot)


@_rule("reshape")
def _reshape_chain(inst: Instruction, rewriter: Inserter) -> Instruction | None:
    operand = inst.operands[0]
    if operand.opcode == "reshape":
        return rewriter.add("reshape", inst.shape, [operand.operands[0]], like=inst)
    return None


@_rule("broadcast")
def _broadcast(inst: Instruction, rewriter: Inserter) -> Instruction | None:
    dimensions = tuple(inst.attr("dimensions"))
    operand = inst.operands[0]
    if dimensions == tuple(range(len(inst.shape.dims))):
        return _passes_through(inst, operand)
    if operand.opcode == "broadcast":
        inner = tuple(operand.attr("dimensions"))
        composed = tuple(dimensions[d] for d in inner)
        return rewriter.add(
            "broadcast", inst.shape, [operand.operands[0]], {"dimensions": composed}, like=inst
        )
    return None


@_rule("slice")
def _slice(inst: Instruction, rewriter: Inserter) -> Instruction | None:
    ranges: tuple[SliceRange, ...] = tuple(inst.attr("slice"))
    operand = inst.operands[0]
    full = all(
        r.start == 0 and r.limit == size and r.stride == 1
        for r, size in zip(ranges, operand.shape.dims)
    )
    if full:
        return _passes_through(inst, operand)
    if operand.opcode == "slice":
        inner: tuple[SliceRange, ...] = tuple(operand.attr("slice"))
        composed = []
        for outer_range, inner_range in zip(ranges, inner):
            start = inner_range.start + outer_range.start * inner_range.stride
            stride = inner_range.stride * outer_range.stride
            count = len(range(outer_range.start, outer_range.limit, outer_range.stride))
            limit = start + (count - 1) * stride + 1 if count else start
            composed.append(SliceRange(start, limit, stride))
        attributes = dict(inst.attributes)
        attributes["slice"] = tuple(composed)
        return rewriter.add("slice", inst.shape, [operand.operands[0]], attributes, like=inst)
    return None


@_rule("reverse")
def _reverse(inst: Instruction, rewriter: Inserter) -> Instruction | None:
    operand = inst.operands[0]
    if all(operand.shape.dims[d] <= 1 for d in inst.attr("dimensions")):
        return _passes_through(inst, operand)
    return None


@_rule("pad")
def _pad(inst: Instruction, rewriter: Inserter) -> Instruction | None:
    config = inst.attr("padding")
    if all(d.low == 0 and d.high == 0 and d.interior == 0 for d in config.dims):
        return _passes_through(inst, inst.operands[0])
    return None


@_rule("concatenate")
def _concatenate(inst: Instruction, rewriter: Inserter) -> Instruction | None:
    if len(inst.operands) == 1:
        return _passes_through(inst, inst.operands[0])
    return None


@_rule("dynamic-update-slice")
def _whole_update(inst: Instruction, rewriter: Inserter) -> Instruction | None:
    operand, update = inst.operands[0], inst.operands[1]
    if update.shape.same_type_and_dims(operand.shape):
        return _passes_through(inst, update)
    return None


@_rule("dynamic-slice")
def _constant_start(inst: Instruction, rewriter: Inserter) -> Instruction | None:
    operand, starts = inst.operands[0], inst.operands[1:]
    values = [_splat(start) for start in starts]
    if any(v is None for v in values) or any(s.shape.dims for s in starts):
        return None
    sizes = tuple(inst.attr("dynamic_slice_sizes"))
    ranges = []
    for value, size, bound in zip(values, sizes, operand.shape.dims):
        start = min(max(int(value), 0), bound - size)  # dynamic-slice clamps its starts
        ranges.append(SliceRange(start, start + size, 1))
    return rewriter.add("slice", inst.shape, [operand], {"slice": tuple(ranges)}, like=inst)


# -- reductions that reduce nothing ----------------------------------------------------

#: Binary elementwise ops a reducer's root may be for :func:`_degenerate_reduce` (those
#: whose result has their operands' type and no attribute that changes it).
_NOT_REDUCERS = frozenset({"compare", "complex", "stochastic-convert"})


@_rule("reduce")
def _degenerate_reduce(inst: Instruction, rewriter: Inserter) -> Instruction | None:
    """``reduce(x, init)`` over size-1 dimensions is ``f(init, reshape(x))`` elementwise."""
    if len(inst.operands) != 2 or not isinstance(inst.shape, ArrayShape):
        return None
    x, init = inst.operands
    if any(x.shape.dims[d] != 1 for d in inst.attr("dimensions")):
        return None
    reducer = inst.called("to_apply")
    root = reducer.root_instruction
    info = opcode_info(root.opcode)
    if (
        info is None
        or info.category is not Category.ELEMENTWISE_BINARY
        or root.opcode in _NOT_REDUCERS
        or len(reducer.parameters) != 2
        or any(op.opcode != "parameter" for op in root.operands)
        or root.called_computations()
        or not isinstance(root.shape, ArrayShape)
        or root.shape.element_type is not inst.shape.element_type
    ):
        return None
    # parameter 0 is the accumulator (the init for the one element), 1 the element
    element = rewriter.add("reshape", inst.shape, [x], like=inst, suffix="element")
    accumulator = rewriter.add(
        "broadcast", inst.shape, [init], {"dimensions": ()}, like=inst, suffix="init"
    )
    by_parameter = {0: accumulator, 1: element}
    operands = [by_parameter[op.parameter_number] for op in root.operands]
    return rewriter.add(root.opcode, inst.shape, operands, dict(root.attributes), like=inst)


# -- constant folding ------------------------------------------------------------------


def _fold_constant(inst: Instruction, rewriter: Inserter) -> Instruction | None:
    if inst.opcode in _NOT_FOLDED or not inst.operands:
        return None
    if not isinstance(inst.shape, ArrayShape) or inst.shape.element_type.is_token:
        return None
    if inst.shape.num_elements > FOLD_LIMIT:
        return None
    if not all(op.opcode == "constant" for op in inst.operands):
        return None
    if any(has_side_effect(i) for c in inst.called_computations() for i in c.instructions):
        return None
    scratch = Computation("constant_folding")
    clones = [
        scratch.add(
            Instruction(op.name, "constant", op.shape, literal=op.literal, location=op.location)
        )
        for op in inst.operands
    ]
    scratch.root = scratch.add(
        Instruction(
            inst.name,
            inst.opcode,
            inst.shape,
            operands=clones,
            attributes=dict(inst.attributes),
            location=inst.location,
        )
    )
    try:
        value = evaluate_computation(scratch, [])
    except HloError:
        return None  # the evaluator refuses it: leave it for run time to report
    return rewriter.add("constant", inst.shape, [], like=inst, literal=np.asarray(value).copy())
