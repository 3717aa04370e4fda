"""``convolution`` becomes im2col and one ``dot``: the GEMM path for a convolution.

XLA:GPU hands a convolution to cuDNN (``__cudnn$convForward``); heron has no
convolution library, so, as issue 17 asks, a convolution is lowered to a GEMM
(im2col):

1. the input is transposed to (batch, spatial..., feature) and padded with
   zeros: edge padding is the window's padding (negative crops), interior
   padding is its base (lhs) dilation;
2. for every kernel position one strided slice of it (the position times the
   window dilation is its start, the stride its step) gives that tap's input
   for every output position; the slices, stacked along a new dimension of
   size K (the number of kernel positions, in row-major order), are the
   patches ``[batch, out spatial..., K, features]``. Where there are fewer
   output positions than kernel positions (a weight gradient: jax's
   gradient of a 3x3 convolution over a 16x16 image with respect to its
   kernel is a convolution with a 16x16 window and a 3x3 output) the slices
   go the other way: one per output position (the position times the stride
   is its start, the window dilation its step) is the window it reads, all
   K taps, and the windows stacked in row-major order are the same patches.
   Either way the patches concatenate min(K, output positions) slices: 9
   rather than 256 for that gradient. The fusion passes take a concatenate's
   slices one at a time: equinox's training step, 196 of them, compiled in
   four minutes, and in 20 s with 9;
3. the kernel is reversed where the window says so, transposed to (spatial...,
   input feature, output feature) and reshaped to ``[K, input features,
   output features]``, the same K order;
4. one dot contracts (K, feature); with ``feature_group_count`` G the features
   split into G contiguous groups that become the dot's batch dimension, as
   the output features do; with ``batch_group_count`` B (the weight gradient
   of a grouped or depthwise convolution) the input *batch* splits into B
   contiguous groups instead (group-major: input batch index = group x
   output batch + n), each contracted with its own contiguous slice of the
   output features, and those groups are the dot's batch dimension (the
   output batch is input batch / B);
5. the result, (batch, out spatial..., feature), is transposed into the
   output's ``dim_labels`` order.

The dot accumulates in the type the evaluator's convolution does (the same
products, summed in another order), so the rewrite is exact up to the
floating-point reassociation of a sum over K x features terms. Every
convolution is lowered, so none reaches an emitter (one with both group
counts above 1, which HLO forbids, is refused by the verifier before any pass).

The pass runs before ``dot-decomposer``, which then puts the dot in the
canonical form the GEMM emitter takes.
"""

from __future__ import annotations

import math

import numpy as np

from heron.hlo.attributes import (
    ConvDimensionNumbers,
    PadDim,
    PaddingConfig,
    SliceRange,
    Window,
    WindowDim,
)
from heron.hlo.ir import Instruction, Module
from heron.hlo.passes.registry import hlo_pass
from heron.hlo.passes.rewrite import (
    Inserter,
    module_names,
    non_fusion_computations,
    remove_instructions,
)
from heron.hlo.shapes import ArrayShape

__all__ = ["lower_convolutions", "lowerable"]

#: The convolution attributes a dot keeps (numerics hints; the rest describe the window).
_KEPT_ATTRIBUTES = ("precision_config", "operand_precision")


def lowerable(conv: Instruction) -> bool:
    """Whether this pass lowers ``conv``: every well-formed convolution."""
    return (
        conv.opcode == "convolution"
        and isinstance(conv.shape, ArrayShape)
        and isinstance(conv.attributes.get("dim_labels"), ConvDimensionNumbers)
    )


@hlo_pass("convolution-to-dot", "convolution as im2col (pad, strided slices) and one dot")
def lower_convolutions(module: Module) -> bool:
    names = module_names(module)
    changed = False
    for computation in non_fusion_computations(module):
        for conv in [i for i in computation.instructions if lowerable(i)]:
            inserter = Inserter(computation, names)
            inserter.replace(conv, _lower(inserter, conv))
            remove_instructions(computation, [conv])
            changed = True
    return changed


def _window(conv: Instruction, kernel_spatial: list[int]) -> list[WindowDim]:
    window = conv.attributes.get("window")
    if isinstance(window, Window):
        return list(window.dims)
    return [WindowDim(size=k) for k in kernel_spatial]


def _lower(inserter: Inserter, conv: Instruction) -> Instruction:
    lhs, rhs = conv.operands
    dn: ConvDimensionNumbers = conv.attributes["dim_labels"]
    groups = int(conv.attributes.get("feature_group_count", 1))
    batch_groups = int(conv.attributes.get("batch_group_count", 1))
    result_type = conv.shape.element_type
    spatial = len(dn.input_spatial)
    kernel_spatial = [rhs.shape.dims[d] for d in dn.kernel_spatial]
    window = _window(conv, kernel_spatial)
    out_spatial = [conv.shape.dims[d] for d in dn.output_spatial]
    batch = lhs.shape.dims[dn.input_batch]
    out_batch = conv.shape.dims[dn.output_batch]
    features = lhs.shape.dims[dn.input_feature]
    in_per_group = rhs.shape.dims[dn.kernel_input_feature]
    out_features = rhs.shape.dims[dn.kernel_output_feature]
    taps = math.prod(kernel_spatial)

    def add(suffix: str, opcode: str, element, dims, operands, attributes=None) -> Instruction:
        shape = ArrayShape(element, tuple(dims))
        return inserter.add(opcode, shape, operands, attributes, like=conv, suffix=suffix)

    def transpose(suffix: str, operand: Instruction, order: list[int]) -> Instruction:
        if order == list(range(len(order))):
            return operand
        dims = [operand.shape.dims[d] for d in order]
        return add(
            suffix,
            "transpose",
            operand.shape.element_type,
            dims,
            [operand],
            {"dimensions": tuple(order)},
        )

    def reshape(suffix: str, operand: Instruction, dims: list[int]) -> Instruction:
        if tuple(dims) == operand.shape.dims:
            return operand
        return add(suffix, "reshape", operand.shape.element_type, dims, [operand])

    # 1. the input as (batch, spatial..., feature), padded and base-dilated
    x = transpose("input", lhs, [dn.input_batch, *dn.input_spatial, dn.input_feature])
    element = x.shape.element_type
    padding = [PadDim(0, 0)] + [PadDim(d.pad_low, d.pad_high, d.base_dilation - 1) for d in window]
    if any((p.low, p.high, p.interior) != (0, 0, 0) for p in padding[1:]):
        zero = inserter.add(
            "constant",
            ArrayShape(element, ()),
            like=conv,
            suffix="zero",
            literal=np.zeros((), element.numpy_dtype),
        )
        padded_dims = [batch]
        for size, p in zip(x.shape.dims[1:-1], padding[1:], strict=True):
            dilated = size + max(size - 1, 0) * p.interior
            padded_dims.append(dilated + p.low + p.high)
        x = add(
            "padded",
            "pad",
            element,
            [*padded_dims, features],
            [x, zero],
            {"padding": PaddingConfig((*padding, PadDim(0, 0)))},
        )

    # 2. the patches [batch, out spatial..., K, features], from strided slices
    def strided_slice(suffix: str, ranges: list[SliceRange]) -> Instruction:
        dims = [len(range(r.start, r.limit, r.stride)) for r in ranges]
        if dims == list(x.shape.dims) and all(r.start == 0 and r.stride == 1 for r in ranges):
            return x
        return add(suffix, "slice", element, dims, [x], {"slice": tuple(ranges)})

    def stacked(suffix: str, columns: list[Instruction], axis: int) -> Instruction:
        if len(columns) == 1:
            return columns[0]
        dims = list(columns[0].shape.dims)
        dims[axis] = sum(c.shape.dims[axis] for c in columns)
        return add(suffix, "concatenate", element, dims, columns, {"dimensions": (axis,)})

    def patches_by_tap() -> Instruction:
        """One slice per kernel position: that tap's input at every output position."""
        columns = []
        for position in np.ndindex(*kernel_spatial):
            ranges = [SliceRange(0, batch, 1)]
            for k, d, out in zip(position, window, out_spatial, strict=True):
                start = k * d.window_dilation
                limit = start + (out - 1) * d.stride + 1 if out else start
                ranges.append(SliceRange(start, limit, d.stride))
            ranges.append(SliceRange(0, features, 1))
            tap = strided_slice("tap", ranges)
            columns.append(reshape("tap_column", tap, [batch, *out_spatial, 1, features]))
        return stacked("patches", columns, spatial + 1)

    def patches_by_position() -> Instruction:
        """One slice per output position: the window it reads, every tap at once."""
        rows = []
        for position in np.ndindex(*out_spatial):
            ranges = [SliceRange(0, batch, 1)]
            for o, d, k in zip(position, window, kernel_spatial, strict=True):
                start = o * d.stride
                ranges.append(
                    SliceRange(start, start + (k - 1) * d.window_dilation + 1, d.window_dilation)
                )
            ranges.append(SliceRange(0, features, 1))
            view = strided_slice("window", ranges)
            rows.append(reshape("window_row", view, [batch, 1, taps, features]))
        rows_stacked = stacked("window_rows", rows, 1)
        return reshape("patches", rows_stacked, [batch, *out_spatial, taps, features])

    positions = math.prod(out_spatial)
    patches = patches_by_position() if 0 < positions < taps else patches_by_tap()

    # 3. the kernel as (K, input feature, output feature)
    w = rhs
    reversed_dims = tuple(dn.kernel_spatial[i] for i, d in enumerate(window) if d.window_reversal)
    if reversed_dims:
        w = add(
            "kernel_reversed",
            "reverse",
            rhs.shape.element_type,
            rhs.shape.dims,
            [w],
            {"dimensions": reversed_dims},
        )
    w = transpose(
        "kernel", w, [*dn.kernel_spatial, dn.kernel_input_feature, dn.kernel_output_feature]
    )

    # 4. one dot over (K, feature), the feature or batch groups as its batch dimension
    attributes = {k: v for k, v in conv.attributes.items() if k in _KEPT_ATTRIBUTES}
    if groups == 1 and batch_groups == 1:
        w = reshape("kernel_matrix", w, [taps, in_per_group, out_features])
        attributes["lhs_contracting_dims"] = (spatial + 1, spatial + 2)
        attributes["rhs_contracting_dims"] = (0, 1)
        result = add(
            "dot", "dot", result_type, [batch, *out_spatial, out_features], [patches, w], attributes
        )
    else:
        if groups > 1:  # the features split: [batch, out spatial..., K, G, in per group]
            count = groups
            patches = reshape(
                "grouped_patches", patches, [batch, *out_spatial, taps, groups, in_per_group]
            )
            attributes["lhs_batch_dims"] = (spatial + 2,)
            attributes["lhs_contracting_dims"] = (spatial + 1, spatial + 3)
        else:  # the batch splits: [B, out batch, out spatial..., K, features]
            count = batch_groups
            patches = reshape(
                "grouped_patches", patches, [batch_groups, out_batch, *out_spatial, taps, features]
            )
            attributes["lhs_batch_dims"] = (0,)
            attributes["lhs_contracting_dims"] = (spatial + 2, spatial + 3)
        per_group = out_features // count
        w = reshape("grouped_kernel", w, [taps, in_per_group, count, per_group])
        attributes["rhs_batch_dims"] = (2,)
        attributes["rhs_contracting_dims"] = (0, 1)
        grouped = add(
            "dot",
            "dot",
            result_type,
            [count, out_batch, *out_spatial, per_group],
            [patches, w],
            attributes,
        )
        ungrouped = transpose("ungrouped", grouped, [1, *range(2, spatial + 2), 0, spatial + 2])
        result = reshape("features", ungrouped, [out_batch, *out_spatial, out_features])

    # 5. into the output's dimension order
    order = [0] * len(conv.shape.dims)
    order[dn.output_batch] = 0
    for i, d in enumerate(dn.output_spatial):
        order[d] = 1 + i
    order[dn.output_feature] = spatial + 1
    if order == list(range(len(order))):
        result.shape = conv.shape  # the same dimensions: keep the convolution's layout
        return result
    return inserter.add(
        "transpose", conv.shape, [result], {"dimensions": tuple(order)}, like=conv, suffix="result"
    )
