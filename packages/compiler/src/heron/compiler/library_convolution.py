"""Convolutions a DNN library computes: XLA:GPU's convolution rewriter, for cuDNN.

XLA:GPU hands every convolution to cuDNN: ``GpuConvRewriter`` makes it a
``__cudnn$convForward`` custom call before anything else can lower or fuse
it, and layout assignment gives the call the layouts cuDNN runs fastest
(NHWC input and output, KRSC filter), transposing the operands where they
differ. heron does the same for the convolutions its Target's DNN library
takes (``Target.dnn_library``: cuDNN on CUDA); every other convolution is
still lowered to im2col and a GEMM (``heron.hlo.passes.convolution_to_dot``),
as on a target without one.

- :func:`convolution_verdict` decides, once, whether the library takes a
  convolution, and says why not: f32, f16 or bf16 (all three tensors one
  type), 1 to 3 spatial dimensions, and either a
  forward convolution (no base dilation, window reversal or negative padding:
  cuDNN's ``conv_fprop``) or the data gradient of a strided one (jax's input
  gradient: the output gradient base-dilated by the stride, convolved with the
  reversed filter, window stride 1, one feature group: ``conv_dgrad``, the
  forward's padding ``dilation * (window - 1)`` less the gradient's, which must
  not be negative; XLA's ``MatchBackwardInput`` also takes a 1x1 or constant
  filter unreversed), or any other base-dilated convolution (jax's
  ``conv_transpose`` without ``transpose_kernel``: flax, haiku and equinox
  ``ConvTranspose``, whose filter is not reversed) as XLA does: a forward call
  on the input padded and dilated by a ``pad``, or the weight gradient of a
  forward convolution (jax's kernel gradient: the input, its batch contracted
  as a feature, convolved with the output gradient window-dilated by the
  stride: ``conv_wgrad``).
  Which convolutions are weight gradients is XLA's rule
  (:func:`weight_gradient_padding`): mathematically any convolution is both,
  so the shapes decide. A convolution with ``batch_group_count`` G > 1 (jax's
  kernel gradient of a grouped or depthwise forward convolution) is always a
  weight gradient: ``conv_wgrad`` with G groups (XLA rewrites it into a larger
  feature-grouped forward convolution instead), or, where it has no weight
  gradient's form (a strided kernel gradient), a forward convolution with G
  feature groups of its input's batch groups, as XLA's last resort.
- The ``library-convolution-rewriter`` pass (first in the GPU pipeline)
  transposes a taken convolution's operands into cuDNN's preferred order
  (``b01f`` input, ``o01i`` filter: NHWC and KRSC once the layouts are
  row-major; a data gradient's filter unreversed, ``i01o``, its window saying
  ``rhs_reversal`` instead; a weight gradient's input and output gradient
  NHWC, its result KRSC, ``f01b_i01o->f01b``) and makes it the custom call
  ``__heron$convolution``
  (:mod:`heron.hlo.custom_calls.convolution`), whose result is transposed back
  into the order the program asked for. Transposes that change nothing are
  folded away by the simplifier, so a flax convolution (``b01f_01io->b01f``)
  gets one small filter transpose, as in XLA.
- :func:`convolution_call` reads the custom call, after layout assignment, as
  the library call's contract (:class:`heron.runtime.core.convolution.
  ConvolutionCall`): dimensions in cuDNN's order and element strides from the
  HLO layouts, so any layout is described rather than copied.
- :func:`library_convolution_thunk` is the thunk: the library call, with the
  host computation of the custom call as its fallback where the device has no
  cuDNN (correct, and slow: the executor reports the fallback and its reason).
"""

from __future__ import annotations

from collections.abc import Sequence

import attrs
import numpy as np

from heron.compiler.library_thunks import described_or_refused, host_backed_call
from heron.hlo.attributes import (
    ConvDimensionNumbers,
    PadDim,
    PaddingConfig,
    QuotedString,
    Window,
)
from heron.hlo.custom_calls.call import custom_call_of
from heron.hlo.custom_calls.convolution import (
    TARGET,
    activation_of,
    as_convolution,
    backend_config,
)
from heron.hlo.custom_calls.library import library_call_target
from heron.hlo.dot_precision import dot_compute
from heron.hlo.ir import Instruction, Module
from heron.hlo.passes.manager import HloPass
from heron.hlo.passes.rewrite import (
    Inserter,
    module_names,
    non_fusion_computations,
    remove_instructions,
)
from heron.hlo.shapes import ArrayShape
from heron.runtime.core.convolution import (
    ELEMENT_TYPES,
    ConvolutionCall,
    dense_strides,
)
from heron.runtime.core.thunks import BufferSlice, CustomCallThunk, LibraryCallThunk
from heron.target import Target

__all__ = [
    "convolution_call",
    "convolution_verdict",
    "convolution_verdicts",
    "is_library_convolution",
    "library_mode",
    "library_convolution_rewriter",
    "library_convolution_thunk",
    "rewrite_convolutions",
    "weight_gradient_padding",
]

#: The library name a convolution call's thunk carries (the runtime's device picks the
#: implementation: cuDNN on CUDA, numpy on an interpreter built to offer it).
LIBRARY = "dnn"


def convolution_verdict(conv: Instruction, target: Target) -> str:
    """``""`` where ``target``'s DNN library computes ``conv``, else why it does not."""
    if not target.dnn_library:
        return f"{target.name} has no DNN library (convolutions become im2col and a GEMM)"
    numbers = conv.attributes.get("dim_labels")
    if conv.opcode != "convolution" or not isinstance(numbers, ConvDimensionNumbers):
        return "not a convolution with dim_labels"
    types = {str(operand.shape.element_type) for operand in conv.operands}
    types.add(str(conv.shape.element_type))
    if len(types) != 1 or not types <= set(ELEMENT_TYPES):
        return (
            f"{target.dnn_library} takes one element type of {', '.join(ELEMENT_TYPES)} for"
            f" input, filter and output, not {' x '.join(sorted(types))}"
        )
    spatial = len(numbers.input_spatial)
    if not 1 <= spatial <= 3:
        return f"{spatial} spatial dimensions ({target.dnn_library}: 1 to 3)"
    window = conv.attributes.get("window")
    dims = list(window.dims) if isinstance(window, Window) else []
    if int(conv.attributes.get("batch_group_count", 1)) != 1:
        if weight_gradient_padding(conv) is not None:
            return ""
        # XLA's last resort: a forward call with the batch groups made feature groups
        if int(conv.attributes.get("feature_group_count", 1)) != 1 or any(
            d.base_dilation != 1 or d.window_reversal or d.pad_low < 0 or d.pad_high < 0
            for d in dims
        ):
            return (
                "batch_group_count > 1 with neither a grouped weight gradient's form nor a"
                " forward one (feature groups, a base-dilated or reversed window, or"
                " negative padding)"
            )
        return ""
    if any(d.base_dilation != 1 for d in dims):
        why = _data_gradient_verdict(conv, numbers, dims)
        if why and any(d.window_reversal for d in dims):
            return f"{why}, and a reversed window (no forward form either)"
        # not a data gradient: XLA's forward form, the base dilation padded into the input
        return ""
    if weight_gradient_padding(conv) is not None:
        return ""
    for dim in dims:
        if dim.window_reversal:
            return "a reversed window"
        if dim.pad_low < 0 or dim.pad_high < 0:
            return "negative padding"
    return ""


def _reversed_filter(conv: Instruction) -> Instruction | None:
    """The filter ``conv`` reads reversed over every spatial dimension (jax's
    ``rev(w)``, or a window that says ``rhs_reversal``), else None."""
    numbers: ConvDimensionNumbers = conv.attributes["dim_labels"]
    rhs = conv.operands[1]
    window = conv.attributes.get("window")
    dims = list(window.dims) if isinstance(window, Window) else []
    flags = {d.window_reversal for d in dims}
    if flags == {True}:
        return rhs
    spatial = set(numbers.kernel_spatial)
    if flags <= {False} and rhs.opcode == "reverse":
        if set(rhs.attributes.get("dimensions", ())) == spatial:
            return rhs.operands[0]
    return None


def _data_gradient_filter(conv: Instruction) -> tuple[Instruction, bool] | None:
    """The forward filter a data-gradient call on ``conv`` (base-dilated) reads, and
    whether it must be reversed first; None where ``conv`` has no data gradient's form.

    XLA's ``MatchBackwardInput`` takes a filter reversed over every spatial dimension,
    and, since reversing them changes nothing or is folded away, a 1x1 window or a
    constant filter (for the constant it inserts the reverse, which the cuDNN call
    undoes: the double reverse is a no-op). Any other unreversed filter (jax's
    ``conv_transpose`` without ``transpose_kernel``: flax, haiku and equinox
    ``ConvTranspose``) is no match: XLA makes it a forward convolution instead."""
    rhs = _reversed_filter(conv)
    if rhs is not None:
        return rhs, False
    window = conv.attributes.get("window")
    dims = list(window.dims) if isinstance(window, Window) else []
    if any(d.window_reversal for d in dims):
        return None
    if all(d.size == 1 for d in dims):
        return conv.operands[1], False
    if conv.operands[1].opcode == "constant":
        return conv.operands[1], True
    return None


def _forward_padding(conv: Instruction, dims: Sequence) -> list[tuple[int, int]]:
    """The forward convolution's padding that ``conv`` (a data gradient: the output
    gradient base-dilated by the stride, convolved with the reversed filter) stands for:
    ``dilation * (window - 1)`` less the gradient's own padding, on each side."""
    return [
        (
            d.window_dilation * (d.size - 1) - d.pad_low,
            d.window_dilation * (d.size - 1) - d.pad_high,
        )
        for d in dims
    ]


def _data_gradient_verdict(conv: Instruction, numbers: ConvDimensionNumbers, dims: Sequence) -> str:
    """``""`` where ``conv`` is the data gradient of a strided forward convolution, which
    cuDNN computes as ``conv_dgrad``, else why not."""
    if int(conv.attributes.get("feature_group_count", 1)) != 1:
        return "base (lhs) dilation with feature groups (a grouped data gradient)"
    if any(d.stride != 1 for d in dims):
        return "base (lhs) dilation with a window stride (no data gradient's form)"
    if _data_gradient_filter(conv) is None:
        return "base (lhs) dilation without a reversed, 1x1 or constant filter"
    if any(lo < 0 or hi < 0 for lo, hi in _forward_padding(conv, dims)):
        return "base (lhs) dilation whose forward padding would be negative"
    return ""


def _looks_like_forward(conv: Instruction, numbers: ConvDimensionNumbers) -> bool:
    """XLA's test for a forward convolution: batch and output features carried through
    unchanged and a window no larger than the output (a weight gradient swaps batch and
    features, and its window is the forward's output)."""
    lhs, rhs = (operand.shape.dims for operand in conv.operands)
    out = conv.shape.dims
    return (
        lhs[numbers.input_batch] == out[numbers.output_batch]
        and rhs[numbers.kernel_output_feature] == out[numbers.output_feature]
        and all(
            rhs[k] <= out[o]
            for k, o in zip(numbers.kernel_spatial, numbers.output_spatial, strict=True)
        )
    )


def _inserts_one_spatial_dimension(conv: Instruction, numbers: ConvDimensionNumbers) -> bool:
    """Whether the filter is a reshape inserting one size-1 spatial dimension (a 1-D
    convolution written as a 2-D one, where one "small" window dimension says nothing)."""
    rhs = conv.operands[1]
    if len(numbers.kernel_spatial) != 2 or rhs.opcode != "reshape":
        return False
    before, after = list(rhs.operands[0].shape.dims), list(rhs.shape.dims)
    ones = [d for d in numbers.kernel_spatial if after[d] == 1]
    return len(after) == len(before) + 1 and any(after[:d] + after[d + 1 :] == before for d in ones)


def weight_gradient_padding(conv: Instruction) -> list[tuple[int, int]] | None:
    """The forward convolution's padding where ``conv`` is taken as a weight gradient
    (cuDNN's ``conv_wgrad``), else None.

    Any convolution with one feature group, unit window strides and no base dilation
    or reversal can be read as a weight gradient (its ``batch_group_count`` the
    forward's feature groups): the input's batch is the forward's
    features, its features the forward's batch, the filter the forward's output
    gradient, the window the forward's output and the window dilation its stride.
    Which reading is faster is a guess from the shapes, XLA:GPU's
    (``MatchBackwardFilter``): not where batch and output features pass through and
    the window is no larger than the output, and not where the window is smaller
    than the output in more than one dimension (in one, for a 1-D convolution,
    unless written as 2-D), unless the window is dilated (a strided forward's
    gradient); one with batch groups always is. The forward's high padding is any
    value that leaves its output as large as the window (XLA prefers the low
    padding, else the nearest): a weight gradient whose padding would be negative
    stays a forward convolution.
    """
    numbers = conv.attributes.get("dim_labels")
    window = conv.attributes.get("window")
    if not isinstance(numbers, ConvDimensionNumbers) or not isinstance(window, Window):
        return None
    if int(conv.attributes.get("feature_group_count", 1)) != 1:
        return None
    dims = window.dims
    if any(d.stride != 1 or d.base_dilation != 1 or d.window_reversal for d in dims):
        return None
    if any(d.pad_low < 0 for d in dims):
        return None
    if int(conv.attributes.get("batch_group_count", 1)) != 1:
        # only a grouped forward's kernel gradient has batch groups: no guess to make
        return _weight_gradient_forward_padding(conv, numbers, dims)
    if _looks_like_forward(conv, numbers):
        return None
    rhs, out = conv.operands[1].shape.dims, conv.shape.dims
    small = sum(
        rhs[k] <= out[o]
        for k, o in zip(numbers.kernel_spatial, numbers.output_spatial, strict=True)
    )
    one_small_says_forward = small == 1 and not _inserts_one_spatial_dimension(conv, numbers)
    dilated = any(d.window_dilation != 1 for d in dims)
    if (not dims or small > 1 or one_small_says_forward) and not dilated:
        return None
    return _weight_gradient_forward_padding(conv, numbers, dims)


def _weight_gradient_forward_padding(
    conv: Instruction, numbers: ConvDimensionNumbers, dims: Sequence
) -> list[tuple[int, int]] | None:
    """The padding of the forward convolution whose weight gradient ``conv`` is (read as
    one: see :func:`weight_gradient_padding`), None where the high padding is negative."""
    lhs, out = conv.operands[0].shape.dims, conv.shape.dims
    padding = []
    for d, spatial, o in zip(dims, numbers.input_spatial, numbers.output_spatial, strict=True):
        # the forward: input lhs[spatial], window out[o], stride d.window_dilation,
        # output d.size; its last window ends at `reach`
        stride = d.window_dilation
        reach = out[o] + (d.size - 1) * stride
        lowest = reach - lhs[spatial] - d.pad_low
        highest = lowest + stride - 1
        high = min(max(d.pad_low, lowest), highest)
        if high < 0:
            return None
        padding.append((d.pad_low, high))
    return padding


def convolution_verdicts(module: Module, target: Target) -> list[tuple[str, str]]:
    """(convolution name, what computes it) for every convolution of an uncompiled
    ``module``: ``cudnn`` or ``im2col and a GEMM (why not the library)``, for reports."""
    verdicts = []
    for inst in module.instructions():
        if inst.opcode == "convolution":
            why = convolution_verdict(inst, target)
            verdicts.append(
                (inst.name, f"im2col and a GEMM ({why})" if why else target.dnn_library)
            )
    return verdicts


def is_library_convolution(inst: Instruction) -> bool:
    """Whether ``inst`` is a convolution the rewriter made a library custom call: of
    heron's library calls (:func:`heron.hlo.custom_calls.library.library_call_target`)
    the one whose target is ``__heron$convolution``."""
    return library_call_target(inst) == TARGET


# -- the pass ----------------------------------------------------------------------------------


def _canonical_labels(spatial: int, mode: str) -> ConvDimensionNumbers:
    """The labels of a library convolution in cuDNN's layouts, for ``spatial`` spatial
    dimensions: ``b01f_o01i->b01f`` for a forward convolution (NHWC, KRSC, NHWC); for a
    data gradient ``b01f_i01o->b01f`` (its kernel's input features are the forward's K);
    for a weight gradient ``f01b_i01o->f01b`` (the forward's x and y NHWC, its w KRSC)."""
    inner = tuple(range(1, spatial + 1))
    last = spatial + 1
    if mode == "weight_gradient":
        return ConvDimensionNumbers(last, 0, inner, 0, last, inner, last, 0, inner)
    return ConvDimensionNumbers(
        input_batch=0,
        input_feature=last,
        input_spatial=inner,
        kernel_input_feature=last if mode == "forward" else 0,
        kernel_output_feature=0 if mode == "forward" else last,
        kernel_spatial=inner,
        output_batch=0,
        output_feature=last,
        output_spatial=inner,
    )


def library_mode(inst: Instruction) -> str:
    """What a ``__heron$convolution`` call computes: ``forward``, ``data_gradient`` or
    ``weight_gradient`` (the contract's ``mode``)."""
    conv = as_convolution(custom_call_of(inst))
    window = conv.attributes.get("window")
    dims = list(window.dims) if isinstance(window, Window) else []
    return _canonical_mode(conv.attributes["dim_labels"], dims)


def _canonical_mode(numbers: ConvDimensionNumbers, dims: Sequence) -> str:
    """What a library convolution (in :func:`_canonical_labels`' form) computes."""
    if any(d is not None and d.base_dilation != 1 for d in dims):
        return "data_gradient"
    return "weight_gradient" if numbers.input_batch != 0 else "forward"


def _dilated_input(inserter: Inserter, conv: Instruction) -> Instruction:
    """``conv``'s input padded and base-dilated as the convolution reads it: a ``pad``
    with the window's padding on the edges and ``base_dilation - 1`` zeros between
    elements (XLA's ``GpuConvPaddingLegalization`` inserts the same before a forward
    cuDNN call, which then has neither padding nor base dilation)."""
    numbers: ConvDimensionNumbers = conv.attributes["dim_labels"]
    lhs = conv.operands[0]
    config = [PadDim(0, 0)] * len(lhs.shape.dims)
    dims = list(lhs.shape.dims)
    for d, axis in zip(conv.attributes["window"].dims, numbers.input_spatial, strict=True):
        config[axis] = PadDim(d.pad_low, d.pad_high, d.base_dilation - 1)
        size = dims[axis]
        dims[axis] = size + max(size - 1, 0) * (d.base_dilation - 1) + d.pad_low + d.pad_high
    element = lhs.shape.element_type
    zero = inserter.add(
        "constant",
        ArrayShape(element, ()),
        like=conv,
        suffix="zero",
        literal=np.zeros((), element.numpy_dtype),
    )
    return inserter.add(
        "pad",
        ArrayShape(element, tuple(dims)),
        [lhs, zero],
        {"padding": PaddingConfig(tuple(config))},
        like=conv,
        suffix="input_dilated",
    )


def _feature_grouped(inserter: Inserter, conv: Instruction) -> Instruction:
    """``conv`` (``batch_group_count`` G, read as no weight gradient) as the forward
    convolution XLA's rewriter makes of it (``ConvertBatchGroupedToFeatureGroupedConvolution``):
    the input's batch ``N`` split into ``[G, N / G]`` and G moved in front of the features,
    ``[G, C]`` merged into ``G * C`` features, the convolution then one with G feature
    groups and no batch groups (group g of its output features reads batch group g, as
    before). The result is not added to the computation: :func:`_rewrite` reads it."""
    numbers: ConvDimensionNumbers = conv.attributes["dim_labels"]
    groups = int(conv.attributes["batch_group_count"])
    lhs = conv.operands[0]
    element = lhs.shape.element_type
    dims = list(lhs.shape.dims)
    batch, feature = numbers.input_batch, numbers.input_feature
    split = [*dims[:batch], groups, dims[batch] // groups, *dims[batch + 1 :]]
    value = inserter.add(
        "reshape", ArrayShape(element, tuple(split)), [lhs], like=conv, suffix="batch_groups"
    )
    # G (at `batch`) moved just before the features (at `feature` + 1 once split)
    rest = [d for d in range(len(split)) if d != batch]
    order = rest.copy()
    order.insert(rest.index(feature + (1 if feature > batch else 0)), batch)
    value = inserter.add(
        "transpose",
        ArrayShape(element, tuple(split[d] for d in order)),
        [value],
        {"dimensions": tuple(order)},
        like=conv,
        suffix="groups_to_features",
    )
    merged = [*dims]
    merged[batch] //= groups
    merged[feature] *= groups
    value = inserter.add(
        "reshape", ArrayShape(element, tuple(merged)), [value], like=conv, suffix="grouped_input"
    )
    attributes = dict(conv.attributes)
    attributes.pop("batch_group_count")
    attributes["feature_group_count"] = groups
    return Instruction(
        conv.name,
        "convolution",
        conv.shape,
        [value, conv.operands[1]],
        attributes,
        location=conv.location,
    )


def _rewrite(inserter: Inserter, conv: Instruction) -> Instruction:
    if (
        int(conv.attributes.get("batch_group_count", 1)) != 1
        and weight_gradient_padding(conv) is None
    ):
        conv = _feature_grouped(inserter, conv)
    numbers: ConvDimensionNumbers = conv.attributes["dim_labels"]
    lhs, rhs = conv.operands
    window = conv.attributes.get("window")
    dims = list(window.dims) if isinstance(window, Window) else []
    dilated = any(d.base_dilation != 1 for d in dims)
    gradient = dilated and not _data_gradient_verdict(conv, numbers, dims)
    mode = "data_gradient" if gradient else "forward"
    if not dilated and weight_gradient_padding(conv) is not None:
        mode = "weight_gradient"
    if gradient:
        # cuDNN's dgrad takes the forward filter: read it unreversed, and say in the
        # window that the convolution reverses it (the host computes exactly that)
        found = _data_gradient_filter(conv)
        assert found is not None  # the verdict checked it
        rhs, reverse = found
        if reverse:  # a constant: reversed here, reversed back by the call (XLA's)
            spatial = tuple(numbers.kernel_spatial)
            rhs = inserter.add(
                "reverse", rhs.shape, [rhs], {"dimensions": spatial}, like=conv, suffix="filter"
            )
        window = Window(tuple(attrs.evolve(d, window_reversal=True) for d in dims))
    elif dilated:
        # no data gradient's form (jax's conv_transpose): XLA's forward convolution of
        # the input padded and dilated by a pad, the window left without either
        lhs = _dilated_input(inserter, conv)
        window = Window(
            tuple(attrs.evolve(d, pad_low=0, pad_high=0, base_dilation=1) for d in dims)
        )

    def transpose(operand: Instruction, order: Sequence[int], suffix: str) -> Instruction:
        if list(order) == list(range(len(order))):
            return operand
        shape = ArrayShape(operand.shape.element_type, tuple(operand.shape.dims[d] for d in order))
        return inserter.add(
            "transpose", shape, [operand], {"dimensions": tuple(order)}, like=conv, suffix=suffix
        )

    batch, feature = numbers.input_batch, numbers.input_feature
    first, last = numbers.kernel_output_feature, numbers.kernel_input_feature
    out_first, out_last = numbers.output_batch, numbers.output_feature
    if mode == "data_gradient":  # cuDNN's filter is the forward's, K first: the input features
        first, last = last, first
    if mode == "weight_gradient":  # the forward's x, y (NHWC: the filter's i first) and w (KRSC)
        batch, feature, out_first, out_last = feature, batch, out_last, out_first
        first, last = last, first
    x = transpose(lhs, (batch, *numbers.input_spatial, feature), "input_nhwc")
    w = transpose(rhs, (first, *numbers.kernel_spatial, last), "filter_krsc")
    out_order = (out_first, *numbers.output_spatial, out_last)
    canonical = ArrayShape(conv.shape.element_type, tuple(conv.shape.dims[d] for d in out_order))
    attributes = {
        name: value for name, value in conv.attributes.items() if name != "dim_labels"
    } | {"dim_labels": _canonical_labels(len(numbers.input_spatial), mode)}
    if dilated:
        attributes["window"] = window
    described = Instruction("convolution", "convolution", canonical, [x, w], attributes)
    call = inserter.add(
        "custom-call",
        canonical,
        [x, w],
        {
            "custom_call_target": QuotedString(TARGET),
            "backend_config": QuotedString(backend_config(described)),
        },
        like=conv,
    )
    # out_order[i] is the program's dimension that canonical dimension i is
    back = [out_order.index(d) for d in range(len(out_order))]
    return transpose(call, back, "output")


def rewrite_convolutions(module: Module, target: Target) -> bool:
    """Every convolution ``target``'s DNN library takes becomes ``__heron$convolution``."""
    if not target.dnn_library:
        return False
    names = module_names(module)
    changed = False
    for computation in non_fusion_computations(module):
        taken = [
            inst
            for inst in computation.instructions
            if inst.opcode == "convolution" and not convolution_verdict(inst, target)
        ]
        for conv in taken:
            inserter = Inserter(computation, names)
            inserter.replace(conv, _rewrite(inserter, conv))
            remove_instructions(computation, [conv])
            changed = True
    return changed


def library_convolution_rewriter(target: Target) -> HloPass:
    """The ``library-convolution-rewriter`` pass for ``target``."""
    return HloPass(
        "library-convolution-rewriter",
        lambda module: rewrite_convolutions(module, target),
        "a convolution the DNN library takes becomes its custom call (XLA's GpuConvRewriter)",
    )


# -- the library call --------------------------------------------------------------------------


def convolution_call(inst: Instruction, target: Target) -> ConvolutionCall:
    """The library call a ``__heron$convolution`` custom call is (its shapes laid out)."""
    conv = as_convolution(custom_call_of(inst))
    numbers: ConvDimensionNumbers = conv.attributes["dim_labels"]
    lhs, rhs = (operand.array_shape for operand in inst.operands[:2])
    out = inst.array_shape

    def described(shape: ArrayShape, order: Sequence[int]) -> tuple[list[int], list[int]]:
        strides = dense_strides(shape.dims, shape.major_to_minor)
        dims = [shape.dims[d] for d in order]
        steps = [strides[d] for d in order]
        if len(order) == 3:  # cuDNN's tensors have at least two spatial dimensions
            dims.insert(2, 1)
            steps.insert(2, steps[2] * dims[3])
        return dims, steps

    window = conv.attributes.get("window")
    dims = list(window.dims) if isinstance(window, Window) else []
    if not dims:
        dims = [None] * len(numbers.input_spatial)

    def per_dim(name: str, default: int) -> list[int]:
        values = [default if d is None else getattr(d, name) for d in dims]
        return [default, *values] if len(values) == 1 else values

    def sides(padding: Sequence[tuple[int, int]]) -> tuple[list[int], list[int]]:
        low, high = [lo for lo, _ in padding], [hi for _, hi in padding]
        return ([0, *low], [0, *high]) if len(low) == 1 else (low, high)

    spatial = numbers.input_spatial
    lhs_order = (numbers.input_batch, numbers.input_feature, *spatial)
    kernel = (numbers.kernel_output_feature, numbers.kernel_input_feature)
    kernel_swapped = (*reversed(kernel), *numbers.kernel_spatial)
    out_order = (numbers.output_batch, numbers.output_feature, *numbers.output_spatial)
    mode = _canonical_mode(numbers, dims)
    if mode == "forward":
        x, y = described(lhs, lhs_order), described(out, out_order)
        w = described(rhs, (*kernel, *numbers.kernel_spatial))
        low, high = per_dim("pad_low", 0), per_dim("pad_high", 0)
        stride, dilation = per_dim("stride", 1), per_dim("window_dilation", 1)
    elif mode == "data_gradient":
        # the data gradient of a forward convolution: its x is this result, its y this
        # lhs, its filter [K, C, ...] this rhs read with input and output features swapped
        x, y, w = (
            described(out, out_order),
            described(lhs, lhs_order),
            described(rhs, kernel_swapped),
        )
        low, high = sides(_forward_padding(conv, dims))
        stride, dilation = per_dim("base_dilation", 1), per_dim("window_dilation", 1)
    else:
        # the weight gradient of a forward convolution: its x is this lhs (batch and
        # features swapped), its y this rhs, its w this result ([K, R, S, C])
        x = described(lhs, (numbers.input_feature, numbers.input_batch, *spatial))
        y = described(rhs, kernel_swapped)
        w = described(out, (numbers.output_feature, numbers.output_batch, *numbers.output_spatial))
        padding = _weight_gradient_forward_padding(conv, numbers, dims)
        assert padding is not None  # the rewriter took it as one
        low, high = sides(padding)
        stride, dilation = per_dim("window_dilation", 1), per_dim("stride", 1)
    groups = conv.attributes.get(
        "batch_group_count" if mode == "weight_gradient" else "feature_group_count", 1
    )
    # a forward call's residual (after its bias), laid out as it is: y's dims, its strides
    residuals = [o.array_shape for o in inst.operands[2:] if len(o.array_shape.dims) > 1]
    residual_strides = described(residuals[0], out_order)[1] if residuals else []
    return ConvolutionCall(
        x_dims=x[0],
        x_strides=x[1],
        w_dims=w[0],
        w_strides=w[1],
        y_dims=y[0],
        y_strides=y[1],
        padding_low=low,
        padding_high=high,
        stride=stride,
        dilation=dilation,
        groups=int(groups),
        element_type=str(out.element_type),
        compute=dot_compute(conv, tf32=target.tf32),
        mode=mode,
        bias=any(len(o.array_shape.dims) == 1 for o in inst.operands[2:]),
        activation=activation_of(_config_text(inst)),
        z_strides=residual_strides,
    )


def _config_text(inst: Instruction) -> str:
    config = inst.attributes.get("backend_config")
    return config.text if isinstance(config, QuotedString) else ""


def library_convolution_thunk(
    inst: Instruction,
    operands: Sequence[BufferSlice],
    results: Sequence[BufferSlice],
    host: CustomCallThunk,
    target: Target,
) -> LibraryCallThunk:
    """The library call of a ``__heron$convolution`` custom call, ``host`` beside it."""
    (result,) = results  # one array
    call = described_or_refused(inst, TARGET, lambda inst: convolution_call(inst, target))
    return host_backed_call(LIBRARY, call, (*operands, result), host)
