"""cuDNN's fused attention as XLA and jax call it, made heron's ``__heron$attention`` calls.

``jax.nn.dot_product_attention(..., implementation="cudnn")`` lowers for CUDA to
custom calls XLA:GPU hands to cuDNN's flash attention, and XLA's own rewriter
makes the same calls in the modules it optimizes:

- ``__cudnn$fmhaSoftmax(q, k, v)`` and ``__cudnn$fmhaScaleBiasSoftmax(q, k, v,
  bias)``: the tuple ``(o[, stats], scratch)``, ``stats`` (f32 ``[B, H, Sq]``, the
  rows' log-sum-exp) given when a backward pass reads it;
- ``__cudnn$fmhaSoftmaxBackward(q, k, v, stats, do, o)``: ``(dq, dk, dv, scratch)``;
  ``__cudnn$fmhaScaleBiasSoftmaxBackward(q, k, v, stats, do, bias, o)`` gives the
  bias's gradient too, before the scratch.

Their meaning is heron's fused attention's (:mod:`heron.hlo.custom_calls.attention`,
:mod:`heron.hlo.custom_calls.attention_backward`: the scores in f32 times
``fmha_scale``, plus the bias, the causal mask top-left aligned, the softmax,
the probabilities rounded to the element type), so each becomes that call, which
cuDNN computes on a CUDA device and the host elsewhere. Which stored dimension
of each tensor is batch, head, sequence and feature is read from the call's dot
dimension numbers (``bmm1`` for q and k, ``bmm2`` for v; the backward's four
``*_grad_gemm*`` for q, k, v and the output's gradient, whose order the forward
output shares), and becomes the heron call's ``orders``: jax's ``[B, S, H, D]``
tensors are read through strides, as cuDNN reads them. The results keep the
layouts XLA gave them. heron's backward call gives no bias gradient: where cuDNN's
does (jax asks for it whenever the attention has a bias, and drops it unless the
bias is differentiated), it is the HLO backward's (:mod:`.xla_attention_hlo`) beside the
call, of which only the bias gradient is kept (the rest is dead code once inlined).

With a padding mask (``PADDING``, ``PADDING_CAUSAL``: the sequence lengths are the
call's last two operands) or a sliding window, which heron's calls do not take as
such, the masks become the call's bias (:func:`.xla_attention_hlo.mask_bias_text`:
the call's own bias where a score is kept, jax's large negative where a mask
removes it, the causal mask with them; ``[B, H or 1, Sq, Sk]``, computed by a small
kernel beside the call), a padded query's output row is zero, and the backward
call reads the output's gradient zero on those rows: jax's ``implementation="xla"``
meaning, on cuDNN's flash attention. Only a type whose range holds that large
negative can carry it (bf16); in f16 the call becomes the attention written out as
HLO (:mod:`.xla_attention_hlo`), called and then inlined, which heron's own kernels
compute with the scores stored.

Refused by name, at the call: other masks (ALIBI), dropout, paged attention, several
segments per batch and the non-flash forms.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence

from heron.hlo.attributes import ComputationRef, QuotedString
from heron.hlo.custom_calls.attention_config import BACKWARD_TARGET as ATTENTION_BACKWARD
from heron.hlo.custom_calls.attention_config import TARGET as ATTENTION
from heron.hlo.custom_calls.attention_config import backend_config
from heron.hlo.ir import Instruction, Module
from heron.hlo.parser import parse_module
from heron.hlo.passes.rewrite import Inserter
from heron.hlo.passes.xla_attention_hlo import (
    AttentionForm,
    backward_text,
    forward_text,
    mask_bias_dims,
    mask_bias_text,
    padded_rows_zeroed_text,
)
from heron.hlo.shapes import ArrayShape, TupleShape

__all__ = ["BACKWARD_TARGETS", "FORWARD_TARGETS", "fmha_backward", "fmha_forward"]

#: The forward calls: the target, and whether it takes a bias.
FORWARD_TARGETS = {"__cudnn$fmhaSoftmax": False, "__cudnn$fmhaScaleBiasSoftmax": True}
#: The backward calls: the target, and whether it takes a bias (and gives its gradient).
BACKWARD_TARGETS = {
    "__cudnn$fmhaSoftmaxBackward": False,
    "__cudnn$fmhaScaleBiasSoftmaxBackward": True,
}
#: cuDNN's mask types heron states: whether each is causal, and whether it pads.
MASKS = {
    "NO_MASK": (False, False),
    "CAUSAL": (True, False),
    "PADDING": (False, True),
    "PADDING_CAUSAL": (True, True),
}

Refuse = Callable[[str], Exception]


def fmha_forward(
    inserter: Inserter, call: Instruction, config: dict, refuse: Refuse, module: Module
) -> list[Instruction]:
    """``call`` (a forward fused attention) as ``__heron$attention``: its output, and its
    statistics where it gives them (with padding or a window: as HLO, called)."""
    settings = _settings(config, refuse)
    biased = FORWARD_TARGETS[_target(call)]
    padded = settings["padded"]
    assert isinstance(call.shape, TupleShape)
    results = call.shape.elements[:-1]
    expected = 3 + biased + 2 * padded
    if len(call.operands) != expected or len(results) not in (1, 2):
        raise refuse(
            f"takes q, k, v{', bias' if biased else ''}{', q_len, kv_len' if padded else ''}"
            f" and gives (o[, stats], scratch); this call has {len(call.operands)} operands"
            f" and {len(results)} results"
        )
    q, k, v = (operand.array_shape for operand in call.operands[:3])
    bmm1 = _dot_numbers(settings, "bmm1_dot_dimension_numbers", refuse)
    bmm2 = _dot_numbers(settings, "bmm2_dot_dimension_numbers", refuse)
    if bmm2[0] != ((0, 1), (3,)):
        raise refuse("bmm2's left side is not the probabilities [B, H, Sq, Sk] contracted on Sk")
    orders = {
        "q": _order(q, *bmm1[0], contracted_is_feature=True, refuse=refuse),
        "k": _order(k, *bmm1[1], contracted_is_feature=True, refuse=refuse),
        "v": _order(v, *bmm2[1], contracted_is_feature=False, refuse=refuse),
    }
    stats = len(results) == 2
    shapes = [operand.array_shape for operand in call.operands]
    form = _form(settings, biased)
    masked = padded or settings["window"]
    if masked and not _holds_the_fill(q):
        text = forward_text(shapes, orders, form, stats=stats)
        return _called(inserter, call, module, text, len(results))
    operands, causal = list(call.operands[: 3 + biased]), settings["causal"]
    if masked:  # the masks as the call's bias (the library's causal mask inside it)
        dims = _score_dims(q, k, orders)
        operands[3:] = [_mask_bias(inserter, call, module, shapes, form, dims, biased)]
        causal = False
    shape = TupleShape(tuple(results)) if stats else results[0]
    attention = inserter.add(
        "custom-call",
        shape,
        operands,
        {
            "custom_call_target": QuotedString(ATTENTION),
            "backend_config": QuotedString(
                backend_config(settings["scale"], causal, orders, stats=stats)
            ),
        },
        like=call,
        suffix="heron",
    )
    values = [attention]
    if stats:
        values = [
            inserter.add(
                "get-tuple-element",
                element,
                [attention],
                {"index": n},
                like=call,
                suffix=f"heron.{n}",
            )
            for n, element in enumerate(results)
        ]
    if padded:  # a padded query's output row is zero (o is [B, H, Sq, Dv])
        values[0] = _padded_rows_zeroed(inserter, call, module, values[0], (0, 2))
    return values


def fmha_backward(
    inserter: Inserter, call: Instruction, config: dict, refuse: Refuse, module: Module
) -> list[Instruction]:
    """``call`` (a fused attention's backward pass) as ``__heron$attention_backward``
    reading the forward's output and statistics: ``(dq, dk, dv)``, and the bias's
    gradient where the call gives one (as HLO beside it); with padding or a
    window, as HLO, called."""
    settings = _settings(config, refuse)
    biased = BACKWARD_TARGETS[_target(call)]
    padded = settings["padded"]
    assert isinstance(call.shape, TupleShape)
    results = call.shape.elements[:-1]
    if len(call.operands) != 6 + biased + 2 * padded or len(results) != 3 + biased:
        raise refuse(
            f"takes q, k, v, stats, do{', bias' if biased else ''}, o"
            f"{', q_len, kv_len' if padded else ''} and gives (dq, dk, dv"
            f"{', dbias' if biased else ''}, scratch); this call has {len(call.operands)}"
            f" operands and {len(results)} results"
        )
    q, k, v, stats, do = call.operands[:5]
    bias = call.operands[5] if biased else None
    o = call.operands[5 + biased]
    numbers = {
        name: _dot_numbers(settings, f"{name}_dot_dimension_numbers", refuse)
        for name in ("bmm1_grad_gemm1", "bmm1_grad_gemm2", "bmm2_grad_gemm1", "bmm2_grad_gemm2")
    }
    # dk = ds^T . q, dq = ds . k, dv = p^T . do, dp = do . v^T: each right side is a tensor
    orders = {
        "q": _order(
            q.array_shape,
            *numbers["bmm1_grad_gemm1"][1],
            contracted_is_feature=False,
            refuse=refuse,
        ),
        "k": _order(
            k.array_shape,
            *numbers["bmm1_grad_gemm2"][1],
            contracted_is_feature=False,
            refuse=refuse,
        ),
        "do": _order(
            do.array_shape,
            *numbers["bmm2_grad_gemm1"][1],
            contracted_is_feature=False,
            refuse=refuse,
        ),
        "v": _order(
            v.array_shape, *numbers["bmm2_grad_gemm2"][1], contracted_is_feature=True, refuse=refuse
        ),
    }
    if o.array_shape.dims != do.array_shape.dims:
        raise refuse(f"the forward output is {o.array_shape}, its gradient {do.array_shape}")
    orders["o"] = orders["do"]  # cuDNN reads o as it reads do
    shapes = [operand.array_shape for operand in call.operands]
    form = _form(settings, biased)
    masked = padded or settings["window"]
    if masked and not _holds_the_fill(q.array_shape):
        gradient = results[3] if biased else None
        assert gradient is None or isinstance(gradient, ArrayShape)
        text = backward_text(shapes, orders, form, bias_gradient=gradient)
        return _called(inserter, call, module, text, len(results))
    causal = settings["causal"]
    if masked:  # the forward's masks as its bias; no gradient from a padded query's output
        dims = _score_dims(q.array_shape, k.array_shape, orders)
        bias = _mask_bias(inserter, call, module, shapes, form, dims, biased)
        causal = False
        if padded:
            order = orders["do"]
            do = _padded_rows_zeroed(inserter, call, module, do, (order[0], order[2]))
    operands = [q, k, v, o, do, stats, *([bias] if bias is not None else [])]
    gradients = TupleShape(tuple(results[:3]))
    backward = inserter.add(
        "custom-call",
        gradients,
        operands,
        {
            "custom_call_target": QuotedString(ATTENTION_BACKWARD),
            "backend_config": QuotedString(
                backend_config(settings["scale"], causal, orders, stats=True)
            ),
        },
        like=call,
        suffix="heron",
    )
    values = [
        inserter.add(
            "get-tuple-element", element, [backward], {"index": n}, like=call, suffix=f"heron.{n}"
        )
        for n, element in enumerate(results[:3])
    ]
    if biased:  # the bias gradient, which the call does not give: as HLO beside it
        text = backward_text(shapes, orders, form, bias_gradient=results[3])
        values.append(_called(inserter, call, module, text, 4)[3])
    return values


#: The element types whose range holds jax's large negative (``-0.7 * f32 max``), which
#: the masks' bias sets a removed score to: bf16 (f32's exponent); not f16, whose masked
#: scores would be ``-inf`` and a row masked whole (a padded query's) have no softmax.
_FILL_TYPES = frozenset({"bf16"})


def _holds_the_fill(q: ArrayShape) -> bool:
    """Whether the call's masks can be its bias (:func:`_mask_bias`); where not, the call
    is HLO (:mod:`.xla_attention_hlo`)."""
    return str(q.element_type) in _FILL_TYPES


def _score_dims(
    q: ArrayShape, k: ArrayShape, orders: dict[str, tuple[int, ...]]
) -> tuple[int, int, int, int]:
    """The scores' ``[B, H, Sq, Sk]``: q's batch, heads and sequence, k's sequence, each
    read from the stored dimension its order names."""
    b, h, sq = (q.dims[orders["q"][n]] for n in range(3))
    return b, h, sq, k.dims[orders["k"][2]]


def _mask_bias(
    inserter: Inserter,
    call: Instruction,
    module: Module,
    shapes: list[ArrayShape],
    form: AttentionForm,
    dims: tuple[int, int, int, int],
    biased: bool,
) -> Instruction:
    """The call's padding, window and causal masks and its own bias as one bias of the
    library call (:func:`.xla_attention_hlo.mask_bias_text`), computed beside it: cuDNN's
    flash attention keeps them, where the attention as HLO stores the scores."""
    backward = _target(call) in BACKWARD_TARGETS
    bias_at = (5 if backward else 3) if biased else None
    lengths_at = (6 if backward else 3) + biased if form.padded else None
    text = mask_bias_text(shapes, form, dims, bias_at=bias_at, lengths_at=lengths_at)
    (bias,) = _called(inserter, call, module, text, 1, suffix="mask")
    assert bias.array_shape.dims == mask_bias_dims(
        dims, shapes[bias_at] if bias_at is not None else None, form.padded
    )
    return bias


def _padded_rows_zeroed(
    inserter: Inserter,
    call: Instruction,
    module: Module,
    tensor: Instruction,
    dims: tuple[int, int],
) -> Instruction:
    """``tensor`` with the rows of padded queries zero (``dims``: its batch and sequence
    dimensions; the query lengths are the call's second-last operand)."""
    q_len = call.operands[-2]
    text = padded_rows_zeroed_text(tensor.array_shape, q_len.array_shape, *dims)
    (zeroed,) = _called(inserter, call, module, text, 1, [tensor, q_len], suffix="rows")
    return zeroed


def _form(settings: dict, biased: bool) -> AttentionForm:
    return AttentionForm(
        settings["scale"], settings["causal"], settings["window"], biased, settings["padded"]
    )


def _called(
    inserter: Inserter,
    call: Instruction,
    module: Module,
    text: str,
    results: int,
    operands: Sequence[Instruction] | None = None,
    suffix: str = "hlo",
) -> list[Instruction]:
    """A ``call`` of the module ``text`` (:mod:`.xla_attention_hlo`) on ``operands`` (default:
    ``call``'s), its computations added to ``module`` under names of their own; its
    results read. ``call-inliner`` inlines it."""
    parsed = parse_module(text, f"<{_target(call)}>")
    entry = parsed.entry
    computations = parsed.computations
    for computation in computations:
        computation.name = inserter.names.unique(f"{call.name}.{computation.name}")
        computation.is_entry = False
        for inst in computation.instructions:
            inst.name = inserter.names.unique(f"{call.name}.{inst.name}")
            inst.location = call.location
    at = module.computations.index(inserter.uses.computation)
    module.computations[at:at] = computations
    shape = entry.root_instruction.shape
    assert isinstance(shape, TupleShape)
    called = inserter.add(
        "call",
        shape,
        list(call.operands if operands is None else operands),
        {"to_apply": ComputationRef(entry.name, entry)},
        like=call,
        suffix=suffix,
    )
    return [
        inserter.add(
            "get-tuple-element",
            element,
            [called],
            {"index": n},
            like=call,
            suffix=f"{suffix}.{n}",
        )
        for n, element in enumerate(shape.elements[:results])
    ]


def _target(call: Instruction) -> str:
    target = call.attributes.get("custom_call_target")
    return target.text if isinstance(target, QuotedString) else ""


def _settings(config: dict, refuse: Refuse) -> dict:
    """The scale, whether causal, and the dot dimension numbers of ``config``, refused where
    it asks for what heron's call does not compute."""
    fmha = config.get("cudnn_fmha_backend_config")
    if not isinstance(fmha, dict):
        raise refuse("backend_config has no cudnn_fmha_backend_config")
    mask = str(fmha.get("mask_type", "NO_MASK"))
    if mask not in MASKS:
        raise refuse(
            f"mask_type {mask} (heron's fused attention masks none but causal and padding)"
        )
    if not fmha.get("is_flash_attention", False):
        raise refuse("not flash attention (is_flash_attention is false)")
    checks = (
        ("dropout_rate", 0.0, "dropout"),
        ("is_paged_attention", False, "paged attention"),
        ("max_seg_per_batch", 1, "several segments per batch"),
    )
    for key, plain, what in checks:
        value = fmha.get(key, plain)
        if value not in (plain, str(plain)):
            raise refuse(f"{what} ({key} {value}), which heron's fused attention does not compute")
    scale = fmha.get("fmha_scale", 1.0)
    if isinstance(scale, bool) or not isinstance(scale, (int, float)):
        raise refuse(f"fmha_scale is not a number: {scale!r}")
    try:
        window = int(fmha.get("sliding_window_length", 0))
    except (TypeError, ValueError):
        raise refuse("sliding_window_length is not a number") from None
    if window < 0:
        raise refuse(f"sliding_window_length {window}")
    causal, padded = MASKS[mask]
    return {**fmha, "scale": float(scale), "causal": causal, "padded": padded, "window": window}


def _dot_numbers(
    settings: dict, key: str, refuse: Refuse
) -> tuple[tuple[tuple[int, ...], tuple[int, ...]], tuple[tuple[int, ...], tuple[int, ...]]]:
    """``(batch, contracting)`` dimensions of a dot's left and right side, from ``key``."""
    numbers = settings.get(key)
    if not isinstance(numbers, dict):
        raise refuse(f"cudnn_fmha_backend_config has no {key}")

    def dims(name: str) -> tuple[int, ...]:
        try:
            return tuple(int(d) for d in numbers.get(name, []))
        except (TypeError, ValueError):
            raise refuse(f"{key}'s {name} are not dimension numbers") from None

    sides = []
    for side in ("lhs", "rhs"):
        batch, contracting = (
            dims(f"{side}_batch_dimensions"),
            dims(f"{side}_contracting_dimensions"),
        )
        if len(batch) != 2 or len(contracting) != 1:
            raise refuse(
                f"{key} has {len(batch)} batch and {len(contracting)} contracting"
                f" dimensions on its {side}, not 2 and 1"
            )
        sides.append((batch, contracting))
    return sides[0], sides[1]


def _order(
    shape: ArrayShape,
    batch: Sequence[int],
    contracting: Sequence[int],
    *,
    contracted_is_feature: bool,
    refuse: Refuse,
) -> tuple[int, ...]:
    """Which stored dimension of a 4-dimensional tensor is ``[B, H, S, D]``'s each, from a
    dot that reads it: its two batch dimensions (batch, head), its contracted one (the
    feature where ``contracted_is_feature``, else the sequence) and the one left."""
    if len(shape.dims) != 4:
        raise refuse(f"a tensor of {len(shape.dims)} dimensions ({shape}), not [B, H, S, D]")
    named = [*batch, *contracting]
    if sorted(named) != sorted(set(named)) or not all(0 <= d < 4 for d in named):
        raise refuse(f"dot dimension numbers {list(batch)}, {list(contracting)} do not fit {shape}")
    (left,) = [d for d in range(4) if d not in named]
    (contracted,) = contracting
    sequence, feature = (left, contracted) if contracted_is_feature else (contracted, left)
    return (batch[0], batch[1], sequence, feature)
