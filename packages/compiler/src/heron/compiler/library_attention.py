"""Attention a fused-attention library computes: the pattern, and the call it becomes.

``softmax(scale * q . k + bias, masked) . v`` is the most expensive piece of
a transformer written as XLA sees it: two batched GEMMs around a row softmax,
the scores ``[B, H, Sq, Sk]`` written to memory and read back three times.
cuDNN's flash attention computes it in one kernel that never stores the
scores. XLA:GPU calls it only where the program asks (jax's
``dot_product_attention(implementation="cudnn")``); heron finds the pattern in
any program (``jax.nn.dot_product_attention``, attention written by hand with
its scores in f32) and makes it one library call by default, since the fused
call is then the same computation, summed in another order.

The ``library-attention-rewriter`` pass runs after simplification (calls
inlined, every dot canonical: ``[batch..., M, K] x [batch..., K, N]``) and
before layout assignment. It starts from each dot and looks back for::

    scores = dot(q [b..., Sq, D], k [b..., D, Sk])          (canonical, f16/bf16 operands)
    logits = select(causal, bias + scale * scores, -big)     (each part optional, in that
                                                              order; converts anywhere)
    p      = exp(logits - max(logits)) / sum(exp(...))      (over the keys' dimension)
    out    = dot(p, v) or dot(v, p)                         (canonical, contracting the keys)

looking through what only moves or widens values (converts, transposes,
reshapes that add or drop size-1 dimensions). Each dimension of the scores
carries a role (a batch dimension, the queries, the keys) along the way, so
that the softmax must run over the keys and the second dot must contract
them and keep the batch dimensions in order. The scores' dot may read ``k``
first (``k . q``, as ``jnp.einsum`` orders some contractions); the softmax's
maximum may be taken before a transpose of the scores (a simplifier moves
transposes across reductions).

Grouped-query attention (fewer key/value heads than query heads: jax's
``[B, T, K, G, H]`` head groups) reaches the scores' dot with its rows a
query position and a head of a group merged; a reshape splits them again
(:data:`ROW_FACTORS`) and the second dot merges them, in either order. The
causal mask says which factor is the query position (without a mask either
is: rows are independent). The call then has ``K x G`` query heads over
``K`` key/value heads, cuDNN's GQA.

A causal mask (a compile-time constant equal to ``i >= j``, which is how jax
writes ``is_causal``) is the call's causal flag; any other mask (a padding
mask) joins the bias, 0 where it keeps a score and its fill elsewhere, where
the fill is low enough that adding a score to it gives it back
(:data:`_MASK_BIAS_FILL_AT_MOST`). The scale must be a constant; the bias
any tensor of the operands' type (or widened from it) over batch, queries
and keys. The scores and the softmax must be computed in f32, as the fused call computes them (what
``jax.nn.dot_product_attention`` writes): a program that rounds its scores to
bf16 asks for another result, and keeps it. Nothing in the
pattern but its output may be used elsewhere: a training step that keeps the
probabilities for its backward pass is left as it is.

:func:`match_attention` says, for a dot that ends such a pattern, either what
the call is (:class:`AttentionMatch`) or why not (a string naming what
stopped it); :func:`attention_verdicts` reports every candidate of a module.
The rewrite makes the custom call ``__heron$attention``
(:mod:`heron.hlo.custom_calls.attention`) over ``[B, H, S, D]`` operands (the
batch dimensions merged into two), and :func:`library_attention_thunk` its
library call (the contract :mod:`heron.runtime.core.attention`), the host
computation beside it for a device without the library. The operands are
read, and the result written, where the program stores them, through the
transposes and reshapes between (:mod:`heron.compiler.view_factors` says which
chains are a permutation): jax's ``[B, S, H, D]`` tensors cost no copy.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Sequence

import attrs
import numpy as np

from heron.compiler import view_factors
from heron.compiler.library_thunks import described_or_refused, host_backed_call
from heron.hlo.attributes import QuotedString
from heron.hlo.custom_calls.attention import TARGET, AttentionConfig, backend_config
from heron.hlo.custom_calls.call import custom_call_of
from heron.hlo.custom_calls.library import library_call_target
from heron.hlo.element_types import ElementType
from heron.hlo.errors import HloError, UnsupportedError
from heron.hlo.ir import Computation, ComputationRef, Instruction, Module
from heron.hlo.passes.dot_decomposer import dimension_lists, is_canonical_dot
from heron.hlo.passes.manager import HloPass
from heron.hlo.passes.rewrite import (
    Inserter,
    Uses,
    module_names,
    non_fusion_computations,
    remove_instructions,
)
from heron.hlo.shapes import ArrayShape, TupleShape
from heron.runtime.core.attention import (
    ELEMENT_TYPES,
    HEAD_DIM_MULTIPLE,
    MAX_HEAD_DIM,
    AttentionCall,
)
from heron.runtime.core.library_contract import dense_strides
from heron.runtime.core.thunks import BufferSlice, CustomCallThunk, LibraryCallThunk
from heron.target import Target

__all__ = [
    "AttentionMatch",
    "BiasParts",
    "MERGED_ROWS",
    "SoftmaxFrame",
    "TensorRoles",
    "attention_call",
    "attention_verdicts",
    "batch_labels",
    "is_library_attention",
    "library_attention_rewriter",
    "library_attention_thunk",
    "match_attention",
    "rewrite_attention",
    "softmax_frame",
]

#: The library name an attention call's thunk carries (the device picks the implementation:
#: cuDNN on CUDA, numpy on an interpreter built to offer it).
LIBRARY = "dnn"
#: What only moves, reshapes or converts values (looked through between the pattern's parts).
_VIEWS = frozenset({"convert", "copy", "reshape", "transpose"})
#: What the softmax's parts are looked through (no transposes: they share one frame).
_SOFTMAX_VIEWS = frozenset({"convert", "copy", "reshape"})
#: A mask's fill: -inf, or a value so low that exp(fill - max) is 0 in f32 unless every
#: unmasked score of a row is below fill + 104 (jax fills with -0.7 x the type's max;
#: hand-written attention often with -1e9). The softmax's maximum starts from one too.
_FILL_AT_MOST = -1e9
#: The largest causal mask evaluated at compile time (elements of its [Sq, Sk] source).
_MASK_ELEMENTS_LIMIT = 1 << 24

#: The roles a dimension of the scores plays: batch dimensions ``b0``, ``b1``..., ``q``, ``k``.
Labels = tuple[str | None, ...]


@attrs.frozen
class AttentionMatch:
    """One attention pattern, ending at ``output_dot`` (see the module docstring)."""

    scores_dot: Instruction  #: ``q [b..., Sq, D] . k [b..., D, Sk]``
    output_dot: Instruction  #: the probabilities' product with v
    probabilities_side: int  #: which operand of ``output_dot`` the probabilities are (0, 1)
    scale: float
    causal: bool
    #: the bias's source (of the operands' type) and the roles of its non-unit dimensions
    bias: Instruction | None
    bias_labels: tuple[str, ...]
    element_type: str
    #: Which operand of ``scores_dot`` the queries are (0: ``q . k``, 1: ``k . q``).
    queries_side: int = 0
    #: A mask other than the causal one (a padding mask), its roles like the bias's, the
    #: fill where it does not keep a score, and whether it says where the fill goes:
    #: the call adds it as a bias (0 or the fill).
    mask: Instruction | None = None
    mask_labels: tuple[str, ...] = ()
    mask_fill: float = 0.0
    mask_inverted: bool = False
    #: Grouped-query attention: the sizes of the two factors the scores' rows split into
    #: (major first, :data:`ROW_FACTORS`); empty where the rows are the queries alone.
    row_factors: tuple[int, ...] = ()
    #: Which of ``row_factors`` is the query position (the other: a head of a group).
    query_factor: int = 0
    #: The factors in the order the second dot's rows merge them (major first).
    output_rows: tuple[int, ...] = (0, 1)

    @property
    def groups(self) -> int:
        """Query heads per key/value head (1 without grouped queries)."""
        return self.row_factors[1 - self.query_factor] if self.row_factors else 1

    @property
    def bias_parts(self) -> BiasParts:
        return BiasParts(
            bias=self.bias,
            bias_labels=self.bias_labels,
            element_type=self.element_type,
            grouped=bool(self.row_factors),
            groups=self.groups,
            mask=self.mask,
            mask_labels=self.mask_labels,
            mask_fill=self.mask_fill,
            mask_inverted=self.mask_inverted,
        )

    @property
    def queries(self) -> int:
        """The query positions a head attends from."""
        if self.row_factors:
            return self.row_factors[self.query_factor]
        q = self.scores_dot.operands[self.queries_side].array_shape.dims
        return q[-2] if self.queries_side == 0 else q[-1]


@attrs.frozen
class BiasParts:
    """What a call's bias operand is made of (:func:`_bias`): the program's bias (its
    source, of the operands' type, and the roles of its non-unit dimensions), a mask
    other than the causal one that joins it, and whether the rows are grouped-query
    heads (``groups`` of them per key/value head)."""

    bias: Instruction | None
    bias_labels: tuple[str, ...]
    element_type: str
    grouped: bool = False
    groups: int = 1
    mask: Instruction | None = None
    mask_labels: tuple[str, ...] = ()
    mask_fill: float = 0.0
    mask_inverted: bool = False

    @property
    def present(self) -> bool:
        return self.bias is not None or self.mask is not None


class _NoMatch(Exception):
    """Why a candidate is not taken (its message is the verdict)."""


# -- dimension roles ----------------------------------------------------------------------------


def _squeezed(dims: Sequence[int]) -> tuple[int, ...]:
    return tuple(d for d in dims if d != 1)


def check_head_sizes(head: int, value_head: int) -> None:
    """Refuse (``_NoMatch``) an attention whose head or value head the fused calls do not
    take, forward and backward alike (the contract's limits)."""
    for name, size in (("head", head), ("value head", value_head)):
        if size > MAX_HEAD_DIM or size % HEAD_DIM_MULTIPLE:
            raise _NoMatch(
                f"{name} dimension {size} (the fused call takes at most {MAX_HEAD_DIM}, a"
                f" multiple of {HEAD_DIM_MULTIPLE})"
            )


def role_size(tensor: TensorRoles, role: str) -> int:
    """The size of ``tensor``'s dimension of ``role`` (1 where no non-unit one has it)."""
    dims = [d for d in tensor.source.array_shape.dims if d != 1]
    return next((d for d, r in zip(dims, tensor.roles, strict=True) if r == role), 1)


def _full(labels: tuple[str, ...], dims: Sequence[int]) -> Labels:
    """``labels`` of the non-unit dimensions spread over ``dims`` (None for size-1 ones)."""
    it = iter(labels)
    return tuple(None if d == 1 else next(it) for d in dims)


def _present(labels: Labels) -> tuple[str, ...]:
    return tuple(label for label in labels if label is not None)


def _of_non_unit(labels: Sequence[str], dims: Sequence[int]) -> tuple[str, ...]:
    """The roles of ``dims``'s non-unit dimensions, ``labels`` naming every dimension."""
    return tuple(label for label, size in zip(labels, dims, strict=True) if size != 1)


def _view_labels(inst: Instruction, labels: tuple[str, ...]) -> tuple[str, ...]:
    """The roles of ``inst``'s non-unit dimensions, its operand's being ``labels``."""
    source = inst.operands[0].array_shape.dims
    if inst.opcode in ("convert", "copy"):
        return labels
    if inst.opcode == "reshape":
        regrouped = _regrouped_rows(_squeezed(source), _squeezed(inst.array_shape.dims), labels)
        if regrouped is None:
            raise _NoMatch(
                f"reshape '{inst.name}' regroups the scores' dimensions"
                f" ({list(source)} -> {list(inst.array_shape.dims)})"
            )
        return regrouped
    if inst.opcode == "transpose":
        full = _full(labels, source)
        return _present(tuple(full[d] for d in inst.attributes["dimensions"]))
    raise _NoMatch(f"{inst.opcode} '{inst.name}' is not a view")  # pragma: no cover - callers


#: The two factors a reshape may split the queries' dimension into (grouped-query
#: attention: jax's rows of [T, G], a query position and a head of a key/value head's
#: group), major first as the scores' dot has them; which is the query position the
#: causal mask says (without one, the major).
ROW_FACTORS = ("r0", "r1")
#: The role of a dimension merging both row factors, the major first.
MERGED_ROWS = ("r0+r1", "r1+r0")


def _regrouped_rows(
    source: tuple[int, ...], result: tuple[int, ...], labels: tuple[str, ...]
) -> tuple[str, ...] | None:
    """The roles of a reshape's non-unit dimensions (``source`` to ``result``, size-1
    dimensions left out, ``labels`` the source's roles): each dimension kept, the
    queries' split into the two :data:`ROW_FACTORS`, or two row factors side by side
    merged (role ``"r1+r0"``: major first); None for any other regrouping."""
    out: list[str] = []
    i = j = 0
    while i < len(source) and j < len(result):
        if source[i] == result[j]:
            out.append(labels[i])
            i, j = i + 1, j + 1
        elif (
            labels[i] == "q"
            and not set(ROW_FACTORS) & set(labels)
            and j + 1 < len(result)
            and result[j] * result[j + 1] == source[i]
        ):
            out += ROW_FACTORS
            i, j = i + 1, j + 2
        elif (
            i + 1 < len(source)
            and {labels[i], labels[i + 1]} == set(ROW_FACTORS)
            and source[i] * source[i + 1] == result[j]
        ):
            out.append(f"{labels[i]}+{labels[i + 1]}")
            i, j = i + 2, j + 1
        elif (
            labels[i] in MERGED_ROWS
            and j + 1 < len(result)
            and result[j] * result[j + 1] == source[i]
        ):  # merged row factors split again, major first
            out += labels[i].split("+")
            i, j = i + 1, j + 2
        else:
            return None
    return tuple(out) if (i, j) == (len(source), len(result)) else None


def _operand_labels(inst: Instruction, labels: Labels) -> Labels:
    """The roles of ``inst``'s (first) operand's dimensions, ``inst``'s being ``labels``
    (every dimension): walking a view or broadcast backwards."""
    source = inst.operands[0].array_shape.dims
    if inst.opcode in ("convert", "copy"):
        return labels
    if inst.opcode == "reshape":
        return _full(_present(labels), source)
    if inst.opcode == "transpose":
        out: list[str | None] = [None] * len(source)
        for i, d in enumerate(inst.attributes["dimensions"]):
            out[d] = labels[i]
        return tuple(out)
    if inst.opcode == "broadcast":
        return tuple(labels[d] for d in inst.attributes.get("dimensions", ()))
    raise AssertionError(inst.opcode)


def _peel(
    value: Instruction, labels: Labels, widen_from: ElementType | None
) -> tuple[Instruction, Labels]:
    """``value`` without the broadcasts, transposes, size-1 reshapes and (where
    ``widen_from`` is given) exact widenings from that type around its source, and the
    roles of the source's dimensions."""
    while True:
        opcode = value.opcode
        if opcode == "reshape" and _squeezed(value.array_shape.dims) != _squeezed(
            value.operands[0].array_shape.dims
        ):
            break
        if opcode == "convert" and (
            widen_from is None or value.operands[0].array_shape.element_type is not widen_from
        ):
            break
        if opcode not in ("reshape", "transpose", "broadcast", "convert", "copy"):
            break
        labels = _operand_labels(value, labels)
        value = value.operands[0]
    return value, labels


# -- small readings -----------------------------------------------------------------------------


def _through(inst: Instruction, opcodes: frozenset[str], path: list[Instruction]) -> Instruction:
    """The first instruction below ``inst`` that is not one of ``opcodes`` (those passed
    are appended to ``path``)."""
    while inst.opcode in opcodes:
        path.append(inst)
        inst = inst.operands[0]
    return inst


def _scalar_constant(inst: Instruction) -> float | None:
    """The value of a constant broadcast from (or reshaped or converted from) one number."""
    while inst.opcode in ("broadcast", "reshape", "convert", "copy"):
        if inst.opcode == "broadcast" and math.prod(inst.operands[0].array_shape.dims) != 1:
            return None
        inst = inst.operands[0]
    if inst.opcode != "constant" or inst.literal is None:
        return None
    values = np.asarray(inst.literal).reshape(-1)
    if values.size != 1 or values.dtype.kind in "bcOSU":  # a number (ml_dtypes' floats: "V")
        return None
    return float(values[0])


def _combiner(reduce: Instruction) -> str:
    """The binary op a one-operand reduce folds with (``""`` for anything else)."""
    if reduce.opcode != "reduce" or len(reduce.operands) != 2:
        return ""
    try:
        computation = reduce.called("to_apply")
    except HloError:
        return ""
    root = computation.root_instruction
    parameters = computation.parameters
    if len(parameters) != 2 or sorted(map(id, root.operands)) != sorted(map(id, parameters)):
        return ""
    return root.opcode


def _reduced_axis(reduce: Instruction) -> int:
    """The position among its operand's non-unit dimensions of the one dimension
    ``reduce`` folds (a _NoMatch where it folds several, or a size-1 one)."""
    dims = list(reduce.attributes.get("dimensions", ()))
    source = reduce.operands[0].array_shape.dims
    folded = [d for d in dims if source[d] != 1]
    if len(folded) != 1:
        raise _NoMatch(f"reduce '{reduce.name}' folds {len(folded)} dimensions, not the keys'")
    return sum(1 for d in range(folded[0]) if source[d] != 1)


# -- the pattern ---------------------------------------------------------------------------------


@attrs.frozen
class _Softmax:
    logits: Instruction  #: the value the softmax normalises
    axis: int  #: the position of the keys among its non-unit dimensions
    interior: tuple[Instruction, ...]


def _softmax(divide: Instruction) -> _Softmax:
    """The softmax ``divide`` ends (exp(x - max x) / sum exp(x - max x)), or _NoMatch."""
    interior: list[Instruction] = [divide]
    numerator = _through(divide.operands[0], _SOFTMAX_VIEWS, interior)
    if numerator.opcode != "exponential":
        raise _NoMatch(f"'{divide.name}' divides no exponential")
    totals = _through(divide.operands[1], _SOFTMAX_VIEWS, interior)
    if totals.opcode != "broadcast":
        raise _NoMatch(f"'{divide.name}' does not divide by a broadcast sum")
    shifted = numerator.operands[0]
    if shifted.opcode != "subtract":
        raise _NoMatch(f"exponential '{numerator.name}' is not of x - max(x)")
    interior += [numerator, shifted, totals]
    logits = _through(shifted.operands[0], _SOFTMAX_VIEWS, interior)
    peaks = _through(shifted.operands[1], _SOFTMAX_VIEWS, interior)
    if peaks.opcode != "broadcast":
        raise _NoMatch(f"'{shifted.name}' subtracts no broadcast maximum")
    interior.append(peaks)
    total, sum_axis = _restored_reduction(
        totals,
        numerator,
        "add",
        interior,
        f"'{divide.name}' does not divide by a sum of its exponentials",
    )
    if _scalar_constant(total.operands[1]) != 0:
        raise _NoMatch(f"sum '{total.name}' does not start from 0")
    peak, axis = _restored_reduction(
        peaks, logits, "maximum", interior, f"'{shifted.name}' subtracts no maximum"
    )
    lowest = _scalar_constant(peak.operands[1])
    if lowest is None or lowest > _FILL_AT_MOST:
        raise _NoMatch(f"maximum '{peak.name}' does not start from -inf")
    if sum_axis != axis:
        raise _NoMatch(f"'{peak.name}' and '{total.name}' reduce different dimensions")
    return _Softmax(logits, axis, tuple(interior))


def _view_chain(inst: Instruction) -> list[Instruction]:
    """``inst`` and what lies below it through views (transposes, reshapes, converts)."""
    chain = [inst]
    while chain[-1].opcode in _VIEWS:
        chain.append(chain[-1].operands[0])
    return chain


def _restored_reduction(
    broadcast: Instruction, frame: Instruction, combiner: str, interior: list[Instruction], why: str
) -> tuple[Instruction, int]:
    """The reduce (folding with ``combiner``) whose result ``broadcast`` spreads back over
    ``frame``'s dimensions, and the position among ``frame``'s non-unit dimensions of
    the one it folds; its instructions are added to ``interior``. Views may stand
    anywhere between: jax's and XLA's simplifiers move transposes across reductions
    (grouped-query attention's maximum is taken before the heads are transposed).
    _NoMatch with ``why`` where ``broadcast`` is no such reduction."""
    path: list[Instruction] = []
    reduce = _through(broadcast.operands[0], _VIEWS, path)
    if _combiner(reduce) != combiner:
        raise _NoMatch(why)
    below_frame, below_source = _view_chain(frame), _view_chain(reduce.operands[0])
    common = next((x for x in below_source if x in below_frame), None)
    if common is None:
        raise _NoMatch(f"{combiner} '{reduce.name}' is not of the values the softmax shifts")
    names = tuple(f"a{i}" for i in range(len(_squeezed(frame.array_shape.dims))))
    full = _full(names, frame.array_shape.dims)
    for inst in below_frame[: below_frame.index(common)]:
        full = _operand_labels(inst, full)
    labels = _present(full)
    climb = below_source[: below_source.index(common)]
    for inst in reversed(climb):
        labels = _view_labels(inst, labels)
    position = _reduced_axis(reduce)
    folded = labels[position]
    kept = labels[:position] + labels[position + 1 :]
    for inst in reversed(path):
        kept = _view_labels(inst, kept)
    out = broadcast.array_shape.dims
    if _squeezed(out) != _squeezed(frame.array_shape.dims):
        raise _NoMatch(f"'{broadcast.name}' is not in the frame of '{frame.name}'")
    at = {d: i for i, d in enumerate(d for d in range(len(out)) if out[d] != 1)}
    spread = broadcast.operands[0].array_shape.dims
    targets = [
        t
        for size, t in zip(spread, broadcast.attributes.get("dimensions", ()), strict=True)
        if size != 1
    ]
    if any(t not in at for t in targets) or [names[at[t]] for t in targets] != list(kept):
        raise _NoMatch("the softmax's maximum or sum is broadcast along another dimension")
    interior += [*path, reduce, *climb]
    return reduce, names.index(folded)


@attrs.frozen
class _Logits:
    """The path from the scores' dot to the softmax's input, read backwards."""

    scores_dot: Instruction
    path: tuple[Instruction, ...]  #: from the softmax's input down to the dot (excluded)
    scale: float
    bias: Instruction | None  #: the add's bias operand
    bias_add: Instruction | None
    mask: Instruction | None  #: the select's predicate
    mask_select: Instruction | None
    mask_inverted: bool  #: the predicate says where the fill goes, not what is kept
    mask_fill: float = 0.0  #: what the select puts where the mask does not keep a score


def _scaled_dot_below(inst: Instruction) -> bool:
    """Whether a dot lies below ``inst`` through views and constant scales alone (what
    may lie below a bias: the operand of an add that is not the bias)."""
    while inst.opcode != "dot":
        if inst.opcode in _VIEWS:
            inst = inst.operands[0]
        elif (
            inst.opcode in ("multiply", "divide") and _scalar_constant(inst.operands[1]) is not None
        ):
            inst = inst.operands[0]
        elif inst.opcode == "multiply" and _scalar_constant(inst.operands[0]):
            inst = inst.operands[1]
        else:
            return False
    return True


def _logits(value: Instruction) -> _Logits:
    """The scale, bias and mask between the scores' dot and ``value``, or _NoMatch."""
    path: list[Instruction] = []
    scale = 1.0
    bias = bias_add = mask = mask_select = None
    inverted = False
    mask_fill = 0.0
    stage = 0  # walking down: the mask, then the bias, then the scale
    inst = value
    while inst.opcode != "dot":
        if inst.opcode in _VIEWS:
            path.append(inst)
            inst = inst.operands[0]
            continue
        path.append(inst)
        if inst.opcode == "select":
            if stage > 0 or mask is not None:
                raise _NoMatch(f"select '{inst.name}' is not the last step before the softmax")
            kept, fill = inst.operands[1], inst.operands[2]
            if (_scalar_constant(fill) or 0) > _FILL_AT_MOST:
                kept, fill = fill, kept
                inverted = True
            filled = _scalar_constant(fill)
            if filled is None or filled > _FILL_AT_MOST:
                raise _NoMatch(f"select '{inst.name}' fills with something else than -inf")
            mask, mask_select, mask_fill = inst.operands[0], inst, filled
            inst = kept
        elif inst.opcode == "add":
            if stage > 1 or bias is not None:
                raise _NoMatch(f"add '{inst.name}' comes before the scale")
            stage = 1
            lhs, rhs = inst.operands
            chain, bias = (lhs, rhs) if _scaled_dot_below(lhs) else (rhs, lhs)
            bias_add = inst
            inst = chain
        elif inst.opcode in ("multiply", "divide"):
            stage = 2
            lhs, rhs = inst.operands
            factor = _scalar_constant(rhs)
            chain = lhs
            if factor is None and inst.opcode == "multiply":
                factor, chain = _scalar_constant(lhs), rhs
            if factor is None or factor == 0:
                raise _NoMatch(
                    f"{inst.opcode} '{inst.name}' scales by something else than a constant"
                )
            scale = scale * factor if inst.opcode == "multiply" else scale / factor
            inst = chain
        else:
            raise _NoMatch(f"{inst.opcode} '{inst.name}' lies between the scores and the softmax")
    return _Logits(inst, tuple(path), scale, bias, bias_add, mask, mask_select, inverted, mask_fill)


def _check_dot(dot: Instruction, what: str) -> tuple[int, ...]:
    """The batch sizes of ``dot`` (canonical, one free dimension each side), or _NoMatch."""
    if not is_canonical_dot(dot):
        raise _NoMatch(f"{what} '{dot.name}' is not canonical")
    lhs_batch, _, lhs_contracting, _ = dimension_lists(dot)
    lhs, rhs = (operand.array_shape for operand in dot.operands)
    nb = len(lhs_batch)
    if len(lhs_contracting) != 1 or len(lhs.dims) != nb + 2 or len(rhs.dims) != nb + 2:
        raise _NoMatch(f"{what} '{dot.name}' is not a batch of matrix products")
    return tuple(lhs.dims[:nb])


def _is_causal(
    mask: Instruction, labels: Labels, inverted: bool, queries: Sequence[str] = ("q",)
) -> tuple[str, str]:
    """``("", role)`` where ``mask`` keeps exactly ``i >= j`` (query i, key j), the
    queries being the dimension of ``role`` (one of ``queries``); else ``(why not, "")``."""
    source, roles = _peel(mask, labels, None)
    present = _present(roles)
    query = next((r for r in queries if sorted(present) == sorted(("k", r))), "")
    if not query:
        return f"mask '{mask.name}' is not over the queries and keys alone", ""
    computation = _constant_subgraph(source)
    if computation is None:
        why = f"mask '{mask.name}' is not a compile-time constant (so not the causal one)"
        return why, ""
    if math.prod(source.array_shape.dims) > _MASK_ELEMENTS_LIMIT:
        return f"mask '{mask.name}' is too large to read at compile time", ""
    from heron.hlo.evaluator import evaluate_computation

    value = np.asarray(evaluate_computation(computation, []), dtype=bool)
    value = value.reshape(_squeezed(source.array_shape.dims))
    if present == ("k", query):
        value = value.T
    if inverted:
        value = ~value
    rows, columns = value.shape
    causal = np.arange(columns)[None, :] <= np.arange(rows)[:, None]
    if not np.array_equal(value, causal):
        return f"mask '{mask.name}' is not causal", ""
    return "", query


def _constant_subgraph(root: Instruction) -> Computation | None:
    """A computation of its own computing ``root``, where nothing below it is a parameter
    or calls a computation; None otherwise."""
    order: list[Instruction] = []
    seen: set[Instruction] = set()  # instructions hash by identity

    def visit(inst: Instruction) -> bool:
        if inst in seen:
            return True
        seen.add(inst)
        if inst.opcode in ("parameter", "rng", "infeed", "custom-call") or any(
            isinstance(value, ComputationRef) for value in inst.attributes.values()
        ):
            return False
        if not all(visit(operand) for operand in inst.operands):
            return False
        order.append(inst)
        return True

    if not visit(root):
        return None
    computation = Computation("attention_mask")
    copies: dict[Instruction, Instruction] = {}
    for inst in order:
        copy = inst.clone([copies[o] for o in inst.operands])
        copies[inst] = computation.add(copy)
    computation.root = copies[root]
    return computation


def _logits_roles(
    logits: _Logits, softmax: _Softmax, batch_roles: Sequence[str]
) -> tuple[int, tuple[str, ...], dict[Instruction, tuple[str, ...]]]:
    """Which operand of the scores' dot the queries are (its rows, or its columns where
    the dot reads k first), the roles of the softmax input's non-unit dimensions, and
    the roles at each instruction of the logits path: the scores' dimensions followed
    up the path; _NoMatch where neither orientation has the softmax run over the keys.
    ``batch_roles`` name the scores' batch dimensions (size-1 ones are dropped)."""
    scores = logits.scores_dot
    why = _NoMatch("the softmax does not run over the keys")
    for q_side in (0, 1):
        scores_roles = ("q", "k") if q_side == 0 else ("k", "q")
        roles = _of_non_unit((*batch_roles, *scores_roles), scores.array_shape.dims)
        roles_at: dict[Instruction, tuple[str, ...]] = {}
        try:
            for inst in reversed(logits.path):
                if inst.opcode in _VIEWS:
                    roles = _view_labels(inst, roles)
                roles_at[inst] = roles
        except _NoMatch as error:  # the other orientation may be the one
            why = error
            continue
        if softmax.axis < len(roles) and roles[softmax.axis] == "k":
            return q_side, roles, roles_at
    raise why


def match_attention(dot: Instruction, uses: Uses, target: Target) -> AttentionMatch | str | None:
    """The attention ``dot`` ends (its product of probabilities and values), why it is
    not taken (a string), or None where ``dot`` ends no softmax at all."""
    found = None
    for side in (0, 1):
        path: list[Instruction] = []
        divide = _through(dot.operands[side], _VIEWS, path)
        if (
            divide.opcode == "divide"
            and _through(divide.operands[0], _SOFTMAX_VIEWS, []).opcode == "exponential"
        ):
            found = side, path, divide
            break
    if found is None:
        return None
    side, probability_path, divide = found
    try:
        return _match(dot, side, probability_path, divide, uses, target)
    except _NoMatch as why:
        return str(why)


def _match(
    dot: Instruction,
    side: int,
    probability_path: list[Instruction],
    divide: Instruction,
    uses: Uses,
    target: Target,
) -> AttentionMatch:
    if not target.fused_attention_library:
        raise _NoMatch(f"{target.name} has no fused-attention library (cuDNN on sm_80 and later)")
    softmax = _softmax(divide)
    logits = _logits(softmax.logits)
    scores = logits.scores_dot
    for inst in (scores, *logits.path, *softmax.interior):
        if inst.array_shape.element_type is not ElementType.F32:
            raise _NoMatch(
                f"{inst.opcode} '{inst.name}' computes the scores or their softmax in"
                f" {inst.array_shape.element_type}: the fused call computes them in f32, which"
                " would not be the program's result (compute the scores in f32, as"
                " jax.nn.dot_product_attention does)"
            )
    batch = _check_dot(scores, "the scores' dot")
    out_batch = _check_dot(dot, "the output's dot")
    if out_batch != batch:
        raise _NoMatch(f"the dots' batches differ ({list(batch)} and {list(out_batch)})")
    # roles along the way: the scores' dimensions, up the logits path to the softmax; the
    # queries are the scores' rows, or their columns where the dot reads k first
    nb = len(batch)
    batch_roles = tuple(f"b{i}" for i in range(nb))
    q_side, roles, roles_at = _logits_roles(logits, softmax, batch_roles)
    q, k = (scores.operands[s].array_shape for s in (q_side, 1 - q_side))
    v = dot.operands[1 - side].array_shape
    element = str(q.element_type)
    types = {str(x.element_type) for x in (q, k, v, dot.array_shape)}
    if types != {element} or element not in ELEMENT_TYPES:
        raise _NoMatch(
            f"the fused call takes q, k, v and its output of one type of"
            f" {', '.join(ELEMENT_TYPES)}, not {' x '.join(sorted(types))}"
        )
    head = q.dims[nb + 1] if q_side == 0 else q.dims[nb]
    value_head = v.dims[nb + 1] if side == 0 else v.dims[nb]
    check_head_sizes(head, value_head)
    for inst in reversed(probability_path):
        roles = _view_labels(inst, roles)
        roles_at[inst] = roles
    operand_dims = dot.operands[side].array_shape.dims
    merged_rows = [f"{a}+{b}" for a, b in (ROW_FACTORS, ROW_FACTORS[::-1])]
    rows = next(
        (
            r
            for r in ("q", *merged_rows)
            if roles
            == _of_non_unit((*batch_roles, *((r, "k") if side == 0 else ("k", r))), operand_dims)
        ),
        None,
    )
    if rows is None:
        raise _NoMatch("the second dot does not contract the keys with the batch in order")
    grouped = rows != "q"
    query = ROW_FACTORS[0] if grouped else "q"
    causal = False
    mask: Instruction | None = None
    mask_labels: tuple[str, ...] = ()
    if logits.mask is not None:
        assert logits.mask_select is not None
        mask_roles = _full(roles_at[logits.mask_select], logits.mask.array_shape.dims)
        queries = ROW_FACTORS if grouped else ("q",)
        why, query = _is_causal(logits.mask, mask_roles, logits.mask_inverted, queries)
        if why:  # any other mask joins the bias: 0 where it keeps a score, the fill elsewhere
            mask, mask_labels, query = _mask_as_bias(logits, mask_roles, queries, why)
        else:
            causal = True
    row_factors: tuple[int, ...] = ()
    if grouped:
        row_factors = _row_factor_sizes(scores, logits.path, probability_path, roles_at)
    bias = None
    bias_labels: tuple[str, ...] = ()
    if logits.bias is not None:
        assert logits.bias_add is not None
        at_add = _full(roles_at[logits.bias_add], logits.bias.array_shape.dims)
        bias, peeled = _peel(logits.bias, at_add, q.element_type)
        bias_labels = _call_labels(_present(peeled), query)
        if str(bias.array_shape.element_type) != element:
            raise _NoMatch(
                f"bias '{logits.bias.name}' is {bias.array_shape.element_type}: the fused call"
                f" takes it in {element}"
            )
        if not {"q", "k"} <= set(bias_labels):
            raise _NoMatch(f"bias '{logits.bias.name}' is not over the queries and keys")
        if len(bias_labels) != len(set(bias_labels)):
            raise _NoMatch(f"bias '{logits.bias.name}' repeats a dimension")
    interior = [scores, *logits.path, *softmax.interior, *probability_path]
    inside = {*interior, dot}
    for inst in interior:
        if inst is uses.computation.root:
            raise _NoMatch(f"'{inst.name}' is an output of the computation")
        outside = [user.name for user in uses.users(inst) if user not in inside]
        if outside:
            raise _NoMatch(
                f"'{inst.name}' is also used by {', '.join(outside[:3])} (a backward pass keeps"
                " the attention's intermediates)"
            )
    return AttentionMatch(
        scores_dot=scores,
        output_dot=dot,
        probabilities_side=side,
        scale=logits.scale,
        causal=causal,
        bias=bias,
        bias_labels=bias_labels,
        element_type=element,
        queries_side=q_side,
        mask=mask,
        mask_labels=mask_labels,
        mask_fill=logits.mask_fill,
        mask_inverted=logits.mask_inverted,
        row_factors=row_factors,
        query_factor=ROW_FACTORS.index(query) if grouped else 0,
        output_rows=tuple(ROW_FACTORS.index(r) for r in rows.split("+")) if grouped else (0, 1),
    )


@attrs.frozen
class TensorRoles:
    """A tensor a product reads: the instruction below its moves, and the role of each of
    its non-unit dimensions (``b0``, ``b1``... the batch; ``q``, ``k``; ``d``, ``e`` the
    head and the value head)."""

    source: Instruction
    roles: tuple[str, ...]


@attrs.frozen
class SoftmaxFrame:
    """An attention's forward softmax and the roles of its dimensions, for the passes that
    read what the forward computes (the backward pass's matcher): the exponentials,
    their row sums and the probabilities with the roles of their non-unit dimensions,
    the scores' q and k, and the scale, mask and bias between the scores and the softmax."""

    divide: Instruction  #: the probabilities, exp / sum
    exponential: Instruction
    total: Instruction  #: the reduce summing the exponentials over the keys
    roles: tuple[str, ...]  #: of the exponentials' and the probabilities' non-unit dimensions
    row_roles: tuple[str, ...]  #: of the sum's
    batch_roles: tuple[str, ...]
    q: TensorRoles
    k: TensorRoles
    scale: float
    causal: bool
    mask: Instruction | None  #: a mask other than the causal one
    #: the bias's source (of the operands' type) and the roles of its non-unit dimensions
    #: (:func:`_call_labels`; empty for grouped-query attention, whose rows it would split)
    bias: Instruction | None
    bias_labels: tuple[str, ...]
    element_type: str
    grouped: bool  #: the rows are a query and a head of a group (grouped-query attention)
    #: Grouped-query attention: the sizes of the two :data:`ROW_FACTORS` the scores' rows
    #: split into (major first), and which of them is the query position (the other: a
    #: head of a key/value head's group). The scores' dot's rows are ``"r0+r1"``.
    row_factors: tuple[int, ...] = ()
    query_role: str = "q"

    @property
    def group_role(self) -> str:
        """The row factor that is a head of a group (grouped-query attention)."""
        return next(r for r in ROW_FACTORS if r != self.query_role)


def batch_labels(sizes: Sequence[int]) -> tuple[str, ...]:
    """Roles of a product's batch dimensions: ``b0``, ``b1``... numbering those of more
    than one element (``"unit"`` for the others, which no role survives)."""
    names = iter(f"b{i}" for i in range(len(sizes)))
    return tuple(next(names) if size != 1 else "unit" for size in sizes)


def _roles_above(start: Instruction, top: Instruction, roles: tuple[str, ...]) -> tuple[str, ...]:
    """The roles of ``top``'s non-unit dimensions, ``start`` (below it through views)
    having ``roles``."""
    path: list[Instruction] = []
    inst = top
    while inst is not start:
        if inst.opcode not in _VIEWS:
            raise _NoMatch(f"'{top.name}' is not a view of '{start.name}'")
        path.append(inst)
        inst = inst.operands[0]
    for inst in reversed(path):
        roles = _view_labels(inst, roles)
    return roles


def softmax_frame(divide: Instruction, target: Target) -> SoftmaxFrame | None:
    """The attention softmax ``divide`` ends, read as :class:`SoftmaxFrame`; None where it
    is no softmax of scores, _NoMatch where the fused calls could not compute it."""
    if not target.fused_attention_library:
        return None
    if (
        divide.opcode != "divide"
        or _through(divide.operands[0], _SOFTMAX_VIEWS, []).opcode != "exponential"
    ):
        return None
    try:
        softmax = _softmax(divide)
        logits = _logits(softmax.logits)
    except _NoMatch:
        return None
    scores = logits.scores_dot
    for inst in (scores, *logits.path, *softmax.interior):
        if inst.array_shape.element_type is not ElementType.F32:
            raise _NoMatch(
                f"{inst.opcode} '{inst.name}' computes the scores or their softmax in"
                f" {inst.array_shape.element_type}: the fused call computes them in f32"
            )
    batch_roles = batch_labels(_check_dot(scores, "the scores' dot"))
    q_side, roles, roles_at = _logits_roles(logits, softmax, batch_roles)
    grouped = bool(set(ROW_FACTORS) & {r for rs in roles_at.values() for r in rs})
    exponential = _through(divide.operands[0], _SOFTMAX_VIEWS, [])
    shifted = exponential.operands[0]
    at_exponential = _roles_above(softmax.logits, shifted.operands[0], roles)
    if _roles_above(exponential, divide.operands[0], at_exponential) != at_exponential:
        raise _NoMatch(f"'{divide.name}' divides along other dimensions than it exponentiates")
    total = next(inst for inst in softmax.interior if _combiner(inst) == "add")
    summed = _roles_above(exponential, total.operands[0], at_exponential)
    position = _reduced_axis(total)
    if summed[position] != "k":
        raise _NoMatch(f"sum '{total.name}' does not run over the keys")
    causal, mask = False, None
    queries = ROW_FACTORS if grouped else ("q",)
    query_role = queries[0]
    if logits.mask is not None:
        assert logits.mask_select is not None
        mask_roles = _full(roles_at[logits.mask_select], logits.mask.array_shape.dims)
        not_causal, query = _is_causal(logits.mask, mask_roles, logits.mask_inverted, queries)
        causal, mask = (False, logits.mask) if not_causal else (True, None)
        query_role = query or query_role
    row_factors: tuple[int, ...] = ()
    if grouped:
        row_factors = _row_factor_sizes(scores, logits.path, (), roles_at)
    q, k = (scores.operands[s] for s in (q_side, 1 - q_side))
    rows = "r0+r1" if grouped else "q"  # the scores' rows, split after the dot
    lhs_roles = (*batch_roles, *((rows, "d") if q_side == 0 else ("k", "d")))
    rhs_roles = (*batch_roles, *(("d", "k") if q_side == 0 else ("d", rows)))
    q_roles, k_roles = (lhs_roles, rhs_roles) if q_side == 0 else (rhs_roles, lhs_roles)
    element = str(q.array_shape.element_type)
    if element not in ELEMENT_TYPES or k.array_shape.element_type is not q.array_shape.element_type:
        raise _NoMatch(
            f"the fused calls take q and k of one type of {', '.join(ELEMENT_TYPES)}, not"
            f" {q.array_shape.element_type} x {k.array_shape.element_type}"
        )
    bias, bias_labels = None, ()
    if logits.bias is not None and not grouped:
        assert logits.bias_add is not None
        at_add = _full(roles_at[logits.bias_add], logits.bias.array_shape.dims)
        bias, peeled = _peel(logits.bias, at_add, q.array_shape.element_type)
        bias_labels = _call_labels(_present(peeled), "q")
        if str(bias.array_shape.element_type) != element:
            raise _NoMatch(f"bias '{logits.bias.name}' is not {element}")
        if not {"q", "k"} <= set(bias_labels) or len(bias_labels) != len(set(bias_labels)):
            raise _NoMatch(f"bias '{logits.bias.name}' is not over the queries and keys once")
    return SoftmaxFrame(
        divide=divide,
        exponential=exponential,
        total=total,
        roles=at_exponential,
        row_roles=summed[:position] + summed[position + 1 :],
        batch_roles=tuple(r for r in batch_roles if r != "unit"),
        q=_tensor(q, q_roles),
        k=_tensor(k, k_roles),
        scale=logits.scale,
        causal=causal,
        mask=mask,
        bias=bias if bias is not None else logits.bias,
        bias_labels=bias_labels,
        element_type=element,
        grouped=grouped,
        row_factors=row_factors,
        query_role=query_role,
    )


def _tensor(operand: Instruction, roles: Sequence[str]) -> TensorRoles:
    """``operand`` of a product, ``roles`` naming each of its dimensions, as the tensor below
    its moves (transposes, reshapes that add or drop size-1 dimensions, copies)."""
    labels: Labels = tuple(
        None if size == 1 else role
        for role, size in zip(roles, operand.array_shape.dims, strict=True)
    )
    inst = operand
    while inst.opcode in ("transpose", "reshape", "copy"):
        if inst.opcode == "reshape" and _squeezed(inst.array_shape.dims) != _squeezed(
            inst.operands[0].array_shape.dims
        ):
            break
        labels = _operand_labels(inst, labels)
        inst = inst.operands[0]
    return TensorRoles(inst, _present(labels))


#: The fill a mask other than a causal one must have to become a bias: adding any
#: score below 1e30 / 2^24 to it gives it back (its f32 spacing is above twice such a
#: score), so a row the mask empties stays a row of equal values, as the program's
#: select makes it (jax fills with -0.7 x f32's largest, -2.38e38).
_MASK_BIAS_FILL_AT_MOST = -1e30


def _mask_as_bias(
    logits: _Logits, mask_roles: Labels, queries: Sequence[str], why_not_causal: str
) -> tuple[Instruction, tuple[str, ...], str]:
    """A mask that is not causal (a padding mask, from a parameter or not) as the
    source the call's bias is made of: ``(source, its roles, the queries' role)``
    (the roles as :func:`_call_labels` names them); _NoMatch where it cannot be one.
    ``queries``: the roles the queries may have (the row factors of grouped-query
    attention: the one the mask varies along, if only one)."""
    assert logits.mask is not None
    if logits.mask_fill > _MASK_BIAS_FILL_AT_MOST:
        raise _NoMatch(
            f"{why_not_causal}; it would join the bias only with a fill of at most"
            f" {_MASK_BIAS_FILL_AT_MOST:g} (it fills with {logits.mask_fill:g})"
        )
    # jax ands its causal mask with a padding mask into one: it all joins the bias. The
    # causal flag and a padding bias would be another result where the padding masks
    # every key up to the diagonal (the program's row is uniform over all keys, the
    # flag's only over those up to the diagonal).
    source, roles = _peel(logits.mask, mask_roles, None)
    if source.array_shape.element_type is not ElementType.PRED:
        raise _NoMatch(f"mask '{logits.mask.name}' is not a predicate")
    labels = _present(roles)
    rows = [label for label in labels if label in queries]
    query = rows[0] if len(rows) == 1 else queries[0]
    if len(labels) != len(set(labels)):
        raise _NoMatch(f"mask '{logits.mask.name}' repeats a dimension")
    return source, _call_labels(labels, query), query


def _call_labels(labels: Sequence[str], query: str) -> tuple[str, ...]:
    """A bias's or mask's roles as the call's bias names them: the queries ``q``, the
    other row factor of grouped-query attention ``g`` (a head of a group)."""
    named = {query: "q", **{r: "g" for r in ROW_FACTORS if r != query}}
    return tuple(named.get(label, label) for label in labels)


def _row_factor_sizes(
    scores: Instruction,
    logits_path: Sequence[Instruction],
    probability_path: Sequence[Instruction],
    roles_at: dict[Instruction, tuple[str, ...]],
) -> tuple[int, int]:
    """The sizes of the two :data:`ROW_FACTORS`, read where a reshape made them."""
    for inst in (*reversed(logits_path), *reversed(probability_path)):
        roles = roles_at.get(inst, ())
        if set(ROW_FACTORS) <= set(roles):
            sizes = _squeezed(inst.array_shape.dims)
            return tuple(sizes[roles.index(r)] for r in ROW_FACTORS)  # type: ignore[return-value]
    raise AssertionError(f"no reshape splits the rows of '{scores.name}'")


# -- the rewrite ---------------------------------------------------------------------------------


def _four_dims(
    batch: Sequence[int], rows: int, columns: int, groups: int = 1
) -> tuple[int, int, int, int]:
    """[B, H, rows, columns] with the batch dimensions merged: H the last (times the
    ``groups`` of grouped-query heads), B the rest."""
    if not batch:
        return (1, groups, rows, columns)
    return (math.prod(batch[:-1]), batch[-1] * groups, rows, columns)


@attrs.frozen
class _Adder:
    """Adds an instruction of its first operand's element type, named after ``like``."""

    inserter: Inserter
    like: Instruction

    def __call__(
        self,
        opcode: str,
        dims: Sequence[int],
        operands: Sequence[Instruction],
        attributes: dict | None = None,
        suffix: str = "",
    ) -> Instruction:
        shape = ArrayShape(operands[0].array_shape.element_type, tuple(dims))
        return self.inserter.add(opcode, shape, operands, attributes, like=self.like, suffix=suffix)


_IDENTITY = (0, 1, 2, 3)


def _after_view(dims: view_factors.Dims | None, view: Instruction) -> view_factors.Dims | None:
    """``dims`` (factors of some tensor) after ``view``, a transpose or reshape; None
    for anything else, or a reshape that cuts a factor unevenly."""
    if dims is None:
        return None
    if view.opcode == "transpose":
        return view_factors.transposed(dims, view.attributes["dimensions"])
    if view.opcode == "reshape":
        return view_factors.reshaped(dims, view.array_shape.dims)
    return None


def _stored(x: Instruction) -> tuple[Instruction, tuple[int, ...]]:
    """``x`` (4-D, cuDNN's order) as ``transpose(stored, dimensions=order)``: the furthest
    4-D tensor below the transposes and reshapes that lead to ``x`` of which ``x`` is a
    permutation (:mod:`heron.compiler.view_factors`), and where each of ``x``'s
    dimensions is in it; ``(x, identity)`` where there is none."""
    chain = [x]
    while chain[-1].opcode in ("transpose", "reshape"):
        chain.append(chain[-1].operands[0])
    for depth in range(len(chain) - 1, 0, -1):
        stored = chain[depth]
        sizes = stored.array_shape.dims
        if len(sizes) != 4:
            continue
        dims: view_factors.Dims | None = view_factors.identity(sizes)
        for view in reversed(chain[:depth]):
            dims = _after_view(dims, view)
        order = view_factors.permutation_of(dims, sizes) if dims is not None else None
        if order is not None:
            return stored, order
    return x, _IDENTITY


def _written(
    start: Instruction, dims: view_factors.Dims, result_sizes: Sequence[int], uses: Uses
) -> tuple[Instruction, tuple[int, ...]] | None:
    """The last of the transposes and reshapes that alone read ``start`` (whose
    dimensions are ``dims``, factors of cuDNN's result of ``result_sizes``) that is a
    permutation of the result, and the order it stores the result in (its dimension
    j is the result's ``order[j]``); None where there is none."""
    found = None
    x: Instruction = start
    current: view_factors.Dims | None = dims
    while True:
        users = uses.users(x)
        if len(users) != 1 or x is uses.computation.root:
            return found
        (user,) = users
        current = _after_view(current, user)
        if current is None:
            return found
        x = user
        order = view_factors.permutation_of(current, result_sizes)
        if order is not None:
            found = (x, order)


def _rewrite(inserter: Inserter, match: AttentionMatch) -> tuple[Instruction, Instruction]:
    """The call (transposed back where needed) and the instruction it replaces: the second
    dot, or the last view that alone reads it (the call then writes the program's order)."""
    scores, dot = match.scores_dot, match.output_dot
    q, k = (scores.operands[s] for s in (match.queries_side, 1 - match.queries_side))
    v = dot.operands[1 - match.probabilities_side]
    nb = len(dimension_lists(scores)[0])
    batch = q.array_shape.dims[:nb]
    element = q.array_shape.element_type
    add = _Adder(inserter, dot)

    def swap_last(x: Instruction, suffix: str) -> Instruction:
        dims = x.array_shape.dims
        order = (*range(nb), nb + 1, nb)
        return add("transpose", [dims[d] for d in order], [x], {"dimensions": order}, suffix)

    def four(x: Instruction, suffix: str, groups: int = 1) -> Instruction:
        dims = x.array_shape.dims
        rows, columns = dims[-2], dims[-1]
        return add("reshape", _four_dims(batch, rows, columns, groups), [x], suffix=suffix)

    groups, sq = match.groups, match.queries
    if match.queries_side == 1:  # k . q: the queries [b..., D, Sq], the keys [b..., Sk, D]
        q = swap_last(q, "attention_q_columns")
        k = swap_last(k, "attention_k_columns")
    if match.row_factors:  # rows (r0, r1) -> [b..., group, query] -> heads (b_last x group)
        q = add(
            "reshape",
            (*batch, *match.row_factors, q.array_shape.dims[-1]),
            [q],
            suffix="attention_q_rows",
        )
        g = 1 - match.query_factor
        order = (*range(nb), nb + g, nb + match.query_factor, nb + 2)
        dims = q.array_shape.dims
        q = add(
            "transpose", [dims[d] for d in order], [q], {"dimensions": order}, "attention_q_groups"
        )
    q4 = four(q, "attention_q", groups)
    k4 = four(swap_last(k, "attention_k_rows"), "attention_k")
    if match.probabilities_side == 1:
        v = swap_last(v, "attention_v_rows")
    v4 = four(v, "attention_v")
    # q, k and v read where the program stored them, through strides (no transposes)
    built = [q4, k4, v4]
    stored = [_stored(x) for x in built]
    operands = [x for x, _ in stored]
    orders = {name: order for name, (_, order) in zip("qkv", stored, strict=True)}
    sk = k.array_shape.dims[nb + 1]
    if match.bias is not None or match.mask is not None:
        operands.append(_bias(add, match.bias_parts, batch, sq, sk))
    out_dims = _four_dims(batch, sq, v4.array_shape.dims[3], groups)
    # the dot's dimensions as factors of the call's result: how the output is rebuilt
    steps = _output_steps(match, batch, out_dims)
    dims: view_factors.Dims | None = view_factors.identity(out_dims)
    for kind, argument, _ in steps:
        dims = (
            (
                view_factors.reshaped(dims, argument)
                if kind == "reshape"
                else view_factors.transposed(dims, argument)
            )
            if dims is not None
            else None
        )
    replaced, result_dims = dot, out_dims
    # the result written where the program's views put it, when that is all they do
    written = _written(dot, dims, out_dims, inserter.uses) if dims is not None else None
    if written is not None:
        replaced, orders["result"] = written
        result_dims = tuple(replaced.array_shape.dims)
    call = inserter.add(
        "custom-call",
        ArrayShape(element, result_dims),
        operands,
        {
            "custom_call_target": QuotedString(TARGET),
            "backend_config": QuotedString(backend_config(match.scale, match.causal, orders)),
        },
        like=dot,
        suffix="attention",
    )
    _drop_unused(inserter, built)
    if replaced is not dot:
        return replaced, call
    out = call
    for kind, argument, suffix in steps:
        if kind == "reshape":
            out = add("reshape", argument, [out], suffix=suffix)
        else:
            dims_now = out.array_shape.dims
            out = add(
                "transpose",
                [dims_now[d] for d in argument],
                [out],
                {"dimensions": argument},
                suffix,
            )
    return dot, out


def _output_steps(
    match: AttentionMatch, batch: Sequence[int], out_dims: Sequence[int]
) -> list[tuple[str, tuple[int, ...], str]]:
    """The reshapes and transposes that make the call's ``[B, H, Sq, Dv]`` the second
    dot's result: ``(kind, new dimensions or permutation, name suffix)``."""
    nb = len(batch)
    dv = out_dims[3]
    steps: list[tuple[str, tuple[int, ...], str]] = []
    if match.row_factors:
        g = 1 - match.query_factor
        sizes = {g: match.groups, match.query_factor: match.queries}
        steps.append(
            ("reshape", (*batch, match.groups, match.queries, dv), "attention_output_groups")
        )
        if match.output_rows != (g, match.query_factor):
            steps.append(("transpose", (*range(nb), nb + 1, nb, nb + 2), "attention_output_rows"))
        rows = sizes[match.output_rows[0]] * sizes[match.output_rows[1]]
        steps.append(("reshape", (*batch, rows, dv), "attention_output"))
    else:
        steps.append(("reshape", (*batch, match.queries, dv), "attention_output"))
    if match.probabilities_side == 1:
        steps.append(("transpose", (*range(nb), nb + 1, nb), "attention_output_columns"))
    return steps


def _drop_unused(inserter: Inserter, made: Sequence[Instruction]) -> None:
    """Remove what the rewrite made and did not use (the transposes looked through)."""
    computation = inserter.uses.computation
    pending = list(made)
    while pending:
        inst = pending.pop()
        if inst in computation.instructions and not inserter.uses.users(inst):
            if inst is computation.root or inst.opcode == "parameter":
                continue
            remove_instructions(computation, [inst])
            pending.extend(inst.operands)


def _in_order(
    add: _Adder, source: Instruction, labels: tuple[str, ...], canonical: tuple[str, ...], name: str
) -> Instruction:
    """``source`` without its size-1 dimensions, the others in ``canonical``'s order."""
    squeezed = _squeezed(source.array_shape.dims)
    if tuple(source.array_shape.dims) != squeezed:
        source = add("reshape", squeezed, [source], suffix=f"{name}_squeezed")
    order = sorted(range(len(labels)), key=lambda i: canonical.index(labels[i]))
    if order != list(range(len(labels))):
        dims = [squeezed[i] for i in order]
        source = add("transpose", dims, [source], {"dimensions": tuple(order)}, name)
    return source


def _bias(add: _Adder, match: BiasParts, batch: Sequence[int], sq: int, sk: int) -> Instruction:
    """The bias as ``[B or 1, H or 1, Sq, Sk]``: its source's dimensions put in the
    scores' order (the batch, a grouped-query head's group ``g`` after the last batch
    dimension, the queries, the keys), then merged as the call's dimensions merge
    them (broadcast first where one would mix kept and broadcast ones). A mask other
    than the causal one joins it: ``select(mask, bias or 0, fill)`` over the
    dimensions either varies along."""
    nb = len(batch)
    grouped = match.grouped
    batch_labels = tuple(f"b{i}" for i in range(nb))
    canonical = (*batch_labels, *(("g",) if grouped else ()), "q", "k")
    sizes = dict(zip(canonical, (*batch, *((match.groups,) if grouped else ()), sq, sk)))
    # the labels each of the call's [B, H, Sq, Sk] merges
    heads = (*batch_labels[-1:], *(("g",) if grouped else ()))
    call_dims = (batch_labels[:-1], heads, ("q",), ("k",))
    parts = []
    if match.bias is not None:
        source = _in_order(add, match.bias, match.bias_labels, canonical, "attention_bias")
        parts.append((source, match.bias_labels))
    if match.mask is not None:
        source = _in_order(add, match.mask, match.mask_labels, canonical, "attention_mask")
        parts.append((source, match.mask_labels))
    present = {label for _, labels in parts for label in labels}
    if match.mask is not None:  # the call's bias spans the queries and keys (a key
        present |= {"q", "k"}  # padding mask has no queries' dimension)
    union = tuple(label for label in canonical if label in present)
    source = parts[0][0]
    if match.mask is not None:
        source = _mask_bias(add, match, parts, union, sizes)
    needed = set(present)
    for group in call_dims:  # a merged dimension of the call needs all of its parts
        if needed & set(group):
            needed |= set(group)
    if needed != present:
        spread = [label for label in canonical if label in needed]
        full = tuple(sizes[label] for label in spread)
        kept = tuple(i for i, label in enumerate(spread) if label in present)
        source = add("broadcast", full, [source], {"dimensions": kept}, "attention_bias_batch")
    out = tuple(
        math.prod(sizes[label] for label in group) if needed & set(group) else 1
        for group in call_dims
    )
    return add("reshape", out, [source], suffix="attention_bias")


def _mask_bias(
    add: _Adder,
    match: BiasParts,
    parts: list[tuple[Instruction, tuple[str, ...]]],
    union: tuple[str, ...],
    sizes: dict[str, int],
) -> Instruction:
    """``select(mask, bias or 0, fill)`` (the other way round for an inverted mask) in
    the operands' type over the ``union`` of the bias's and the mask's roles."""
    element = ElementType(match.element_type)
    dims = tuple(sizes[label] for label in union)
    shape = ArrayShape(element, dims)

    def spread(source: Instruction, labels: tuple[str, ...], name: str) -> Instruction:
        if labels == union:
            return source
        where = tuple(union.index(label) for label in labels)
        return add("broadcast", dims, [source], {"dimensions": where}, name)

    def constant(value: float, name: str) -> Instruction:
        literal = np.asarray(value, np.float64).astype(element.numpy_dtype)
        scalar = add.inserter.add(
            "constant", ArrayShape(element, ()), [], like=add.like, suffix=name, literal=literal
        )
        return add("broadcast", dims, [scalar], {"dimensions": ()}, f"{name}s")

    mask = spread(*parts[-1], "attention_mask_spread")
    if match.bias is not None:
        kept = spread(*parts[0], "attention_bias_spread")
    else:
        kept = constant(0.0, "attention_mask_zero")
    fill = constant(match.mask_fill, "attention_mask_fill")
    chosen = [fill, kept] if match.mask_inverted else [kept, fill]
    return add.inserter.add(
        "select", shape, [mask, *chosen], like=add.like, suffix="attention_mask_bias"
    )


def matches_at(
    computation: Computation, opcode: str, match: Callable[[Instruction, Uses], object]
) -> list[object]:
    """What ``match`` says of each ``opcode`` instruction of ``computation``, all asked
    before any is rewritten (a rewrite changes the uses the others are matched on)."""
    uses = Uses(computation)
    return [match(inst, uses) for inst in list(computation.instructions) if inst.opcode == opcode]


def rewrite_attention(module: Module, target: Target) -> bool:
    """Every attention ``target``'s fused-attention library takes becomes
    ``__heron$attention``."""
    if not target.fused_attention_library:
        return False
    names = module_names(module)
    changed = False
    for computation in non_fusion_computations(module):
        found = matches_at(computation, "dot", lambda i, u: match_attention(i, u, target))
        for match in found:
            if not isinstance(match, AttentionMatch):
                continue
            inserter = Inserter(computation, names)
            replaced, replacement = _rewrite(inserter, match)
            inserter.replace(replaced, replacement)
            remove_instructions(computation, [replaced])
            _drop_unused(inserter, [match.output_dot])
            changed = True
    return changed


def library_attention_rewriter(target: Target) -> HloPass:
    """The ``library-attention-rewriter`` pass for ``target``."""
    return HloPass(
        "library-attention-rewriter",
        lambda module: rewrite_attention(module, target),
        "dot, scale, bias, causal mask, softmax and dot become one fused-attention call"
        " (cuDNN's flash attention)",
    )


def attention_verdicts(module: Module, target: Target) -> list[tuple[str, str]]:
    """(the second dot's name, what computes it) for every attention pattern of a
    simplified ``module``: the library, or why not, for reports."""
    verdicts = []
    for computation in non_fusion_computations(module):
        uses = Uses(computation)
        for inst in computation.instructions:
            if inst.opcode != "dot":
                continue
            found = match_attention(inst, uses, target)
            if isinstance(found, AttentionMatch):
                verdicts.append((inst.name, target.fused_attention_library))
            elif found is not None:
                verdicts.append((inst.name, f"two GEMMs and a softmax ({found})"))
    return verdicts


def is_library_attention(inst: Instruction) -> bool:
    """Whether ``inst`` is an attention the rewriter made a library custom call: of
    heron's library calls (:func:`heron.hlo.custom_calls.library.library_call_target`)
    the one whose target is ``__heron$attention``."""
    return library_call_target(inst) == TARGET


# -- the library call ----------------------------------------------------------------------------


def attention_call(inst: Instruction) -> AttentionCall:
    """The library call a ``__heron$attention`` custom call is (its shapes laid out)."""
    call = custom_call_of(inst)
    config = AttentionConfig(call.backend_config)

    def described(
        shape: ArrayShape, order: Sequence[int] = (0, 1, 2, 3)
    ) -> tuple[tuple[int, ...], tuple[int, ...]]:
        """Dimensions and element strides in cuDNN's [B, H, S, D] order: stored dimension
        ``order[i]`` is the i-th (the program's own order read through strides)."""
        strides = dense_strides(shape.dims, shape.major_to_minor)
        return tuple(shape.dims[d] for d in order), tuple(strides[d] for d in order)

    shapes = [operand.array_shape for operand in inst.operands]
    orders = config.orders
    q, k, v = (described(shape, orders[n]) for shape, n in zip(shapes[:3], "qkv", strict=True))
    stored = orders["result"]
    result = inst.shape
    stats_strides: tuple[int, ...] = ()
    if config.stats:  # (o, stats): the statistics a backward call reads
        if not isinstance(result, TupleShape) or len(result.elements) != 2:
            raise UnsupportedError("gives (o, stats) with 'stats' in its backend_config")
        result, stats = result.elements
        assert isinstance(stats, ArrayShape)
        stats_strides = dense_strides(stats.dims, stats.major_to_minor)
    assert isinstance(result, ArrayShape)
    o = described(result, tuple(stored.index(d) for d in range(4)))
    bias = described(shapes[3]) if len(shapes) == 4 else ((), ())
    return AttentionCall(
        q_dims=q[0],
        q_strides=q[1],
        k_dims=k[0],
        k_strides=k[1],
        v_dims=v[0],
        v_strides=v[1],
        o_dims=o[0],
        o_strides=o[1],
        bias_dims=bias[0],
        bias_strides=bias[1],
        scale=config.scale,
        causal=config.causal,
        element_type=str(result.element_type),
        stats_strides=stats_strides,
    )


def library_attention_thunk(
    inst: Instruction,
    operands: Sequence[BufferSlice],
    results: Sequence[BufferSlice],
    host: CustomCallThunk,
    target: Target,
) -> LibraryCallThunk:
    """The library call of a ``__heron$attention`` custom call, ``host`` beside it."""
    del target  # the contract depends on the call alone
    call = described_or_refused(inst, TARGET, attention_call)
    # o, and the statistics where the call gives them
    return host_backed_call(LIBRARY, call, (*operands, *results), host)
