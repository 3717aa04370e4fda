"""A training step's attention calls paired: the forward call gives its softmax's statistics,
the backward call reads them and the forward's output instead of computing them again.

After the ``library-attention-backward-rewriter`` and the
``library-attention-rewriter``, a training step holds, per attention, a
forward call ``__heron$attention(q, k, v[, bias])`` and a backward call
``__heron$attention_backward(q, k, v, do[, bias])``. cuDNN's backward graph
(``sdpa_backward``) needs the forward's output ``o`` and its softmax
statistics (each query row's log-sum-exp, f32), which the backward call alone
computes again with a forward graph: two of its seven products, and a
forward's worth of memory traffic. XLA's cuDNN fMHA pair does otherwise: the
forward call emits the statistics as a second output and the backward call
reads them and the output. The ``library-attention-pairing`` pass does the
same where it can prove the two calls are of one attention:

- the same q, k, v and bias (one instruction, or structurally equal views of
  one: each rewriter builds its own reshapes, transposes and broadcasts, so
  identity is too strict and a value's meaning is what is compared), read in
  the same orders;
- the same scale and causal flag (a mask other than the causal one is part of
  the bias, compared with it);
- in the same computation (a call in a loop's body is not paired with one
  outside it: they run on other iterations' values).

The forward call then gives ``(o, stats)`` (``"stats": true``,
:mod:`heron.hlo.custom_calls.attention`) and the backward call takes ``(q, k,
v, o, do, stats[, bias])`` (:mod:`heron.hlo.custom_calls.attention_backward`).
A forward call whose output the program does not use otherwise stays (the
backward call reads it). A backward call with no forward call of its
attention (jax's ``vjp`` of attention alone, where the forward's output is
dead and the forward rewriter finds no output product; a forward the forward
rewriter did not take) keeps computing the forward itself. Several backward
calls of one attention read one forward call.
"""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np

from heron.compiler import view_factors
from heron.hlo.attributes import QuotedString
from heron.hlo.custom_calls import attention as forward_call
from heron.hlo.custom_calls import attention_backward as backward_call
from heron.hlo.custom_calls.attention import AttentionConfig, backend_config, stats_shape
from heron.hlo.custom_calls.call import custom_call_of
from heron.hlo.custom_calls.library import library_call_target
from heron.hlo.ir import Instruction, Module
from heron.hlo.passes.manager import HloPass
from heron.hlo.passes.rewrite import (
    Inserter,
    module_names,
    non_fusion_computations,
    remove_instructions,
)
from heron.hlo.shapes import ArrayShape, TupleShape
from heron.target import Target

__all__ = [
    "attention_pairing_verdicts",
    "library_attention_pairing",
    "pair_attention_calls",
    "paired_forward",
]

#: What may compute a value compared structurally (no side effects, no called computations,
#: nothing whose result is more than its operands and attributes say).
_PURE = frozenset(
    {
        "add",
        "bitcast",
        "broadcast",
        "compare",
        "concatenate",
        "constant",
        "convert",
        "copy",
        "iota",
        "multiply",
        "negate",
        "pad",
        "reshape",
        "select",
        "slice",
        "subtract",
        "transpose",
    }
)
#: How deep the structural comparison looks below an operand (a bias the rewriters build
#: from a mask is a handful of instructions; anything deeper is compared by identity).
_DEPTH = 12


def _same_value(a: Instruction, b: Instruction, depth: int = _DEPTH) -> bool:
    """Whether ``a`` and ``b`` compute one value: the same instruction, or the same pure
    operation with the same shape, attributes and literal over operands of one value."""
    if a is b:
        return True
    if depth == 0 or a.opcode != b.opcode or a.opcode not in _PURE or a.shape != b.shape:
        return False
    if a.attributes != b.attributes or len(a.operands) != len(b.operands):
        return False
    if a.opcode == "constant":
        left, right = np.asarray(a.literal), np.asarray(b.literal)
        if left.dtype != right.dtype or not np.array_equal(left, right, equal_nan=True):
            return False
    return all(_same_value(x, y, depth - 1) for x, y in zip(a.operands, b.operands, strict=True))


#: What only moves a tensor's elements (followed down to the tensor they are read from).
_VIEWS = frozenset({"copy", "reshape", "transpose"})


def _read_from(
    operand: Instruction, order: Sequence[int]
) -> tuple[Instruction, view_factors.Dims] | None:
    """The tensor a call reads ``operand`` from (below its reshapes, transposes and
    copies) and the call's ``[B, H, S, D]`` dimensions as normalised factors of it (the
    call reads ``transpose(operand, order)``); None where a reshape cuts a factor."""
    chain = []
    source = operand
    while source.opcode in _VIEWS:
        chain.append(source)
        source = source.operands[0]
    dims: view_factors.Dims | None = view_factors.identity(source.array_shape.dims)
    for step in reversed(chain):
        if dims is None:
            return None
        if step.opcode == "reshape":
            dims = view_factors.reshaped(dims, step.array_shape.dims)
        elif step.opcode == "transpose":
            dims = view_factors.transposed(dims, step.attributes["dimensions"])
    if dims is None:
        return None
    return source, view_factors.normalised(view_factors.transposed(dims, order))


def _same_tensor(
    a: Instruction, a_order: Sequence[int], b: Instruction, b_order: Sequence[int]
) -> bool:
    """Whether two calls read one tensor: operands ``a`` and ``b`` of one value read in one
    order, or views of one tensor (two rewriters reach it through other reshapes and
    transposes) whose ``[B, H, S, D]`` elements are the same elements of it."""
    if tuple(a_order) == tuple(b_order) and _same_value(a, b):
        return True
    left, right = _read_from(a, a_order), _read_from(b, b_order)
    if left is None or right is None or left[1] != right[1]:
        return False
    return _same_value(left[0], right[0])


def _config(inst: Instruction) -> AttentionConfig:
    ordered = forward_call.ORDERED
    if library_call_target(inst) == backward_call.TARGET:
        ordered = backward_call.ORDERED
    return AttentionConfig(custom_call_of(inst).backend_config, ordered)


def _same_attention(forward: Instruction, backward: Instruction) -> bool:
    """Whether ``forward`` (q, k, v[, bias]) and ``backward`` (q, k, v, do[, bias]) are
    the calls of one attention (see the module docstring)."""
    f, b = _config(forward), _config(backward)
    if f.stats or b.stats or (f.scale, f.causal) != (b.scale, b.causal):
        return False
    f_bias, b_bias = forward.operands[3:], backward.operands[4:]
    if len(f_bias) != len(b_bias):
        return False
    identity = (0, 1, 2, 3)
    if any(not _same_tensor(x, identity, y, identity) for x, y in zip(f_bias, b_bias, strict=True)):
        return False
    return all(
        _same_tensor(forward.operands[i], f.orders[name], backward.operands[i], b.orders[name])
        for i, name in enumerate("qkv")
    )


def _output_shape(forward: Instruction) -> ArrayShape:
    shape = forward.shape
    if isinstance(shape, TupleShape):
        shape = shape.elements[0]
    assert isinstance(shape, ArrayShape)
    return shape


def _inverse(order: Sequence[int]) -> tuple[int, ...]:
    return tuple(list(order).index(d) for d in range(len(order)))


def _with_stats(
    inserter: Inserter, forward: Instruction
) -> tuple[Instruction, Instruction, Instruction]:
    """``forward`` made to give ``(o, stats)``: the new call, its o and its stats (every
    user of the old call's output reads the new one's)."""
    config = _config(forward)
    o_shape = _output_shape(forward)
    q = forward.operands[0].array_shape
    b, h, sq = (q.dims[d] for d in config.orders["q"][:3])
    attributes = dict(forward.attributes)
    attributes["backend_config"] = QuotedString(
        backend_config(config.scale, config.causal, config.orders, stats=True)
    )
    stats = stats_shape(b, h, sq)
    call = inserter.add(
        "custom-call",
        TupleShape((o_shape, stats)),
        forward.operands,
        attributes,
        like=forward,
        suffix="with_stats",
    )
    o = inserter.add("get-tuple-element", o_shape, [call], {"index": 0}, like=forward, suffix="o")
    statistics = inserter.add(
        "get-tuple-element", stats, [call], {"index": 1}, like=forward, suffix="stats"
    )
    inserter.replace(forward, o)
    remove_instructions(inserter.uses.computation, [forward])
    return call, o, statistics


def _reading(
    inserter: Inserter,
    backward: Instruction,
    forward: Instruction,
    o: Instruction,
    stats: Instruction,
) -> Instruction:
    """``backward`` made to read ``forward``'s ``o`` and ``stats``."""
    config = _config(backward)
    orders = dict(config.orders)
    # the forward stores its result as transpose(o, order); the backward reads an operand
    # in cuDNN's order as transpose(stored, its order): the inverse
    orders["o"] = _inverse(_config(forward).orders["result"])
    q, k, v, do, *bias = backward.operands
    attributes = dict(backward.attributes)
    attributes["backend_config"] = QuotedString(
        backend_config(config.scale, config.causal, orders, stats=True)
    )
    call = inserter.add(
        "custom-call",
        backward.shape,
        [q, k, v, o, do, stats, *bias],
        attributes,
        like=backward,
        suffix="reading_stats",
    )
    inserter.replace(backward, call)
    remove_instructions(inserter.uses.computation, [backward])
    return call


def pair_attention_calls(module: Module) -> bool:
    """Every backward call with a forward call of its attention in its computation made to
    read that call's output and statistics (see the module docstring)."""
    names = module_names(module)
    changed = False
    for computation in non_fusion_computations(module):
        forwards = [
            inst
            for inst in computation.instructions
            if library_call_target(inst) == forward_call.TARGET and not _config(inst).stats
        ]
        backwards = [
            inst
            for inst in computation.instructions
            if library_call_target(inst) == backward_call.TARGET and not _config(inst).stats
        ]
        if not forwards or not backwards:
            continue
        inserter = Inserter(computation, names)
        #: a forward call made to give its statistics -> (the new call, o, stats)
        made: dict[int, tuple[Instruction, Instruction, Instruction]] = {}
        for backward in backwards:
            forward = next((f for f in forwards if _same_attention(f, backward)), None)
            if forward is None:
                continue
            if id(forward) not in made:
                made[id(forward)] = _with_stats(inserter, forward)
            call, o, stats = made[id(forward)]
            _reading(inserter, backward, call, o, stats)
            changed = True
    return changed


def library_attention_pairing(target: Target) -> HloPass:
    """The ``library-attention-pairing`` pass (``target`` unused: the calls exist only where
    its fused-attention library does)."""
    del target
    return HloPass(
        "library-attention-pairing",
        pair_attention_calls,
        "an attention's backward call reads its forward call's output and softmax statistics"
        " (XLA's cuDNN fMHA forward/backward pair) instead of computing the forward again",
    )


def paired_forward(backward: Instruction) -> Instruction | None:
    """The forward call whose output and statistics a backward call reads; None where it
    computes them itself."""
    if library_call_target(backward) != backward_call.TARGET or not _config(backward).stats:
        return None
    # the statistics, which only a forward call gives (its output may reach the backward
    # call through a transpose that layout assignment made a bitcast: jax's cuDNN calls)
    stats = backward.operands[5]
    while stats.opcode == "bitcast":
        stats = stats.operands[0]
    if stats.opcode != "get-tuple-element":  # pragma: no cover - read from a call's tuple
        return None
    return stats.operands[0]


def attention_pairing_verdicts(module: Module) -> list[tuple[str, str]]:
    """(the backward call's name, where its forward's output and statistics come from) for
    every attention backward call of a compiled ``module``, for reports."""
    verdicts = []
    for computation in non_fusion_computations(module):
        for inst in computation.instructions:
            if library_call_target(inst) != backward_call.TARGET:
                continue
            forward = paired_forward(inst)
            if forward is not None:
                verdicts.append(
                    (inst.name, f"reads the forward call {forward.name}'s output and statistics")
                )
            else:
                verdicts.append(
                    (
                        inst.name,
                        "computes the forward again (no forward call of the same q, k, v,"
                        " bias, scale and mask)",
                    )
                )
    return verdicts
