"""A fused attention's backward pass as one library call: the pattern, and the call it becomes.

A training step's gradient of attention (jax's ``grad`` of a loss of
``jax.nn.dot_product_attention``, or of attention written by hand) is, as XLA
sees it, five batched GEMMs around the softmax's derivative::

    dp = do . v^T                            (the output's gradient times the values)
    dv = p^T . do                            (p: the forward's probabilities, rounded)
    ds = scale * p * (dp - sum_k(p * dp))    (the softmax's derivative, in f32)
    dq = ds . k
    dk = ds^T . q

with the scores and probabilities ``[B, H, Sq, Sk]`` stored and read again
several times. cuDNN's flash-attention backward computes dq, dk and dv in one
graph that never stores them. The ``library-attention-backward-rewriter``
pass (run before the forward's rewriter: once the gradients are one call, the
forward's probabilities serve only the forward's output, which that rewriter
then takes) finds the pattern from each forward softmax
(:func:`heron.compiler.library_attention.softmax_frame`) and makes it the
custom call ``__heron$attention_backward``
(:mod:`heron.hlo.custom_calls.attention_backward`).

How the pattern is recognised: the softmax's derivative is read as an
expression over the forward's exponentials ``e``, their row sums ``l``, the
probabilities ``p = e / l`` and the product ``dp``, brought to one normal
form (a sum of monomials with row sums as atoms; :class:`_Polynomial`) and
compared with ``scale * (e dp / l - e sum_k(e dp) / l^2)``, which is both
jax's autodiff of ``exp / sum`` and ``jax.nn.softmax``'s own derivative
``p * (dp - sum_k(p * dp))``. Every tensor is followed with the role of each
dimension (batch, queries ``q``, keys ``k``, head ``d``, value head ``e``)
through transposes and reshapes, so that each product must contract what the
gradient contracts. ``v`` and ``do`` are the operands of the product that
makes ``dp``; ``dv`` must read the same ``do``, ``dq`` the forward's ``k``
and ``dk`` its ``q``.

A bias the forward adds to its scores (not differentiated: the call gives no
gradient of it) is the call's operand, as the forward call's.

What the call computes differently, and why that is taken: jax computes
``dp`` in the element type (bf16), the call in f32, as cuDNN does (more
precise; within the reassociation bounds of a 16-bit result). Everything
else is the program's rounding: ``ds`` and ``p`` rounded to the element
type before their products (``algorithm=dot_bf16_bf16_f32``), the gradients
rounded once. Grouped-query attention (jax's ``[B, T, K, G, H]`` head groups:
the scores' rows are two factors, a query position and a head of a group,
merged in the products) is one call with cuDNN's GQA: its query heads ``K x
G``, dk and dv summed over each group by the call. Not taken (the verdict
says why): a mask other than the causal one, a bias with grouped queries,
f32 gradients that are not rounded to the element type, a product that reads
something else.

On a GPU the call is cuDNN's (a forward graph recomputing the output and its
softmax statistics, then ``sdpa_backward``: ``heron.runtime.cuda.cudnn_attention``);
the interpreter computes it with numpy or on the host. Where the program also
has the forward call of the same attention (a training step), the
``library-attention-pairing`` pass (:mod:`heron.compiler.library_attention_pairing`)
makes the call read that call's output and statistics instead.
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence

import attrs

from heron.compiler import view_factors
from heron.compiler.library_attention import (
    LIBRARY,
    MERGED_ROWS,
    ROW_FACTORS,
    BiasParts,
    Labels,
    SoftmaxFrame,
    TensorRoles,
    _Adder,
    _bias,
    _combiner,
    _drop_unused,
    _four_dims,
    _full,
    _is_causal,
    _NoMatch,
    _operand_labels,
    _present,
    _scalar_constant,
    _squeezed,
    _stored,
    _view_labels,
    attention_verdicts,
    batch_labels,
    check_head_sizes,
    matches_at,
    role_size,
    softmax_frame,
)
from heron.compiler.library_thunks import described_or_refused, host_backed_call
from heron.hlo.attributes import QuotedString
from heron.hlo.custom_calls.attention import AttentionConfig, backend_config
from heron.hlo.custom_calls.attention_backward import (
    OPERANDS,
    ORDERED,
    PAIRED_OPERANDS,
    TARGET,
)
from heron.hlo.custom_calls.call import custom_call_of
from heron.hlo.custom_calls.library import library_call_target
from heron.hlo.dot_precision import dot_compute
from heron.hlo.element_types import ElementType
from heron.hlo.ir import Instruction, Module
from heron.hlo.passes.dce import eliminate_dead_code
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
from heron.runtime.core.attention_backward import AttentionBackwardCall
from heron.runtime.core.library_contract import dense_strides
from heron.runtime.core.thunks import BufferSlice, CustomCallThunk, LibraryCallThunk
from heron.target import Target

__all__ = [
    "BackwardMatch",
    "attention_backward_call",
    "attention_backward_verdicts",
    "is_library_attention_backward",
    "library_attention_backward_rewriter",
    "library_attention_backward_thunk",
    "match_attention_backward",
    "program_attention_verdicts",
    "rewrite_attention_backward",
]

#: What only moves or reshapes values (a tensor read through them is the same tensor).
_MOVES = frozenset({"copy", "reshape", "transpose"})
#: The relative difference allowed between the derivative's scale and the forward's
#: (both f32 constants of one number, perhaps rounded differently).
_SCALE_TOLERANCE = 1e-6


# -- roles through views -----------------------------------------------------------------------


def _labels_below(inst: Instruction, roles: Labels) -> Labels | None:
    """The roles of ``inst``'s operand (every dimension; None for size-1 ones), its
    own being ``roles``; None where a reshape regroups dimensions otherwise than
    merging or splitting grouped-query attention's two row factors."""
    if inst.opcode == "reshape" and _squeezed(inst.array_shape.dims) != _squeezed(
        inst.operands[0].array_shape.dims
    ):
        return _regrouped_below(inst, _present(roles))
    return _operand_labels(inst, roles)


def _regrouped_below(reshape: Instruction, roles: tuple[str, ...]) -> Labels | None:
    """The operand's roles of a reshape merging the row factors (``r0, r1`` -> ``r0+r1``)
    or splitting them (``r0+r1`` -> ``r0, r1``), checked by the forward's reading of the
    reshape (:func:`heron.compiler.library_attention._view_labels`)."""
    candidates = []
    merged = [r for r in roles if r in MERGED_ROWS]
    if merged:  # the result merges: the operand has the factors
        (label,) = merged
        at = roles.index(label)
        candidates.append((*roles[:at], *label.split("+"), *roles[at + 1 :]))
    for at in range(len(roles) - 1):  # the result splits: the operand has them merged
        pair = roles[at : at + 2]
        if set(pair) == set(ROW_FACTORS):
            candidates.append((*roles[:at], "+".join(pair), *roles[at + 2 :]))
    source = reshape.operands[0].array_shape.dims
    for candidate in candidates:
        if len(candidate) != len(_squeezed(source)):
            continue
        try:
            if _view_labels(reshape, candidate) == roles:
                return _full(candidate, source)
        except _NoMatch:
            continue
    return None


def _source(
    inst: Instruction, roles: Labels, through: frozenset[str] = _MOVES
) -> tuple[Instruction, tuple[str, ...]]:
    """The instruction below ``inst`` through ``through`` (moves, perhaps converts), and
    the roles of its non-unit dimensions."""
    while inst.opcode in through:
        below = _labels_below(inst, roles)
        if below is None:
            break
        inst, roles = inst.operands[0], below
    return inst, _present(roles)


def _dot_operand_roles(
    dot: Instruction, batch: Sequence[str], rows: str, columns: str, contracted: str
) -> tuple[Labels, Labels]:
    """The roles of a canonical dot's operands (``[batch, rows, contracted]`` and
    ``[batch, contracted, columns]``) where its result is ``[batch, rows, columns]``."""
    lhs, rhs = (operand.array_shape.dims for operand in dot.operands)
    nb = len(dimension_lists(dot)[0])
    batch_full = _full(tuple(batch), dot.array_shape.dims[:nb])
    return (
        _full((*_present(batch_full), rows, contracted), lhs)[: nb + 2],
        _full((*_present(batch_full), contracted, columns), rhs)[: nb + 2],
    )


# -- the softmax's derivative as a polynomial --------------------------------------------------

#: A monomial: (atom, exponent) pairs, sorted. Atoms: "e", "l", "dp" and ("sum", monomial).
Monomial = tuple[tuple[object, int], ...]


@attrs.frozen
class _Polynomial:
    """A sum of monomials with float coefficients (the normal form of the derivative)."""

    terms: tuple[tuple[Monomial, float], ...]

    @staticmethod
    def of(atom: object) -> _Polynomial:
        return _Polynomial((((((atom, 1),)), 1.0),))

    @staticmethod
    def constant(value: float) -> _Polynomial:
        return _Polynomial((((), value),) if value else ())

    def _map(self) -> dict[Monomial, float]:
        return dict(self.terms)

    @staticmethod
    def _make(terms: dict[Monomial, float]) -> _Polynomial:
        return _Polynomial(tuple(sorted(((m, c) for m, c in terms.items() if c), key=repr)))

    def __add__(self, other: _Polynomial) -> _Polynomial:
        out = self._map()
        for monomial, coefficient in other.terms:
            out[monomial] = out.get(monomial, 0.0) + coefficient
        return self._make(out)

    def scaled(self, factor: float) -> _Polynomial:
        return self._make({m: c * factor for m, c in self.terms})

    def __mul__(self, other: _Polynomial) -> _Polynomial:
        out: dict[Monomial, float] = {}
        for m1, c1 in self.terms:
            for m2, c2 in other.terms:
                product = _times(m1, m2)
                out[product] = out.get(product, 0.0) + c1 * c2
        return self._make(out)

    def inverse(self) -> _Polynomial:
        """1 / self, for a single monomial (a division by a sum is no normal form)."""
        if len(self.terms) != 1:
            raise _NoMatch("the softmax's derivative divides by a sum")
        ((monomial, coefficient),) = self.terms
        return _Polynomial((((tuple((a, -n) for a, n in monomial)), 1.0 / coefficient),))

    def row_sum(self) -> _Polynomial:
        """The sum over the keys: row factors (``l`` and row sums) come out of it."""
        out: dict[Monomial, float] = {}
        for monomial, coefficient in self.terms:
            row = tuple((a, n) for a, n in monomial if a == "l" or isinstance(a, tuple))
            full = tuple((a, n) for a, n in monomial if (a, n) not in row)
            if not full:
                raise _NoMatch("the softmax's derivative sums a row's constant")
            summed = _times(row, ((("sum", full), 1),))
            out[summed] = out.get(summed, 0.0) + coefficient
        return self._make(out)

    def close_to(self, other: _Polynomial) -> bool:
        mine, theirs = self._map(), other._map()
        if set(mine) != set(theirs):
            return False
        return all(
            abs(c - theirs[m]) <= _SCALE_TOLERANCE * max(abs(c), abs(theirs[m]))
            for m, c in mine.items()
        )


def _times(a: Monomial, b: Monomial) -> Monomial:
    powers: dict[object, int] = {}
    for atom, n in (*a, *b):
        powers[atom] = powers.get(atom, 0) + n
    return tuple(sorted(((atom, n) for atom, n in powers.items() if n), key=repr))


def _expected(scale: float) -> _Polynomial:
    """``scale * (e dp / l - e sum_k(e dp) / l^2)``: the softmax's derivative."""
    e, dp, l_ = (_Polynomial.of(atom) for atom in ("e", "dp", "l"))
    first = e * dp * l_.inverse()
    second = e * (e * dp).row_sum() * (l_ * l_).inverse()
    return (first + second.scaled(-1.0)).scaled(scale)


@attrs.define
class _Derivative:
    """Reads the instructions computing the softmax's derivative as a :class:`_Polynomial`
    over the forward's ``e``, ``l``, ``p`` and one product ``dp`` (found on the way)."""

    frame: SoftmaxFrame
    mask_select_allowed: bool
    dp: Instruction | None = None
    dp_roles: tuple[str, ...] = ()

    def read(self, inst: Instruction, roles: tuple[str, ...]) -> _Polynomial:
        full = _full(roles, inst.array_shape.dims)
        if len(full) != len(inst.array_shape.dims):  # pragma: no cover - defensive
            raise _NoMatch(f"'{inst.name}' lost track of its dimensions")
        frame = self.frame
        if inst is frame.exponential:
            return self._leaf(_Polynomial.of("e"), roles, frame.roles, inst)
        if inst is frame.divide:
            e_over_l = _Polynomial.of("e") * _Polynomial.of("l").inverse()
            return self._leaf(e_over_l, roles, frame.roles, inst)
        if inst is frame.total:
            return self._leaf(_Polynomial.of("l"), roles, frame.row_roles, inst)
        value = _scalar_constant(inst)
        if value is not None:
            return _Polynomial.constant(value)
        opcode = inst.opcode
        if opcode in ("reshape", "transpose", "copy", "broadcast") or (
            opcode == "convert" and inst.operands[0].array_shape.element_type.is_floating
        ):
            below = _labels_below(inst, full)
            if below is None:
                raise _NoMatch(f"reshape '{inst.name}' regroups the derivative's dimensions")
            return self.read(inst.operands[0], _present(below))
        if opcode in ("add", "subtract", "multiply", "divide"):
            lhs, rhs = (self.read(operand, roles) for operand in inst.operands)
            if opcode == "add":
                return lhs + rhs
            if opcode == "subtract":
                return lhs + rhs.scaled(-1.0)
            if opcode == "multiply":
                return lhs * rhs
            return lhs * rhs.inverse()
        if opcode == "negate":
            return self.read(inst.operands[0], roles).scaled(-1.0)
        if opcode == "reduce" and self._sums_keys(inst):
            position = [d for d in inst.attributes["dimensions"]][0]
            operand_full = list(full)
            operand_full.insert(position, "k")
            return self.read(inst.operands[0], _present(tuple(operand_full))).row_sum()
        if opcode == "select" and self.mask_select_allowed:
            zero = _scalar_constant(inst.operands[2])
            queries = ROW_FACTORS if frame.grouped else ("q",)
            why, query = _is_causal(inst.operands[0], full, False, queries)
            if zero == 0 and not why and query == frame.query_role:
                return self.read(inst.operands[1], roles)
        if opcode == "dot" and self.dp is None:
            self.dp, self.dp_roles = inst, roles
            return _Polynomial.of("dp")
        if opcode == "dot" and inst is self.dp and roles == self.dp_roles:
            return _Polynomial.of("dp")
        raise _NoMatch(
            f"{opcode} '{inst.name}' is not part of the softmax's derivative as the fused"
            " backward call computes it"
        )

    @staticmethod
    def _leaf(
        value: _Polynomial,
        roles: tuple[str, ...],
        expected: tuple[str, ...],
        inst: Instruction,
    ) -> _Polynomial:
        if roles != expected:
            raise _NoMatch(f"'{inst.name}' is read along other dimensions than the softmax's")
        return value

    @staticmethod
    def _sums_keys(reduce: Instruction) -> bool:
        dims = list(reduce.attributes.get("dimensions", ()))
        return (
            _combiner(reduce) == "add"
            and len(dims) == 1
            and _scalar_constant(reduce.operands[1]) == 0
        )


# -- the match ---------------------------------------------------------------------------------


@attrs.frozen
class BackwardMatch:
    """One attention backward pattern (see the module docstring): the tensors the call
    reads (each below its moves, with its dimensions' roles) and the products it
    replaces, each with the roles of its result's non-unit dimensions."""

    frame: SoftmaxFrame
    q: TensorRoles
    k: TensorRoles
    v: TensorRoles
    do: TensorRoles
    #: (name: dq, dk or dv; the product; the roles of its result's non-unit dimensions)
    products: tuple[tuple[str, Instruction, tuple[str, ...]], ...]

    @property
    def scale(self) -> float:
        return self.frame.scale

    @property
    def causal(self) -> bool:
        return self.frame.causal

    @property
    def element_type(self) -> str:
        return self.frame.element_type

    def product(self, name: str) -> tuple[Instruction, tuple[str, ...]]:
        """The product computing gradient ``name`` and its result's roles."""
        return next((dot, roles) for found, dot, roles in self.products if found == name)


def _operand_roles(
    dot: Instruction, side: int, free: str, contracted: str
) -> tuple[tuple[str, ...], Labels]:
    """The batch roles of a canonical dot and the roles of operand ``side``'s dimensions
    when its free dimension is ``free`` and the one it contracts ``contracted``
    (``[batch, free, contracted]`` on the left, ``[batch, contracted, free]`` on the right)."""
    nb = len(dimension_lists(dot)[0])
    batch = tuple(None if r == "unit" else r for r in batch_labels(dot.array_shape.dims[:nb]))
    pair = (free, contracted) if side == 0 else (contracted, free)
    dims = dot.operands[side].array_shape.dims
    return batch, tuple(None if size == 1 else r for r, size in zip((*batch, *pair), dims))


def _result_roles(dot: Instruction, side: int, mine: str, theirs: str) -> tuple[str, ...]:
    """The roles of a canonical dot's result's non-unit dimensions: operand ``side``'s free
    dimension ``mine``, the other's ``theirs``."""
    nb = len(dimension_lists(dot)[0])
    batch = batch_labels(dot.array_shape.dims[:nb])
    pair = (mine, theirs) if side == 0 else (theirs, mine)
    return _present(
        tuple(None if size == 1 else r for r, size in zip((*batch, *pair), dot.array_shape.dims))
    )


def _reads(dot: Instruction, side: int, tensor: TensorRoles, free: str, contracted: str) -> bool:
    """Whether operand ``side`` of ``dot`` is ``tensor`` (perhaps widened) with ``free`` and
    ``contracted`` the roles of its free and contracted dimensions."""
    _, roles = _operand_roles(dot, side, free, contracted)
    below, present = _source(dot.operands[side], roles, frozenset({*_MOVES, "convert"}))
    return below is tensor.source and present == tensor.roles


def _products_reading(tensor: TensorRoles, uses: Uses) -> list[tuple[Instruction, int]]:
    """Every canonical dot reading ``tensor`` through moves, and which operand it is."""
    found = []
    for user, operand in _users_through(tensor.source, uses, (*_MOVES, "convert")):
        if user.opcode == "dot" and is_canonical_dot(user):
            found += [(user, side) for side in (0, 1) if user.operands[side] is operand]
    return found


def _users_through(
    inst: Instruction, uses: Uses, through: Iterable[str]
) -> Iterable[tuple[Instruction, Instruction]]:
    """``(user, operand)`` for each use of ``inst`` and of the instructions of ``through``
    above it (``operand``: which of them the user reads)."""
    through = frozenset(through)
    pending, seen = [inst], set()
    while pending:
        x = pending.pop()
        if x in seen:
            continue
        seen.add(x)
        for user in uses.users(x):
            if user.opcode in through:
                pending.append(user)
            else:
                yield user, x


def _factor_sizes_agree(tensor: TensorRoles, frame: SoftmaxFrame) -> bool:
    """Whether each grouped-query row factor of ``tensor`` has the frame's size for it."""
    sizes = dict(zip(ROW_FACTORS, frame.row_factors))
    dims = _squeezed(tensor.source.array_shape.dims)
    return all(dims[i] == sizes[r] for i, r in enumerate(tensor.roles) if r in sizes)


def _derived_from(value: Instruction, frame: SoftmaxFrame) -> bool:
    """Whether ``value`` is computed from ``frame``'s softmax (its exponentials, their sums
    or the probabilities) without passing through a product: what the derivative of that
    softmax is, and another attention's is not."""
    softmax = {frame.exponential, frame.total, frame.divide}
    pending, seen = [value], set()
    while pending:
        inst = pending.pop()
        if inst in softmax:
            return True
        if inst in seen or inst.opcode in ("dot", "parameter", "constant"):
            continue
        seen.add(inst)
        pending.extend(inst.operands)
    return False


def _rounds_to(dot: Instruction, side: int, element: ElementType) -> bool:
    """Whether ``dot`` multiplies operand ``side`` as ``element`` values: it is of that
    type, or the dot's algorithm rounds its operands to it."""
    if dot.operands[side].array_shape.element_type is element:
        return True
    return dot_compute(dot, tf32=False) == str(element)


def match_attention_backward(
    divide: Instruction, uses: Uses, target: Target
) -> BackwardMatch | str | None:
    """The backward pass of the attention whose softmax ``divide`` ends, why it is not
    taken (a string), or None where ``divide`` is no such softmax or has no backward pass
    (inference)."""
    try:
        frame = softmax_frame(divide, target)
    except _NoMatch as why:  # an attention the fused calls do not take: a verdict where the
        return str(why) if _differentiated(divide, uses) else None  # program trains it
    if frame is None:
        return None
    try:
        return _match(frame, uses)
    except _NoMatch as why:
        return str(why)


def _differentiated(divide: Instruction, uses: Uses) -> bool:
    """Whether something multiplies the softmax's probabilities or exponentials elementwise
    (its derivative does; an inference attention only sums and divides them)."""
    exponential = divide.operands[0]
    while exponential.opcode in ("convert", "copy", "reshape"):
        exponential = exponential.operands[0]
    return any(
        user.opcode == "multiply"
        for start in (divide, exponential)
        for user, _ in _users_through(start, uses, (*_MOVES, "convert"))
    )


def _dv_product(frame: SoftmaxFrame, uses: Uses) -> tuple[Instruction, int, str] | None:
    """The product reading the probabilities that contracts the queries (dv = p^T . do),
    which operand they are, and what the queries are called in it."""
    element = ElementType(frame.element_type)
    found = []
    frame_labels = _full(frame.roles, frame.divide.array_shape.dims)
    for user, operand in _users_through(frame.divide, uses, (*_MOVES, "convert")):
        if user.opcode != "dot" or not is_canonical_dot(user):
            continue
        for side in (0, 1):
            if user.operands[side] is not operand:
                continue
            above = _walk_up(frame.divide, operand, frame_labels)
            for rows in _row_labels(frame):
                _, expected = _operand_roles(user, side, "k", rows)
                if above is not None and _present(above) == _present(expected):
                    if not _rounds_to(user, side, element):
                        raise _NoMatch(f"'{user.name}' multiplies the probabilities in f32")
                    found.append((user, side, rows))
    if len(found) > 1:
        raise _NoMatch("the probabilities feed several products contracting the queries")
    return found[0] if found else None


def _walk_up(start: Instruction, top: Instruction, labels: Labels) -> Labels | None:
    """The roles of ``top``'s dimensions, ``start`` (below it through moves and converts)
    having ``labels``; None where ``top`` is not above ``start`` that way."""
    path = []
    inst = top
    while inst is not start:
        if inst.opcode not in (*_MOVES, "convert"):
            return None
        path.append(inst)
        inst = inst.operands[0]
    present = _present(labels)
    try:
        for view in reversed(path):
            present = _view_labels(view, present)
    except _NoMatch:
        return None
    return _full(present, top.array_shape.dims)


def _match(frame: SoftmaxFrame, uses: Uses) -> BackwardMatch | None:
    not_taken = (
        "a mask other than the causal one (the backward call takes none)"
        if frame.mask is not None
        else "a bias with grouped-query attention (the backward call does not take it yet)"
        if frame.grouped and frame.bias is not None
        else ""
    )
    if not_taken:
        if not _differentiated(frame.divide, uses):
            return None  # inference: the forward's rewriter says what computes it
        raise _NoMatch(not_taken)
    dv = _dv_product(frame, uses)
    if dv is None:
        return None  # inference: no backward pass reads the probabilities
    element = ElementType(frame.element_type)
    dv_dot, p_side, rows = dv
    batch, do_labels = _operand_roles(dv_dot, 1 - p_side, "e", rows)
    if _present(batch) != frame.batch_roles:
        raise _NoMatch(f"'{dv_dot.name}' does not keep the batch dimensions in order")
    do = TensorRoles(*_source(dv_dot.operands[1 - p_side], do_labels))
    products = [("dv", dv_dot, _result_roles(dv_dot, p_side, "k", "e"))]
    # dq = ds . k and dk = ds^T . q: the products of the forward's k and q with one f32
    # tensor, the softmax's derivative
    derivative: TensorRoles | None = None
    q, k = (_further(tensor) for tensor in (frame.q, frame.k))
    for name, other, free, contracted in (("dq", k, "q", "k"), ("dk", q, "k", "q")):
        found = []
        for (dot, side), row_label in (
            (product, label)
            for product in _products_reading(other, uses)
            for label in _row_labels(frame)
        ):
            free = row_label if name == "dq" else "k"
            contracted = "k" if name == "dq" else row_label
            if not _reads(dot, side, other, "d", contracted):
                continue
            _, ds_labels = _operand_roles(dot, 1 - side, free, contracted)
            ds = TensorRoles(
                *_source(dot.operands[1 - side], ds_labels, frozenset({*_MOVES, "convert"}))
            )
            if ds.source.array_shape.element_type is not ElementType.F32:
                continue
            if not _factor_sizes_agree(ds, frame):
                continue  # the row factors named the other way round
            if not _derived_from(ds.source, frame):
                continue  # another attention's derivative (k or q shared between layers)
            if not (_rounds_to(dot, 1 - side, element) and _rounds_to(dot, side, element)):
                raise _NoMatch(
                    f"'{dot.name}' multiplies the softmax's derivative in f32: the fused call"
                    f" rounds it to {element} (a program that asks for f32 keeps its products)"
                )
            found.append((dot, ds, _result_roles(dot, 1 - side, free, "d")))
        if len(found) != 1:
            raise _NoMatch(
                f"{'no' if not found else 'more than one'} product of an f32 tensor with the"
                f" attention's {'k' if name == 'dq' else 'q'} ({name})"
            )
        dot, ds, roles = found[0]
        if derivative is not None and derivative != ds:
            raise _NoMatch(f"'{dot.name}' reads another derivative than dq's")
        derivative = ds
        products.append((name, dot, roles))
    assert derivative is not None
    reader = _Derivative(frame, mask_select_allowed=frame.causal)
    polynomial = reader.read(derivative.source, derivative.roles)
    if not polynomial.close_to(_expected(frame.scale)):
        raise _NoMatch(
            f"'{derivative.source.name}' is not the softmax's derivative times the scale"
            f" {frame.scale:g}"
        )
    assert reader.dp is not None
    v, dp_do = _dp_operands(reader.dp, reader.dp_roles, element, _row_labels(frame))
    if dp_do != do:
        raise _NoMatch(f"'{reader.dp.name}' and '{dv_dot.name}' read different output gradients")
    # the forward's rewriter refuses such heads too, so both passes keep the HLO form
    check_head_sizes(role_size(q, "d"), role_size(v, "e"))
    for name, dot, _ in products:
        _check_rounded(dot, element, name, uses)
    return BackwardMatch(frame, q, k, v, do, tuple(products))


def _further(tensor: TensorRoles) -> TensorRoles:
    """``tensor`` followed below its moves as :func:`_source` follows every tensor here
    (through a merge of grouped-query attention's row factors too)."""
    return TensorRoles(*_source(tensor.source, _full(tensor.roles, tensor.source.array_shape.dims)))


def _row_labels(frame: SoftmaxFrame) -> tuple[str, ...]:
    """What the scores' rows are called in a product: the queries, or (grouped-query
    attention) both row factors merged, in either order."""
    return MERGED_ROWS if frame.grouped else ("q",)


def _dp_operands(
    dp: Instruction, roles: tuple[str, ...], element: ElementType, row_labels: Sequence[str]
) -> tuple[TensorRoles, TensorRoles]:
    """v and do, the operands of the product ``dp`` (= do . v^T, its result's roles being
    ``roles``)."""
    if not is_canonical_dot(dp):
        raise _NoMatch(f"'{dp.name}' is not canonical")
    nb = len(dimension_lists(dp)[0])
    full = _full(roles, dp.array_shape.dims)
    rows, columns = full[nb], full[nb + 1]
    batch = tuple(r for r in batch_labels(dp.array_shape.dims[:nb]) if r != "unit")
    if "k" not in (rows, columns) or not {rows, columns} - {"k"} <= set(row_labels):
        raise _NoMatch(f"'{dp.name}' is not over the queries and the keys")
    if _present(full[:nb]) != batch:
        raise _NoMatch(f"'{dp.name}' is not over the batch, the queries and the keys in order")
    tensors = {}
    for side, free in ((0, rows), (1, columns)):
        if dp.operands[side].array_shape.element_type is not element:
            raise _NoMatch(f"'{dp.name}' does not multiply {element} tensors")
        _, labels = _operand_roles(dp, side, free, "e")
        tensors["k" if free == "k" else "rows"] = TensorRoles(*_source(dp.operands[side], labels))
    return tensors["k"], tensors["rows"]


def _check_rounded(dot: Instruction, element: ElementType, name: str, uses: Uses) -> None:
    """``dot`` gives ``element`` values, or f32 ones that only moves lead to roundings to
    ``element`` (the call rounds the gradient where the program does, once)."""
    if dot.array_shape.element_type is element:
        return
    users = list(_users_through(dot, uses, _MOVES))
    if (
        dot.array_shape.element_type is not ElementType.F32
        or not users
        or any(
            user.opcode != "convert" or user.array_shape.element_type is not element
            for user, _ in users
        )
        or dot is uses.computation.root
    ):
        raise _NoMatch(
            f"{name} '{dot.name}' is used as {dot.array_shape.element_type}: the fused call"
            f" gives it in {element}"
        )


# -- the rewrite -------------------------------------------------------------------------------

#: Each tensor's dimensions as cuDNN's [S, D] after the batch.
_TENSOR_AXES = {
    "q": ("q", "d"),
    "k": ("k", "d"),
    "v": ("k", "e"),
    "do": ("q", "e"),
    "dq": ("q", "d"),
    "dk": ("k", "d"),
    "dv": ("k", "e"),
}


def _sizes(match: BackwardMatch) -> dict[str, int]:
    """The size of each role (each row factor's too, for grouped-query attention)."""
    sizes: dict[str, int] = dict(zip(ROW_FACTORS, match.frame.row_factors))
    for tensor in (match.q, match.k, match.v, match.do):
        for role, size in zip(tensor.roles, _squeezed(tensor.source.array_shape.dims)):
            sizes[role] = size
    for role in ("q", "k", "d", "e"):
        sizes.setdefault(role, 1)
    return sizes


def _axes(frame: SoftmaxFrame, name: str) -> tuple[str, ...]:
    """The roles after the batch of tensor ``name`` in cuDNN's order: ``(S, D)``, or for
    the queries' tensors of grouped-query attention ``(group, S, D)`` (the group merged
    into the heads after the last batch dimension: query head ``k * G + g`` uses key/value
    head ``k``, as cuDNN's)."""
    axes = _TENSOR_AXES[name]
    if frame.grouped and axes[0] == "q":
        return (frame.group_role, frame.query_role, axes[1])
    return axes


def _expanded(roles: Sequence[str]) -> tuple[str, ...]:
    """``roles`` with merged row factors written as the two factors, major first."""
    return tuple(
        part for role in roles for part in (role.split("+") if role in MERGED_ROWS else (role,))
    )


def _four(
    batch_sizes: Sequence[int], axes: tuple[str, ...], sizes: dict[str, int]
) -> tuple[int, ...]:
    groups = sizes[axes[0]] if len(axes) == 3 else 1
    return _four_dims(batch_sizes, sizes[axes[-2]], sizes[axes[-1]], groups)


def _in_cudnn_order(
    inserter: Inserter,
    like: Instruction,
    tensor: TensorRoles,
    axes: tuple[str, ...],
    batch: tuple[str, ...],
    sizes: dict[str, int],
    name: str,
) -> Instruction:
    """``tensor`` as ``[B, H, S, D]``: its size-1 dimensions dropped, its dimensions put in
    the batch's order and ``axes``, the batch merged."""
    x = tensor.source
    roles = _expanded(tensor.roles)
    squeezed = tuple(sizes[r] for r in roles)  # size-1 dimensions dropped, row factors split
    element = x.array_shape.element_type
    if tuple(x.array_shape.dims) != squeezed:
        x = inserter.add(
            "reshape", ArrayShape(element, squeezed), [x], like=like, suffix=f"{name}_squeezed"
        )
    wanted = (*batch, *axes)
    present = [r for r in wanted if r in roles]
    if set(roles) - set(wanted):
        raise _NoMatch(f"{name} has dimensions {roles} beyond {wanted}")
    order = tuple(roles.index(r) for r in present)
    if order != tuple(range(len(order))):
        dims = tuple(squeezed[i] for i in order)
        x = inserter.add(
            "transpose",
            ArrayShape(element, dims),
            [x],
            {"dimensions": order},
            like=like,
            suffix=f"{name}_ordered",
        )
    four = _four([sizes[b] for b in batch], axes, sizes)
    return inserter.add("reshape", ArrayShape(element, four), [x], like=like, suffix=name)


def _product_factors(
    dot: Instruction,
    four: Sequence[int],
    axes: tuple[str, ...],
    batch: tuple[str, ...],
    sizes: dict[str, int],
    roles: tuple[str, ...],
) -> view_factors.Dims | None:
    """``dot``'s dimensions as factors of the call's ``four`` ([B, H, S, D]): the moves
    :func:`_to_product` makes, followed (None where a reshape cuts a factor)."""
    labels = (*batch, *axes)
    split = tuple(sizes[r] for r in labels)
    dims: view_factors.Dims | None = view_factors.reshaped(view_factors.identity(four), split)
    order = tuple(labels.index(r) for r in _expanded(roles))
    if dims is not None:
        dims = view_factors.transposed(dims, order)
    if dims is not None:
        dims = view_factors.reshaped(dims, dot.array_shape.dims)
    return dims


def _written_rounded(
    start: Instruction,
    dims: view_factors.Dims | None,
    four: Sequence[int],
    uses: Uses,
    element: ElementType,
) -> tuple[Instruction, tuple[int, ...]] | None:
    """The last instruction of the chain that alone reads ``start`` through moves and a
    rounding to ``element`` (``start`` being f32) that holds the call's result ``four``
    permuted, of ``element``, and the order it stores it in (its dimension j is the
    result's ``order[j]``); None where there is none."""
    found = None
    x, current = start, dims
    while current is not None:
        users = uses.users(x)
        if len(users) != 1 or x is uses.computation.root:
            break
        (user,) = users
        if user.opcode == "convert":
            if user.array_shape.element_type is not element:
                break
        elif user.opcode in ("transpose", "reshape"):
            current = (
                view_factors.transposed(current, user.attributes["dimensions"])
                if user.opcode == "transpose"
                else view_factors.reshaped(current, user.array_shape.dims)
            )
        else:
            break
        x = user
        if current is not None and x.array_shape.element_type is element:
            order = view_factors.permutation_of(current, four)
            if order is not None:
                found = (x, order)
    return found


def _to_product(
    inserter: Inserter,
    like: Instruction,
    value: Instruction,
    axes: tuple[str, ...],
    batch: tuple[str, ...],
    sizes: dict[str, int],
    roles: tuple[str, ...],
    name: str,
) -> Instruction:
    """The call's ``value`` (``[B, H, S, D]``) as the product ``like`` gives it: the batch
    split, its dimensions in ``roles``'s order, size-1 dimensions where it has them, of
    its element type."""
    element = value.array_shape.element_type
    labels = (*batch, *axes)
    split = tuple(sizes[r] for r in labels)
    x = inserter.add(
        "reshape", ArrayShape(element, split), [value], like=like, suffix=f"{name}_split"
    )
    order = tuple(labels.index(r) for r in _expanded(roles))
    if order != tuple(range(len(order))):
        dims = tuple(split[i] for i in order)
        x = inserter.add(
            "transpose",
            ArrayShape(element, dims),
            [x],
            {"dimensions": order},
            like=like,
            suffix=f"{name}_ordered",
        )
    x = inserter.add(
        "reshape",
        ArrayShape(element, like.array_shape.dims),
        [x],
        like=like,
        suffix=f"{name}_shaped",
    )
    if like.array_shape.element_type is not element:
        x = inserter.add("convert", like.array_shape, [x], like=like, suffix=f"{name}_widened")
    return x


def _rewrite(inserter: Inserter, match: BackwardMatch) -> None:
    """The call, and each product it computes replaced by its part of the call's result."""
    frame = match.frame
    batch = frame.batch_roles
    sizes = _sizes(match)
    dv_dot = match.products[0][1]
    built = []
    for name, tensor in (("q", match.q), ("k", match.k), ("v", match.v), ("do", match.do)):
        built.append(
            _in_cudnn_order(
                inserter,
                dv_dot,
                tensor,
                _axes(frame, name),
                batch,
                sizes,
                f"attention_backward_{name}",
            )
        )
    stored = [_stored(x) for x in built]
    operands = [x for x, _ in stored]
    orders = {name: order for name, (_, order) in zip(("q", "k", "v", "do"), stored, strict=True)}
    if frame.bias is not None:  # the forward's, as the forward call takes it
        parts = BiasParts(frame.bias, frame.bias_labels, frame.element_type)
        batch_sizes = [sizes[b] for b in batch]
        operands.append(_bias(_Adder(inserter, dv_dot), parts, batch_sizes, sizes["q"], sizes["k"]))
    element = ElementType(match.element_type)
    # each gradient written where the program's moves (and its rounding to the element
    # type) put it, when that is all they do; else in cuDNN's order, moved back
    written: dict[str, tuple[Instruction, tuple[int, ...]] | None] = {}
    shapes = []
    for index, name in enumerate(("dq", "dk", "dv")):
        dot, roles = match.product(name)
        four = built[index].array_shape.dims  # dq like q, dk like k, dv like v
        dims = _product_factors(dot, four, _axes(frame, name), batch, sizes, roles)
        written[name] = _written_rounded(dot, dims, four, inserter.uses, element)
        found = written[name]
        if found is not None:
            orders[name] = found[1]
        shapes.append(ArrayShape(element, found[0].array_shape.dims if found else four))
    call = inserter.add(
        "custom-call",
        TupleShape(tuple(shapes)),
        operands,
        {
            "custom_call_target": QuotedString(TARGET),
            "backend_config": QuotedString(backend_config(match.scale, match.causal, orders)),
        },
        like=dv_dot,
        suffix="attention_backward",
    )
    for index, name in enumerate(("dq", "dk", "dv")):
        dot, roles = match.product(name)
        part = inserter.add(
            "get-tuple-element", shapes[index], [call], {"index": index}, like=dot, suffix=name
        )
        found = written[name]
        if found is not None:  # the call writes the program's tensor: the chain to it is dead
            inserter.replace(found[0], part)
            continue
        replacement = _to_product(
            inserter,
            dot,
            part,
            _axes(frame, name),
            batch,
            sizes,
            roles,
            f"attention_backward_{name}",
        )
        inserter.replace(dot, replacement)
        remove_instructions(inserter.uses.computation, [dot])
    _drop_unused(inserter, built)


def rewrite_attention_backward(module: Module, target: Target) -> bool:
    """Every attention backward pass ``target``'s fused-attention library takes becomes
    ``__heron$attention_backward``."""
    if not target.fused_attention_library:
        return False
    names = module_names(module)
    changed = False
    for computation in non_fusion_computations(module):
        found = matches_at(
            computation, "divide", lambda i, u: match_attention_backward(i, u, target)
        )
        for match in found:
            if isinstance(match, BackwardMatch):
                _rewrite(Inserter(computation, names), match)
                changed = True
    if changed:  # what computed the gradients is dead: the forward's rewriter reads the rest
        eliminate_dead_code(module)
    return changed


def library_attention_backward_rewriter(target: Target) -> HloPass:
    """The ``library-attention-backward-rewriter`` pass for ``target``."""
    return HloPass(
        "library-attention-backward-rewriter",
        lambda module: rewrite_attention_backward(module, target),
        "an attention's gradients (dq, dk, dv through the softmax's derivative) become one"
        " fused-attention backward call (cuDNN's flash attention backward)",
    )


def attention_backward_verdicts(module: Module, target: Target) -> list[tuple[str, str]]:
    """(the softmax's name, what computes its backward pass) for every attention backward
    pattern of a simplified ``module``: the library, or why not, for reports."""
    verdicts = []
    for computation in non_fusion_computations(module):
        uses = Uses(computation)
        for inst in computation.instructions:
            if inst.opcode != "divide":
                continue
            found = match_attention_backward(inst, uses, target)
            if isinstance(found, BackwardMatch):
                verdicts.append((inst.name, f"{target.fused_attention_library} backward"))
            elif found is not None:
                verdicts.append((inst.name, f"five GEMMs around the softmax ({found})"))
    return verdicts


def program_attention_verdicts(
    module: Module, target: Target
) -> tuple[list[tuple[str, str]], list[tuple[str, str]]]:
    """The verdicts of an uncompiled ``module``'s attentions as the rewriters see them: the
    backward passes' (:func:`attention_backward_verdicts`), then the forwards'
    (:func:`heron.compiler.library_attention.attention_verdicts`) once the backward passes
    are calls, on a copy simplified as the pipeline simplifies it (``module`` is
    unchanged)."""
    if not any(inst.opcode == "exponential" for inst in module.instructions()):
        return [], []
    from heron.hlo.parser import parse_module
    from heron.hlo.passes.manager import run_pipeline
    from heron.hlo.passes.pipelines import simplification_pipeline
    from heron.hlo.printer import print_module

    copy = parse_module(print_module(module), module.name)
    run_pipeline(copy, simplification_pipeline(layouts=False))
    backward = attention_backward_verdicts(copy, target)
    rewrite_attention_backward(copy, target)
    return backward, attention_verdicts(copy, target)


def is_library_attention_backward(inst: Instruction) -> bool:
    """Whether ``inst`` is an attention backward pass the rewriter made a library call."""
    return library_call_target(inst) == TARGET


# -- the library call ----------------------------------------------------------------------------


def attention_backward_call(inst: Instruction) -> AttentionBackwardCall:
    """The library call a ``__heron$attention_backward`` custom call is (shapes laid out)."""
    call = custom_call_of(inst)
    config = AttentionConfig(call.backend_config, ORDERED)
    orders = config.orders

    def described(
        shape: ArrayShape, order: Sequence[int]
    ) -> tuple[tuple[int, ...], tuple[int, ...]]:
        strides = dense_strides(shape.dims, shape.major_to_minor)
        return tuple(shape.dims[d] for d in order), tuple(strides[d] for d in order)

    def inverse(order: Sequence[int]) -> tuple[int, ...]:
        return tuple(list(order).index(d) for d in range(4))

    names = PAIRED_OPERANDS if config.stats else OPERANDS
    given = {
        name: described(inst.operands[i].array_shape, orders[name])
        for i, name in enumerate(names)
        if name != "stats"
    }
    bias = (
        described(inst.operands[len(names)].array_shape, (0, 1, 2, 3))
        if len(inst.operands) == len(names) + 1
        else ((), ())
    )
    stats_strides: tuple[int, ...] = ()
    if config.stats:
        stats = inst.operands[names.index("stats")].array_shape
        stats_strides = dense_strides(stats.dims, stats.major_to_minor)
    result = inst.shape
    assert isinstance(result, TupleShape)
    computed = {
        name: described(shape, inverse(orders[name]))  # type: ignore[arg-type]
        for name, shape in zip(("dq", "dk", "dv"), result.elements, strict=True)
    }
    return AttentionBackwardCall(
        q_dims=given["q"][0],
        q_strides=given["q"][1],
        k_dims=given["k"][0],
        k_strides=given["k"][1],
        v_dims=given["v"][0],
        v_strides=given["v"][1],
        do_strides=given["do"][1],
        dq_strides=computed["dq"][1],
        dk_strides=computed["dk"][1],
        dv_strides=computed["dv"][1],
        bias_dims=bias[0],
        bias_strides=bias[1],
        scale=config.scale,
        causal=config.causal,
        element_type=str(inst.operands[0].array_shape.element_type),
        o_strides=given["o"][1] if config.stats else (),
        stats_strides=stats_strides,
    )


def library_attention_backward_thunk(
    inst: Instruction,
    operands: Sequence[BufferSlice],
    results: Sequence[BufferSlice],
    host: CustomCallThunk,
    target: Target,
) -> LibraryCallThunk:
    """The library call of a ``__heron$attention_backward`` custom call, ``host`` beside it."""
    del target  # the contract depends on the call alone
    call = described_or_refused(inst, TARGET, attention_backward_call)
    return host_backed_call(LIBRARY, call, (*operands, *results), host)
