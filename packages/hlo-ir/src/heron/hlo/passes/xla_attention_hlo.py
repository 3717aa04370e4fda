"""cuDNN's fused attention with padding masks or a sliding window, as plain HLO.

heron's fused-attention calls (``__heron$attention`` and its backward) have no
sequence lengths and no window. A bf16 cuDNN call that masks with them (``PADDING``,
``PADDING_CAUSAL``, ``sliding_window_length``) keeps its library call with the masks
as its bias (:func:`mask_bias_text`, and :func:`padded_rows_zeroed_text` for the
padded queries' rows); in f16, whose range lacks jax's large negative, the call
becomes the attention written out as HLO, which heron's own kernels compute (two
products and a softmax: the scores are stored, unlike cuDNN's flash attention). Its
meaning, either way, is
jax's ``implementation="xla"``, which jax documents as cuDNN's: the scores'
product in f32 times the scale, plus the bias, every masked score set to
``-0.7 * f32 max`` (jax's large negative, not ``-inf``: a row of masked scores has
a softmax), the softmax in f32, the probabilities rounded to the element type
before their product with v, and the output's padded query rows zero. Padding
keeps query ``t < q_len[b]`` and key ``s < kv_len[b]``; the window keeps key ``s``
for query ``t`` where ``t - s < sliding_window_length`` (cuDNN's causal band).

The forward gives the softmax's statistics (the rows' log-sum-exp of the masked
scores) where a backward call reads them; the backward recomputes the
probabilities from them (``exp(scores - stats)``) and gives the gradients of q,
k, v and, where the call has one, the bias, as jax's differentiation of the same
function does: the output's gradient zero on padded query rows, ``ds = p * (dp -
sum_e do * o)``.

Each function returns a module's text whose entry takes the call's operands and
gives the call's results (the scratch aside) as a tuple; the pass calls it and
``call-inliner`` inlines it.
"""

from __future__ import annotations

from collections.abc import Sequence

import attrs
import numpy as np

from heron.hlo.shapes import ArrayShape

__all__ = [
    "AttentionForm",
    "backward_text",
    "forward_text",
    "mask_bias_dims",
    "mask_bias_text",
    "padded_rows_zeroed_text",
]

#: jax's stand-in for minus infinity in masked scores (``_get_large_negative`` for f32).
LARGE_NEGATIVE = float(np.float32(-0.7 * float(np.finfo(np.float32).max)))

_REDUCERS = (
    "maximum {\n  a = f32[] parameter(0)\n  b = f32[] parameter(1)\n"
    "  ROOT m = f32[] maximum(a, b)\n}\n\n"
    "add {\n  a = f32[] parameter(0)\n  b = f32[] parameter(1)\n"
    "  ROOT s = f32[] add(a, b)\n}\n\n"
)


@attrs.frozen
class AttentionForm:
    """What a cuDNN call computes besides its tensors: the scores' scale, the causal mask,
    the window's length (0: none), whether a bias is added and whether sequence lengths
    pad the batch (the call's last two operands)."""

    scale: float
    causal: bool
    window: int
    biased: bool
    padded: bool


def _dims(values: Sequence[int]) -> str:
    return ",".join(str(v) for v in values)


def _dot(name: str, shape: str, lhs: str, rhs: str, lhs_sum: int, rhs_sum: int) -> str:
    """A dot batched over ``[B, H]`` contracting one dimension of each side."""
    return (
        f"{name} = {shape} dot({lhs}, {rhs}), lhs_batch_dims={{0,1}},"
        f" lhs_contracting_dims={{{lhs_sum}}}, rhs_batch_dims={{0,1}},"
        f" rhs_contracting_dims={{{rhs_sum}}}"
    )


def _sum(name: str, shape: str, operand: str, dims: Sequence[int]) -> str:
    """A sum of ``operand`` over ``dims`` (in f32: ``zero`` and ``add`` defined)."""
    return f"{name} = {shape} reduce({operand}, zero), dimensions={{{_dims(dims)}}}, to_apply=add"


class _Lines:
    """HLO lines of one entry computation, in order."""

    def __init__(self) -> None:
        self.lines: list[str] = []
        self.parameters = 0

    def __call__(self, line: str) -> None:
        self.lines.append(f"  {line}")

    def parameter(self, name: str, shape: ArrayShape) -> str:
        self(f"{name} = {shape.without_layout()} parameter({self.parameters})")
        self.parameters += 1
        return name

    def text(self, root: str) -> str:
        return (
            "HloModule cudnn_attention\n\n"
            + _REDUCERS
            + "ENTRY attention {\n"
            + "\n".join(self.lines)
            + f"\n  ROOT {root}\n}}\n"
        )


class _Attention:
    """The shared part of the forward and the backward: operands in ``[B, H, S, D]``
    order, the keys' and values' heads repeated for grouped queries, the masked scores."""

    def __init__(self, lines: _Lines, element: str, form: AttentionForm) -> None:
        self.add, self.t = lines, element
        self.scale, self.causal, self.window = form.scale, form.causal, form.window

    def ordered(self, name: str, shape: ArrayShape, order: Sequence[int]) -> tuple[str, tuple]:
        """Parameter ``name`` in ``[B, H, S, D]`` order (a transpose where it is stored in
        another), and its dimensions so."""
        stored = self.add.parameter(f"{name}_stored", shape)
        dims = tuple(shape.dims[d] for d in order)
        if tuple(order) == (0, 1, 2, 3):
            return stored, dims
        self.add(
            f"{name} = {self.t}[{_dims(dims)}] transpose({stored}), dimensions={{{_dims(order)}}}"
        )
        return name, dims

    def heads(self, name: str, dims: tuple, h: int) -> str:
        """``name`` ``[B, Hk, S, D]`` with each head repeated for its ``h / Hk`` query heads."""
        b, hk, s, d = dims
        if hk == h:
            return name
        groups = f"{self.t}[{b},{hk},{h // hk},{s},{d}]"
        self.add(f"{name}_groups = {groups} broadcast({name}), dimensions={{0,1,3,4}}")
        self.add(f"{name}_heads = {self.t}[{b},{h},{s},{d}] reshape({name}_groups)")
        return f"{name}_heads"

    def logits(
        self,
        q: str,
        k: str,
        dims: tuple[int, int, int, int],
        bias: tuple[str, ArrayShape] | None,
        lengths: tuple[str, str] | None,
    ) -> str:
        """The masked scores, f32 ``[B, H, Sq, Sk]`` (``scores``), and the query rows' mask
        ``kept_rows`` (pred ``[B, H, Sq]``) where padded."""
        b, h, sq, sk = dims
        f32 = f"f32[{_dims(dims)}]"
        add = self.add
        add(_dot("dot", f32, q, k, 3, 3))
        add(f"scale = f32[] constant({float(np.float32(self.scale))!r})")
        add(f"scales = {f32} broadcast(scale), dimensions={{}}")
        add(f"scaled = {f32} multiply(dot, scales)")
        last = "scaled"
        if bias is not None:
            name, shape = bias
            kept = [i for i, size in enumerate(shape.dims) if size == dims[i]]
            kept_dims = _dims(shape.dims[i] for i in kept)
            add(f"bias_kept = {shape.element_type}[{kept_dims}] reshape({name})")
            add(f"bias_f32 = f32[{kept_dims}] convert(bias_kept)")
            add(f"biases = {f32} broadcast(bias_f32), dimensions={{{_dims(kept)}}}")
            add(f"biased = {f32} add({last}, biases)")
            last = "biased"
        keep = self.keep(dims, lengths)
        if lengths is not None:
            q_len = lengths[0]
            add(f"rows_iota = s32[{b},{h},{sq}] iota(), iota_dimension=2")
            add(f"row_lens = s32[{b},{h},{sq}] broadcast({q_len}), dimensions={{0}}")
            add(f"kept_rows = pred[{b},{h},{sq}] compare(rows_iota, row_lens), direction=LT")
        if keep is None:
            return last
        add(f"fill = f32[] constant({LARGE_NEGATIVE!r})")
        add(f"fills = {f32} broadcast(fill), dimensions={{}}")
        add(f"masked = {f32} select({keep}, {last}, fills)")
        return "masked"

    def keep(self, dims: Sequence[int], lengths: tuple[str, str] | None) -> str | None:
        """The scores the masks keep, pred over ``dims`` (``[B, H, Sq, Sk]``, or 1 for a
        batch or head dimension no mask depends on), or None where nothing is masked."""
        add, shape = self.add, _dims(dims)
        masks = []
        if self.causal or self.window or lengths is not None:
            add(f"row = s32[{shape}] iota(), iota_dimension=2")
            add(f"column = s32[{shape}] iota(), iota_dimension=3")
        if self.causal:
            add(f"causal = pred[{shape}] compare(row, column), direction=GE")
            masks.append("causal")
        if self.window:
            add(f"distance = s32[{shape}] subtract(row, column)")
            add(f"window = s32[] constant({self.window})")
            add(f"windows = s32[{shape}] broadcast(window), dimensions={{}}")
            add(f"in_window = pred[{shape}] compare(distance, windows), direction=LT")
            masks.append("in_window")
        if lengths is not None:
            q_len, kv_len = lengths
            add(f"q_lens = s32[{shape}] broadcast({q_len}), dimensions={{0}}")
            add(f"kv_lens = s32[{shape}] broadcast({kv_len}), dimensions={{0}}")
            add(f"query_kept = pred[{shape}] compare(row, q_lens), direction=LT")
            add(f"key_kept = pred[{shape}] compare(column, kv_lens), direction=LT")
            masks += ["query_kept", "key_kept"]
        if not masks:
            return None
        keep = masks[0]
        for n, mask in enumerate(masks[1:]):
            add(f"keep_{n} = pred[{shape}] and({keep}, {mask})")
            keep = f"keep_{n}"
        return keep

    def row_mask(self, rows: tuple[int, int, int], tail: Sequence[int], element: str) -> str:
        """``kept_rows`` as ``element`` ones and zeros, broadcast over ``tail`` dimensions."""
        b, h, sq = rows
        self.add(f"kept_rows_{element} = {element}[{b},{h},{sq}] convert(kept_rows)")
        full = (b, h, sq, *tail)
        self.add(
            f"kept_rows_{element}_all = {element}[{_dims(full)}]"
            f" broadcast(kept_rows_{element}), dimensions={{0,1,2}}"
        )
        return f"kept_rows_{element}_all"


def forward_text(
    operands: Sequence[ArrayShape],
    orders: dict[str, Sequence[int]],
    form: AttentionForm,
    *,
    stats: bool,
) -> str:
    """The forward call's module: ``(o[, stats])`` from ``q, k, v[, bias][, q_len, kv_len]``,
    o ``[B, H, Sq, Dv]`` and stats f32 ``[B, H, Sq]``."""
    lines = _Lines()
    element = str(operands[0].element_type)
    attention = _Attention(lines, element, form)
    biased, padded = form.biased, form.padded
    q, (b, h, sq, _) = attention.ordered("q", operands[0], orders["q"])
    k, kdims = attention.ordered("k", operands[1], orders["k"])
    v, vdims = attention.ordered("v", operands[2], orders["v"])
    bias = (lines.parameter("bias", operands[3]), operands[3]) if biased else None
    lengths = None
    if padded:
        first = 3 + biased
        lengths = (
            lines.parameter("q_len", operands[first]),
            lines.parameter("kv_len", operands[first + 1]),
        )
    sk, dv = kdims[2], vdims[3]
    keys, values = attention.heads(k, kdims, h), attention.heads(v, vdims, h)
    scores = attention.logits(q, keys, (b, h, sq, sk), bias, lengths)
    f32, rows = f"f32[{b},{h},{sq},{sk}]", f"f32[{b},{h},{sq}]"
    lines("lowest = f32[] constant(-inf)")
    lines(f"peak = {rows} reduce({scores}, lowest), dimensions={{3}}, to_apply=maximum")
    lines(f"peaks = {f32} broadcast(peak), dimensions={{0,1,2}}")
    lines(f"shifted = {f32} subtract({scores}, peaks)")
    lines(f"exponentials = {f32} exponential(shifted)")
    lines("zero = f32[] constant(0)")
    lines(f"total = {rows} reduce(exponentials, zero), dimensions={{3}}, to_apply=add")
    lines(f"totals = {f32} broadcast(total), dimensions={{0,1,2}}")
    lines(f"probabilities = {f32} divide(exponentials, totals)")
    lines(f"rounded = {element}[{b},{h},{sq},{sk}] convert(probabilities)")
    out = f"{element}[{b},{h},{sq},{dv}]"
    lines(_dot("product", f"f32[{b},{h},{sq},{dv}]", "rounded", values, 3, 2))
    lines(f"o_unmasked = {out} convert(product)")
    o = "o_unmasked"
    if padded:
        mask = attention.row_mask((b, h, sq), (dv,), element)
        lines(f"o = {out} multiply(o_unmasked, {mask})")
        o = "o"
    if not stats:
        return lines.text(f"result = ({out}) tuple({o})")
    lines(f"log_total = {rows} log(total)")
    lines(f"stats = {rows} add(peak, log_total)")
    return lines.text(f"result = ({out}, {rows}) tuple({o}, stats)")


def backward_text(
    operands: Sequence[ArrayShape],
    orders: dict[str, Sequence[int]],
    form: AttentionForm,
    *,
    bias_gradient: ArrayShape | None,
) -> str:
    """The backward call's module: ``(dq, dk, dv[, dbias])`` from ``q, k, v, stats, do[,
    bias], o[, q_len, kv_len]`` (cuDNN's operand order), the gradients ``[B, H, S, D]``."""
    lines = _Lines()
    element = str(operands[0].element_type)
    attention = _Attention(lines, element, form)
    biased, padded = form.biased, form.padded
    q, (b, h, sq, d) = attention.ordered("q", operands[0], orders["q"])
    k, kdims = attention.ordered("k", operands[1], orders["k"])
    v, vdims = attention.ordered("v", operands[2], orders["v"])
    stats = lines.parameter("stats", operands[3])
    do, _ = attention.ordered("do", operands[4], orders["do"])
    bias = (lines.parameter("bias", operands[5]), operands[5]) if biased else None
    o, _ = attention.ordered("o", operands[5 + biased], orders["o"])
    lengths = None
    if padded:
        first = 6 + biased
        lengths = (
            lines.parameter("q_len", operands[first]),
            lines.parameter("kv_len", operands[first + 1]),
        )
    hk, sk, dv = kdims[1], kdims[2], vdims[3]
    keys, values = attention.heads(k, kdims, h), attention.heads(v, vdims, h)
    scores = attention.logits(q, keys, (b, h, sq, sk), bias, lengths)
    f32, rows = f"f32[{b},{h},{sq},{sk}]", f"f32[{b},{h},{sq}]"
    lines(f"stats_all = {f32} broadcast({stats}), dimensions={{0,1,2}}")
    lines(f"centred = {f32} subtract({scores}, stats_all)")
    lines(f"p = {f32} exponential(centred)")
    gradient = f"{element}[{b},{h},{sq},{dv}]"
    do_kept = do
    if padded:  # the output's padded rows are zero whatever they would be: no gradient there
        mask = attention.row_mask((b, h, sq), (dv,), element)
        lines(f"do_kept = {gradient} multiply({do}, {mask})")
        do_kept = "do_kept"
    lines(_dot("dp", f32, do_kept, values, 3, 3))
    lines(f"do_f32 = f32[{b},{h},{sq},{dv}] convert({do_kept})")
    lines(f"o_f32 = f32[{b},{h},{sq},{dv}] convert({o})")
    lines(f"do_o = f32[{b},{h},{sq},{dv}] multiply(do_f32, o_f32)")
    lines("zero = f32[] constant(0)")
    lines(f"delta = {rows} reduce(do_o, zero), dimensions={{3}}, to_apply=add")
    lines(f"deltas = {f32} broadcast(delta), dimensions={{0,1,2}}")
    lines(f"dp_centred = {f32} subtract(dp, deltas)")
    lines(f"ds = {f32} multiply(p, dp_centred)")
    lines(f"scale_all = {f32} broadcast(scale), dimensions={{}}")
    lines(f"ds_scaled = {f32} multiply(ds, scale_all)")
    lines(f"ds_rounded = {element}[{b},{h},{sq},{sk}] convert(ds_scaled)")
    lines(f"p_rounded = {element}[{b},{h},{sq},{sk}] convert(p)")
    lines(_dot("dq_f32", f"f32[{b},{h},{sq},{d}]", "ds_rounded", keys, 3, 2))
    lines(f"dq = {element}[{b},{h},{sq},{d}] convert(dq_f32)")
    lines(_dot("dk_heads", f"f32[{b},{h},{sk},{d}]", "ds_rounded", q, 2, 2))
    lines(_dot("dv_heads", f"f32[{b},{h},{sk},{dv}]", "p_rounded", do_kept, 2, 2))
    results = ["dq"]
    for name, width in (("dk", d), ("dv", dv)):
        summed = f"{name}_heads"
        if hk != h:  # each key/value head's gradient: the sum over the query heads it serves
            lines(f"{name}_groups = f32[{b},{hk},{h // hk},{sk},{width}] reshape({name}_heads)")
            lines(_sum(f"{name}_summed", f"f32[{b},{hk},{sk},{width}]", f"{name}_groups", (2,)))
            summed = f"{name}_summed"
        lines(f"{name} = {element}[{b},{hk},{sk},{width}] convert({summed})")
        results.append(name)
    shapes = [
        f"{element}[{b},{h},{sq},{d}]",
        f"{element}[{b},{hk},{sk},{d}]",
        f"{element}[{b},{hk},{sk},{dv}]",
    ]
    if bias_gradient is not None:
        summed_dims = [dim for dim in (0, 1) if bias_gradient.dims[dim] == 1 and (b, h)[dim] != 1]
        kept = [n for dim, n in enumerate((b, h, sq, sk)) if dim not in summed_dims]
        source = "ds"
        if summed_dims:
            lines(_sum("dbias_summed", f"f32[{_dims(kept)}]", "ds", summed_dims))
            source = "dbias_summed"
        lines(f"dbias_narrow = {bias_gradient.element_type}[{_dims(kept)}] convert({source})")
        lines(f"dbias = {bias_gradient.without_layout()} reshape(dbias_narrow)")
        results.append("dbias")
        shapes.append(str(bias_gradient.without_layout()))
    return lines.text(f"result = ({', '.join(shapes)}) tuple({', '.join(results)})")


def mask_bias_dims(
    dims: tuple[int, int, int, int], bias: ArrayShape | None, padded: bool
) -> tuple[int, int, int, int]:
    """The dimensions of :func:`mask_bias_text`'s bias for scores of ``dims`` ``[B, H, Sq,
    Sk]``: the batch's where sequence lengths pad it or the call's bias has it, the heads'
    where the bias has them, 1 elsewhere (the library broadcasts a dimension of 1)."""
    b, h, sq, sk = dims
    batch = b if padded or (bias is not None and bias.dims[0] == b) else 1
    heads = h if bias is not None and bias.dims[1] == h else 1
    return batch, heads, sq, sk


def mask_bias_text(
    operands: Sequence[ArrayShape],
    form: AttentionForm,
    dims: tuple[int, int, int, int],
    *,
    bias_at: int | None,
    lengths_at: int | None,
) -> str:
    """A module giving the masks of ``form`` as a bias the fused-attention call adds: the
    call's bias (operand ``bias_at``, if any) where the scores are kept, and jax's large
    negative where a mask removes them (as jax's ``implementation="xla"`` sets them), of
    the element type, :func:`mask_bias_dims`. Its entry takes all the call's operands
    (``operands``; the sequence lengths at ``lengths_at`` and after) and gives ``(bias,)``.

    The library adds it to the scores in f32: a masked score is the large negative to
    the last bit wherever the score's magnitude is under 2^103 (its ulp there), so a row
    masked whole has the uniform softmax jax's has. It must be of a type that holds the
    large negative (bf16, not f16)."""
    lines = _Lines()
    element = str(operands[0].element_type)
    names = [lines.parameter(f"operand_{n}", shape) for n, shape in enumerate(operands)]
    attention = _Attention(lines, element, form)
    bias = operands[bias_at] if bias_at is not None else None
    shape = mask_bias_dims(dims, bias, lengths_at is not None)
    out = f"{element}[{_dims(shape)}]"
    if bias is not None and bias_at is not None:
        kept = [i for i, size in enumerate(bias.dims) if size == shape[i] and size != 1]
        kept_dims = _dims(bias.dims[i] for i in kept)
        lines(f"bias_kept = {element}[{kept_dims}] reshape({names[bias_at]})")
        lines(f"values = {out} broadcast(bias_kept), dimensions={{{_dims(kept)}}}")
    else:
        lines(f"nothing = {element}[] constant(0)")
        lines(f"values = {out} broadcast(nothing), dimensions={{}}")
    lengths = None
    if lengths_at is not None:
        lengths = (names[lengths_at], names[lengths_at + 1])
    keep = attention.keep(shape, lengths)
    if keep is None:
        return lines.text(f"result = ({out}) tuple(values)")
    lines(f"fill = {element}[] constant({LARGE_NEGATIVE!r})")
    lines(f"fills = {out} broadcast(fill), dimensions={{}}")
    lines(f"masked = {out} select({keep}, values, fills)")
    return lines.text(f"result = ({out}) tuple(masked)")


def padded_rows_zeroed_text(
    tensor: ArrayShape, lengths: ArrayShape, batch_dim: int, sequence_dim: int
) -> str:
    """A module taking a tensor and the query lengths ``[B]`` and giving ``(tensor,)`` with
    every query row past its batch's length zero (dimension ``sequence_dim`` against
    ``lengths`` over ``batch_dim``): the output a padded query has, and its gradient."""
    lines = _Lines()
    x = lines.parameter("tensor", tensor)
    q_len = lines.parameter("q_len", lengths)
    shape = _dims(tensor.dims)
    out = f"{tensor.element_type}[{shape}]"
    lines(f"row = s32[{shape}] iota(), iota_dimension={sequence_dim}")
    lines(f"q_lens = s32[{shape}] broadcast({q_len}), dimensions={{{batch_dim}}}")
    lines(f"kept = pred[{shape}] compare(row, q_lens), direction=LT")
    lines(f"nothing = {tensor.element_type}[] constant(0)")
    lines(f"zeros = {out} broadcast(nothing), dimensions={{}}")
    lines(f"zeroed = {out} select(kept, {x}, zeros)")
    return lines.text(f"result = ({out}) tuple(zeroed)")
