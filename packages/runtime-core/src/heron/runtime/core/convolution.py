"""The convolution library call's contract: ``operation "convolution"`` of a library call.

A forward convolution as cuDNN's graph API describes one (``conv_fprop``):
three tensors, each given by its dimensions in cuDNN's logical order and the
element stride of each dimension in its buffer, so that any HLO layout and
``dim_labels`` order is a description, not a copy::

    x [N, C, spatial...]            the input (lhs)
    w [K, C / groups, window...]    the filter (rhs)
    y [N, K, out...]                the output

    y[n, k, o...] = sum over c' < C/groups and window positions r... of
        x[n, g * C/groups + c', o * stride + r * dilation - padding_low]
        * w[k, c', r...]                               (g = k // (K/groups))

with ``x`` read as zero outside ``[0, spatial)`` (``padding_low`` before,
``padding_high`` after), products summed in f32 (the operands first rounded
to ``compute``, TF32 for an f32 convolution at default precision on sm_80+:
:mod:`heron.hlo.dot_precision`), rounded once to the element type. This is
HLO's convolution (a cross-correlation, not flipped) for a window without
base dilation or reversal and with ``batch_group_count`` 1: what the compiler
hands a library (``heron.compiler.library_convolution`` says which
convolutions those are).

With ``mode "data_gradient"`` the call is cuDNN's ``conv_dgrad`` of the same
forward convolution: given ``y`` (the gradient of the forward's output) and
``w`` it computes ``x``, the gradient of the forward's input::

    x[n, g * C/groups + c', i...] = sum over k of the group and window positions
        r... with o * stride + r * dilation - padding_low = i of y[n, k, o...] * w[k, c', r...]

which is HLO's convolution of ``y`` base-dilated by the stride with the
spatially reversed filter (what jax's gradient of a strided convolution is).
Its arguments are ``y``, ``w``, ``x`` (the output last, as always).

With ``mode "weight_gradient"`` the call is cuDNN's ``conv_wgrad``: given
``x`` and ``y`` (the forward's input and output gradient) it computes ``w``,
the gradient of the forward's filter::

    w[k, c', r...] = sum over n and output positions o... of
        y[n, k, o...] * x[n, g * C/groups + c', o * stride + r * dilation - padding_low]

which is HLO's convolution of ``x`` (its batch contracted as a feature, its
features as the batch) with ``y`` window-dilated by the stride (what jax's
kernel gradient is). Its arguments are ``x``, ``y``, ``w``.

A forward call may fuse its epilogue, as cuDNN's graphs (and XLA's
``__cudnn$convBiasActivationForward``) do: with ``bias`` a fourth argument
``b [K]`` is added to each output feature, with ``z_strides`` a residual
``z`` (XLA's side input: ``y``'s dimensions, its own strides) is added, with
``activation "relu"`` the sum is clamped at zero, all in f32 before the one
rounding to the element type. Its arguments are then ``x``, ``w``, [``b``],
[``z``], ``y``.

- ``arguments`` (the thunk's slices, in this order): ``x``, ``w``, ``y``; each
  ``prod(dims)`` elements whose strides are a permutation of a dense layout;
  ``y`` overlaps neither operand.
- ``attributes``: ``element_type`` (``f32``, ``f16`` or ``bf16``: all three
  tensors), ``compute`` (``""`` or ``"tf32"``), ``x_dims``, ``x_strides``,
  ``w_dims``, ``w_strides``, ``y_dims``, ``y_strides``, ``padding_low``,
  ``padding_high``, ``stride``, ``dilation`` (one per spatial dimension, 1 to
  3 of them), ``groups``, ``mode`` (``forward``, ``data_gradient`` or
  ``weight_gradient``), ``bias`` (a boolean), ``z_strides`` (empty: no
  residual) and ``activation`` (``""`` or ``"relu"``), the last three for a
  forward call only.

:meth:`ConvolutionCall.reference` computes the contract with numpy (the
interpreter device's "library", and what the GPU tests compare cuDNN with).
"""

from __future__ import annotations

import itertools
import math
from collections.abc import Sequence
from typing import Any, ClassVar

import attrs
import numpy as np

from heron.hlo.element_types import ElementType
from heron.runtime.core.gemm import rounded_to_compute
from heron.runtime.core.library_contract import (
    LibraryContract,
    dense_strides,
    is_dense,
    read_strided,
    written_strided,
)
from heron.runtime.core.thunks import ThunkError

__all__ = [
    "ACTIVATIONS",
    "CONVOLUTION",
    "ELEMENT_TYPES",
    "MODES",
    "ConvolutionCall",
    "dense_strides",
]

#: The operation name of a convolution library call.
CONVOLUTION = "convolution"
#: The element types a convolution call takes (all three tensors of one type).
ELEMENT_TYPES = ("f32", "f16", "bf16")
#: What a call computes: the forward convolution (y), or its gradient with respect to x or w.
MODES = ("forward", "data_gradient", "weight_gradient")
#: Each mode's arguments, the computed one last.
_ARGUMENTS = {
    "forward": ("x", "w", "y"),
    "data_gradient": ("y", "w", "x"),
    "weight_gradient": ("x", "y", "w"),
}
#: How :meth:`ConvolutionCall.describe` names each mode.
_DESCRIBED = {
    "forward": "convolution",
    "data_gradient": "convolution data gradient",
    "weight_gradient": "convolution weight gradient",
}
#: The ``compute`` values: ``""`` (the operands' own precision) or ``"tf32"`` (f32 only).
_COMPUTES = ("", "tf32")
#: The activations a forward call may end with (``""``: none).
ACTIVATIONS = ("", "relu")


def _ints(value: Any) -> tuple[int, ...]:
    if isinstance(value, (str, bytes)) or not isinstance(value, Sequence):
        raise ThunkError(f"convolution: expected a list of integers, got {value!r:.60}")
    if not all(isinstance(v, int) and not isinstance(v, bool) for v in value):
        raise ThunkError(f"convolution: expected a list of integers, got {list(value)!r:.60}")
    return tuple(value)


@attrs.frozen
class ConvolutionCall(LibraryContract):
    """One convolution library call (see the module docstring for the contract)."""

    operation: ClassVar[str] = CONVOLUTION

    x_dims: tuple[int, ...] = attrs.field(converter=_ints)
    x_strides: tuple[int, ...] = attrs.field(converter=_ints)
    w_dims: tuple[int, ...] = attrs.field(converter=_ints)
    w_strides: tuple[int, ...] = attrs.field(converter=_ints)
    y_dims: tuple[int, ...] = attrs.field(converter=_ints)
    y_strides: tuple[int, ...] = attrs.field(converter=_ints)
    padding_low: tuple[int, ...] = attrs.field(converter=_ints)
    padding_high: tuple[int, ...] = attrs.field(converter=_ints)
    stride: tuple[int, ...] = attrs.field(converter=_ints)
    dilation: tuple[int, ...] = attrs.field(converter=_ints)
    groups: int = 1
    element_type: str = "f32"
    compute: str = ""
    mode: str = "forward"
    bias: bool = False
    activation: str = ""
    z_strides: tuple[int, ...] = attrs.field(default=(), converter=_ints)

    def __attrs_post_init__(self) -> None:
        if self.mode not in MODES:
            raise ThunkError(f"convolution: mode {self.mode!r} (takes {', '.join(MODES)})")
        if not isinstance(self.bias, bool) or self.activation not in ACTIVATIONS:
            raise ThunkError(
                f"convolution: bias {self.bias!r}, activation {self.activation!r} (takes a"
                f" boolean and one of {', '.join(map(repr, ACTIVATIONS))})"
            )
        if (self.bias or self.activation or self.z_strides) and self.mode != "forward":
            raise ThunkError(
                f"convolution: a {self.mode} call fuses no bias, residual or activation"
            )
        if self.z_strides and not is_dense(self.y_dims, self.z_strides):
            raise ThunkError(
                f"convolution: z_strides {list(self.z_strides)} do not store y_dims"
                f" {list(self.y_dims)} densely"
            )
        rank = len(self.x_dims)
        if not 3 <= rank <= 5:
            raise ThunkError(f"convolution: x has {rank} dimensions (N, C and 1 to 3 spatial)")
        for name in ("w_dims", "y_dims", "x_strides", "w_strides", "y_strides"):
            if len(getattr(self, name)) != rank:
                raise ThunkError(
                    f"convolution: {name} has {len(getattr(self, name))} entries, x {rank}"
                )
        for name in ("padding_low", "padding_high", "stride", "dilation"):
            if len(getattr(self, name)) != rank - 2:
                raise ThunkError(
                    f"convolution: {name} has {len(getattr(self, name))} entries for"
                    f" {rank - 2} spatial dimensions"
                )
        for tensor in ("x", "w", "y"):
            dims, strides = getattr(self, f"{tensor}_dims"), getattr(self, f"{tensor}_strides")
            if min(dims) < 1:
                raise ThunkError(f"convolution: {tensor}_dims {list(dims)} has an empty dimension")
            if not is_dense(dims, strides):
                raise ThunkError(
                    f"convolution: {tensor}_strides {list(strides)} do not store"
                    f" {tensor}_dims {list(dims)} densely"
                )
        if self.element_type not in ELEMENT_TYPES:
            raise ThunkError(
                f"convolution: element type {self.element_type!r}"
                f" (takes {', '.join(ELEMENT_TYPES)})"
            )
        if self.compute not in _COMPUTES or (self.compute and self.element_type != "f32"):
            raise ThunkError(
                f'convolution: compute {self.compute!r} for {self.element_type} (takes "", and'
                ' "tf32" for f32)'
            )
        if isinstance(self.groups, bool) or not isinstance(self.groups, int) or self.groups < 1:
            raise ThunkError(f"convolution: groups must be an integer >= 1, got {self.groups!r}")
        if min(self.padding_low + self.padding_high) < 0 or min(self.stride + self.dilation) < 1:
            raise ThunkError(
                "convolution: padding must be >= 0 and stride and dilation >= 1 (got padding"
                f" {list(self.padding_low)}/{list(self.padding_high)}, stride"
                f" {list(self.stride)}, dilation {list(self.dilation)})"
            )
        n, c = self.x_dims[:2]
        k, per_group = self.w_dims[:2]
        if c != per_group * self.groups or k % self.groups:
            raise ThunkError(
                f"convolution: {self.groups} groups of x's {c} features need w [K, {c}/groups,"
                f" ...] with K a multiple of {self.groups}; w is {list(self.w_dims)}"
            )
        expected = (n, k, *self.output_spatial())
        if self.y_dims != expected:
            raise ThunkError(
                f"convolution: y_dims {list(self.y_dims)}, the window gives {list(expected)}"
            )

    # -- derived ---------------------------------------------------------------------------
    @property
    def spatial_rank(self) -> int:
        return len(self.x_dims) - 2

    def output_spatial(self) -> tuple[int, ...]:
        """The output's spatial extents the window gives (at least 1 each, else a ThunkError)."""
        out = []
        for d in range(self.spatial_rank):
            padded = self.x_dims[2 + d] + self.padding_low[d] + self.padding_high[d]
            reach = self.dilation[d] * (self.w_dims[2 + d] - 1) + 1
            if padded < reach:
                raise ThunkError(
                    f"convolution: spatial dimension {d}: the window reaches {reach} of"
                    f" {padded} padded positions"
                )
            out.append((padded - reach) // self.stride[d] + 1)
        return tuple(out)

    @property
    def operand_names(self) -> tuple[str, ...]:
        """The arguments, in order, the computed one last: ``x, w, y`` (forward), ``y, w, x``
        (data gradient) or ``x, y, w`` (weight gradient); a forward call's bias ``b``
        and residual ``z`` before ``y``."""
        if self.bias or self.z_strides:
            return ("x", "w", *("b",) * self.bias, *("z",) * bool(self.z_strides), "y")
        return _ARGUMENTS[self.mode]

    @property
    def residual(self) -> bool:
        return bool(self.z_strides)

    def dims_of(self, name: str) -> tuple[int, ...]:
        if name == "b":
            return (self.w_dims[0],)
        return self.y_dims if name == "z" else getattr(self, f"{name}_dims")

    def strides_of(self, name: str) -> tuple[int, ...]:
        return (1,) if name == "b" else getattr(self, f"{name}_strides")

    def element_counts(self) -> tuple[int, ...]:
        return tuple(math.prod(self.dims_of(name)) for name in self.operand_names)

    def byte_sizes(self) -> tuple[int, ...]:
        width = ElementType(self.element_type).byte_width
        return tuple(count * width for count in self.element_counts())

    def flops(self) -> int:
        return 2 * math.prod(self.y_dims) * math.prod(self.w_dims[1:])

    def summed_terms(self) -> int:
        """How many products each computed element sums (what its rounding error grows with)."""
        return self.flops() // (2 * math.prod(self.dims_of(self.operand_names[-1])))

    def describe(self) -> str:
        """``convolution f32[2x3x8x8] * f32[4x3x3x3] -> f32[2x4x8x8], pad 1_1x1_1, tf32``
        (cuDNN's NC... and KC... order) for reports."""

        def dims(values: Sequence[int]) -> str:
            return "x".join(map(str, values))

        extras = [
            f"stride {dims(self.stride)}" if max(self.stride) > 1 else "",
            "pad " + "x".join(f"{lo}_{hi}" for lo, hi in zip(self.padding_low, self.padding_high))
            if max(self.padding_low + self.padding_high) > 0
            else "",
            f"dilation {dims(self.dilation)}" if max(self.dilation) > 1 else "",
            f"{self.groups} groups" if self.groups > 1 else "",
            self.compute,
            "bias" if self.bias else "",
            "residual" if self.z_strides else "",
            self.activation,
        ]
        t = self.element_type
        a, b, out = _ARGUMENTS[self.mode]
        return (
            f"{_DESCRIBED[self.mode]} {t}[{dims(self.dims_of(a))}] * {t}[{dims(self.dims_of(b))}]"
            f" -> {t}[{dims(self.dims_of(out))}]" + "".join(f", {e}" for e in extras if e)
        )

    # -- numpy -------------------------------------------------------------------------------
    def reference(self, arguments: Sequence[np.ndarray]) -> np.ndarray:
        """The contract computed with numpy from the arguments' raw bytes (uint8 arrays in
        :attr:`operand_names` order, the computed one last); returns its bytes.

        Products are summed in f32 (numpy's order, not the library's: results agree
        within the sum's rounding), the operands first rounded to ``compute``.
        """
        count = len(self.operand_names)
        if len(arguments) != count:
            raise ThunkError(f"{self.describe()}: takes {count} arguments, given {len(arguments)}")
        dtype = ElementType(self.element_type).numpy_dtype
        raw = dict(zip(self.operand_names, arguments, strict=True))

        def logical(name: str) -> np.ndarray:
            view = read_strided(raw[name], self.dims_of(name), self.strides_of(name), dtype)
            return rounded_to_compute(np.array(view, dtype=np.float32), self.compute)

        n, c = self.x_dims[:2]
        k = self.w_dims[0]
        g = self.groups
        window = self.w_dims[2:]
        out_spatial = self.y_dims[2:]
        padded = [x + lo + hi for x, lo, hi in zip(self.x_dims[2:], self.padding_low,
                                                   self.padding_high, strict=True)]  # fmt: skip

        def taps(tap: tuple[int, ...]) -> tuple[slice, ...]:
            """The padded input positions tap ``tap`` meets, one per output position."""
            return tuple(
                slice(
                    tap[d] * self.dilation[d],
                    tap[d] * self.dilation[d] + (out_spatial[d] - 1) * self.stride[d] + 1,
                    self.stride[d],
                )
                for d in range(self.spatial_rank)
            )

        positions = list(itertools.product(*(range(size) for size in window)))
        if self.mode == "forward":
            x = logical("x")
            x = np.pad(x, [(0, 0), (0, 0), *zip(self.padding_low, self.padding_high)])
            x = x.reshape(n, g, c // g, *padded)
            w = logical("w").reshape(g, k // g, c // g, *window)
            result = np.zeros((n, g, k // g, *out_spatial), np.float32)
            for tap in positions:
                patch = x[(slice(None), slice(None), slice(None), *taps(tap))]
                result += np.einsum("ngc...,gkc->ngk...", patch, w[(..., *tap)], dtype=np.float32)
            if self.bias:
                b = read_strided(raw["b"], (k,), (1,), dtype)  # added in f32, not rounded
                result += np.asarray(b, np.float32).reshape(g, k // g, *(1,) * self.spatial_rank)
            if self.z_strides:
                z = read_strided(raw["z"], self.y_dims, self.z_strides, dtype)
                result += np.asarray(z, np.float32).reshape(result.shape)
            if self.activation == "relu":
                result = np.maximum(result, np.float32(0))
        elif self.mode == "weight_gradient":
            x = logical("x")
            x = np.pad(x, [(0, 0), (0, 0), *zip(self.padding_low, self.padding_high)])
            x = x.reshape(n, g, c // g, *padded)
            y = logical("y").reshape(n, g, k // g, *out_spatial)
            spatial = "".join(chr(ord("p") + d) for d in range(self.spatial_rank))
            taps_of = f"ngc{spatial},ngk{spatial}->gkc"
            result = np.zeros((g, k // g, c // g, *window), np.float32)
            for tap in positions:
                patch = x[(slice(None), slice(None), slice(None), *taps(tap))]
                result[(..., *tap)] = np.einsum(taps_of, patch, y, dtype=np.float32)
            result = result.reshape(k, c // g, *window)
        else:
            y = logical("y").reshape(n, g, k // g, *out_spatial)
            w = logical("w").reshape(g, k // g, c // g, *window)
            grad = np.zeros((n, g, c // g, *padded), np.float32)
            for tap in positions:
                contribution = np.einsum("ngk...,gkc->ngc...", y, w[(..., *tap)], dtype=np.float32)
                grad[(slice(None), slice(None), slice(None), *taps(tap))] += contribution
            inside = tuple(
                slice(lo, lo + x) for lo, x in zip(self.padding_low, self.x_dims[2:], strict=True)
            )
            result = grad[(slice(None), slice(None), slice(None), *inside)]
        name = self.operand_names[-1]
        return written_strided(result, self.dims_of(name), self.strides_of(name), dtype)
