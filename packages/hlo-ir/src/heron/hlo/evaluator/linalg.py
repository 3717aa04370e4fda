"""dot, convolution, fft and triangular-solve.

Numerics: products are accumulated in a wide type and the sum is converted
to the result type once, at the end -- f32 for every float type of 32 bits or
fewer (bf16, f16, the fp8 family, f4), f64 when an f64 is involved, complex
likewise, and 64-bit integers for integer dots (exact modulo 2**64, so the
final conversion wraps exactly as an XLA integer dot does). precision_config
and algorithm hints are ignored: they permit, not require, lower precision.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

import numpy as np

from heron.hlo.attributes import ConvDimensionNumbers, Window, WindowDim
from heron.hlo.custom_calls.fft import transform as fft_transform
from heron.hlo.custom_calls.triangular_solve import triangular_solve
from heron.hlo.element_types import ElementType
from heron.hlo.evaluator.common import convert_array, instruction_error
from heron.hlo.evaluator.data_movement import pad_array, required
from heron.hlo.ir import Instruction, Literal

if TYPE_CHECKING:
    from heron.hlo.evaluator.interpreter import Evaluator


def accumulation_dtype(*types: ElementType) -> np.dtype:
    """The type products and sums are computed in (see the module docstring)."""
    if any(t.is_complex for t in types):
        wide = any(t in (ElementType.C128, ElementType.F64) for t in types)
        return np.dtype(np.complex128 if wide else np.complex64)
    if any(t.is_floating for t in types):
        return np.dtype(np.float64 if ElementType.F64 in types else np.float32)
    if ElementType.U64 in types:
        return np.dtype(np.uint64)
    return np.dtype(np.int64)


def _element_type(x: np.ndarray) -> ElementType:
    return ElementType.from_numpy(x.dtype)


def _finish(inst: Instruction, result: np.ndarray) -> np.ndarray:
    et = inst.array_shape.element_type
    if et.is_pred:
        return result != 0
    return convert_array(result, et)


def _dot(ev: Evaluator, inst: Instruction, ops: list[Literal]) -> Literal:
    lhs, rhs = ops
    acc = accumulation_dtype(_element_type(lhs), _element_type(rhs), inst.array_shape.element_type)
    return _finish(inst, dot_product(inst, lhs, rhs, acc))


def dot_product(inst: Instruction, lhs: np.ndarray, rhs: np.ndarray, accumulate) -> np.ndarray:
    """``inst``'s dot (its dimension numbers) of ``lhs`` and ``rhs`` summed in the numpy
    dtype ``accumulate``, not rounded to the result type: the check's random rounding
    takes a float64 product as the exact one (:mod:`heron.harness.random_rounding`)."""
    left, right, shape = dot_matrices(inst, lhs, rhs, accumulate)
    if not inst.attributes.get("lhs_contracting_dims"):
        # Nothing contracted: each element is one product, as XLA makes such a dot (a
        # multiply, its dot strength reduction), which keeps the -0.0 of a product a sum
        # from +0.0 turns into +0.0 (XLA:CPU gives -0.0; so does heron's kernel).
        return (left * right).reshape(shape)
    return np.matmul(left, right).reshape(shape)


def dot_matrices(
    inst: Instruction, lhs: np.ndarray, rhs: np.ndarray, dtype
) -> tuple[np.ndarray, np.ndarray, list[int]]:
    """``inst``'s operands as batched matrices in the numpy dtype ``dtype``: ``lhs`` as
    [batch, m, k], ``rhs`` as [batch, k, n], and the dot's result shape (batch, then
    ``lhs``'s free dimensions, then ``rhs``'s)."""
    lb = list(inst.attributes.get("lhs_batch_dims", ()))
    rb = list(inst.attributes.get("rhs_batch_dims", ()))
    lc = list(inst.attributes.get("lhs_contracting_dims", ()))
    rc = list(inst.attributes.get("rhs_contracting_dims", ()))
    if len(lb) != len(rb) or len(lc) != len(rc):
        raise instruction_error(inst, "batch or contracting dimension lists differ in length")
    for a, b in zip(lb + lc, rb + rc):
        if lhs.shape[a] != rhs.shape[b]:
            raise instruction_error(
                inst, f"lhs dimension {a} ({lhs.shape[a]}) != rhs dimension {b} ({rhs.shape[b]})"
            )
    lf = [d for d in range(lhs.ndim) if d not in lb and d not in lc]
    rf = [d for d in range(rhs.ndim) if d not in rb and d not in rc]
    batch = [lhs.shape[d] for d in lb]
    lfree = [lhs.shape[d] for d in lf]
    rfree = [rhs.shape[d] for d in rf]
    size_b = int(np.prod(batch, dtype=np.int64))
    size_m = int(np.prod(lfree, dtype=np.int64))
    size_n = int(np.prod(rfree, dtype=np.int64))
    size_k = int(np.prod([lhs.shape[d] for d in lc], dtype=np.int64))
    left = np.transpose(lhs, lb + lf + lc).astype(dtype).reshape(size_b, size_m, size_k)
    right = np.transpose(rhs, rb + rc + rf).astype(dtype).reshape(size_b, size_k, size_n)
    return left, right, batch + lfree + rfree


def _conv_window(inst: Instruction, kernel_spatial: list[int]) -> list[WindowDim]:
    window = inst.attributes.get("window")
    if window is None:
        return [WindowDim(size=k) for k in kernel_spatial]
    if not isinstance(window, Window) or len(window.dims) != len(kernel_spatial):
        raise instruction_error(
            inst, f"window={window!r} does not have {len(kernel_spatial)} spatial dimensions"
        )
    for d, k in zip(window.dims, kernel_spatial):
        if d.size != k:
            raise instruction_error(inst, f"window size {d.size} != kernel size {k}")
    return list(window.dims)


def _convolution(ev: Evaluator, inst: Instruction, ops: list[Literal]) -> Literal:
    """Convolution as a sum over kernel positions of (grouped) matrix products.

    The input is moved to (batch, feature, spatial...), base-dilated and padded
    (``pad_array``: interior padding is base dilation, negative padding crops);
    then each kernel position contributes one strided slice of the input
    contracted with that position's (output feature, input feature) matrix.

    Groups: with feature_group_count G the input features split into G
    contiguous groups and so do the output features; with batch_group_count B
    the input batch splits into B contiguous groups, again matched to B
    contiguous groups of output features.
    """
    lhs, rhs = ops
    dn = required(inst, "dim_labels")
    if not isinstance(dn, ConvDimensionNumbers):
        raise instruction_error(inst, f"dim_labels={dn!r} is not a convolution dimension spec")
    out_shape = inst.array_shape
    groups = int(inst.attributes.get("feature_group_count", 1))
    batch_groups = int(inst.attributes.get("batch_group_count", 1))
    acc = accumulation_dtype(_element_type(lhs), _element_type(rhs), out_shape.element_type)

    x = np.transpose(lhs, (dn.input_batch, dn.input_feature, *dn.input_spatial)).astype(acc)
    w = np.transpose(
        rhs, (dn.kernel_output_feature, dn.kernel_input_feature, *dn.kernel_spatial)
    ).astype(acc)
    window = _conv_window(inst, list(w.shape[2:]))
    x = pad_array(
        x,
        acc.type(0),
        [(0, 0, 0), (0, 0, 0)] + [(d.pad_low, d.pad_high, d.base_dilation - 1) for d in window],
    )
    flips = tuple(2 + i for i, d in enumerate(window) if d.window_reversal)
    if flips:
        w = np.flip(w, axis=flips)

    batch, features = x.shape[:2]
    out_features, kernel_features = w.shape[:2]
    out_spatial = [out_shape.dims[d] for d in dn.output_spatial]
    if features != kernel_features * groups:
        raise instruction_error(
            inst,
            f"input features {features} != kernel input features {kernel_features}"
            f" x feature_group_count {groups}",
        )
    if out_features % (groups * batch_groups) or batch % batch_groups:
        raise instruction_error(
            inst, "feature or batch sizes are not divisible by the group counts"
        )
    out_batch = batch // batch_groups
    per_group = out_features // (groups * batch_groups)
    positions = int(np.prod(out_spatial, dtype=np.int64))
    result = np.zeros((out_batch, batch_groups, groups, per_group, positions), dtype=acc)
    for kpos in np.ndindex(*w.shape[2:]):
        key = [slice(None), slice(None)]
        for k, d, o in zip(kpos, window, out_spatial):
            start = k * d.window_dilation
            key.append(slice(start, start + (o - 1) * d.stride + 1, d.stride) if o else slice(0, 0))
        patch = x[tuple(key)].reshape(batch_groups, out_batch, groups, kernel_features, positions)
        taps = w[(slice(None), slice(None), *kpos)].reshape(
            batch_groups, groups, per_group, kernel_features
        )
        result += np.einsum("bngip,bgoi->nbgop", patch, taps, optimize=True)
    result = result.reshape([out_batch, out_features] + out_spatial)
    # Axis order of `result` is (batch, feature, spatial...): place them per dim_labels.
    source = [0] * out_shape.rank
    source[dn.output_batch] = 0
    source[dn.output_feature] = 1
    for i, d in enumerate(dn.output_spatial):
        source[d] = 2 + i
    return _finish(inst, np.transpose(result, source))


def _fft(ev: Evaluator, inst: Instruction, ops: list[Literal]) -> Literal:
    """The op's one meaning (:func:`heron.hlo.custom_calls.fft.transform`, also what the
    ``__heron$fft`` host call runs): computed in double precision, rounded once."""
    (x,) = ops
    length = inst.attributes.get("fft_length", ())
    try:
        return fft_transform(x, str(inst.attributes.get("fft_type")), tuple(length))
    except ValueError as error:
        raise instruction_error(inst, str(error)) from None


def _triangular_solve(ev: Evaluator, inst: Instruction, ops: list[Literal]) -> Literal:
    """The op's one meaning (:func:`heron.hlo.custom_calls.triangular_solve.
    triangular_solve`, also what the ``__heron$triangular_solve`` host call runs):
    substitution in the operands' precision (f16 and bf16 in f32), as LAPACK's trsm."""
    a, b = ops
    attributes = inst.attributes
    try:
        return triangular_solve(
            np.asarray(a),
            np.asarray(b),
            left_side=bool(attributes.get("left_side", False)),
            lower=bool(attributes.get("lower", False)),
            unit_diagonal=bool(attributes.get("unit_diagonal", False)),
            transpose_a=str(attributes.get("transpose_a", "NO_TRANSPOSE")),
        )
    except ValueError as error:
        raise instruction_error(inst, str(error)) from None


HANDLERS = {
    "dot": _dot,
    "convolution": _convolution,
    "fft": _fft,
    "triangular-solve": _triangular_solve,
}
