"""The GEMM library call's contract: ``operation "gemm"`` of a :class:`LibraryCallThunk`.

heron's HLO passes put every dot into XLA's canonical form
(``heron.hlo.passes.dot_decomposer``): ``lhs [batch..., M, K]`` x
``rhs [batch..., K, N]`` -> ``[batch..., M, N]``, every operand dense and
row-major (the layout normalisation makes them so). A GEMM library call is
such a dot, with what cuBLASLt can fuse after it::

    out[b, m, n] = activation(alpha * sum_k lhs[b, m, k] * rhs[b, k, n] + bias[n])

computed in the accumulation type XLA uses for the element types (f32 for
f16, bf16 and f32 inputs; f64 for f64; s32, wrapping, for s8 and s32) and
rounded once to the output type. ``beta`` scales what ``out`` held before
(``beta * out`` is added before the activation); heron's compiler emits 0.

- ``arguments`` (the thunk's slices, in this order): ``lhs`` (batch*m*k
  elements), ``rhs`` (batch*k*n), ``bias`` (n elements of the output type,
  only with ``bias``), ``out`` (batch*m*n). ``out`` overlaps no operand.
- ``attributes``: ``batch``, ``m``, ``n``, ``k`` (each at least 1: a missing
  free or contracting dimension is 1, all batch dimensions flattened into one
  count), ``lhs_type``, ``rhs_type``, ``out_type`` (HLO element type names),
  ``alpha``, ``beta`` (floats), ``bias`` (bool), ``activation`` (``"none"``
  or ``"relu"``: ``max(x, 0)``, exactly XLA's ``maximum(x, 0)``; cuBLASLt's
  GELU is the tanh approximation, which XLA only matches for a GELU written
  that way, so it is not offered).

:meth:`GemmCall.reference` computes the contract with numpy (the interpreter
device's "library", and what the GPU tests compare a library's result with).
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any, ClassVar

import attrs
import numpy as np

from heron.hlo.element_types import ElementType
from heron.runtime.core.thunks import BufferSlice, LibraryCallThunk, ThunkError

__all__ = ["ACCUMULATION", "ACTIVATIONS", "GEMM", "GemmCall"]

#: The operation name of a GEMM library call.
GEMM = "gemm"
#: Epilogue activations the contract has (cuBLASLt's RELU; see the module docstring).
ACTIVATIONS = ("none", "relu")
#: (lhs type, rhs type) -> the type XLA accumulates a dot of them in.
ACCUMULATION = {
    ("f32", "f32"): "f32",
    ("f16", "f16"): "f32",
    ("bf16", "bf16"): "f32",
    ("f64", "f64"): "f64",
    ("s8", "s8"): "s32",
}
#: accumulation type -> the output types a call may round to.
_OUTPUTS = {"f32": ("f32", "f16", "bf16"), "f64": ("f64",), "s32": ("s32",)}


def _positive(instance: Any, attribute: attrs.Attribute, value: Any) -> None:
    if not isinstance(value, int) or isinstance(value, bool) or value < 1:
        raise ThunkError(f"gemm: {attribute.name} must be an integer >= 1, got {value!r}")


@attrs.frozen
class GemmCall:
    """One GEMM library call (see the module docstring for the contract)."""

    operation: ClassVar[str] = GEMM

    batch: int = attrs.field(validator=_positive)
    m: int = attrs.field(validator=_positive)
    n: int = attrs.field(validator=_positive)
    k: int = attrs.field(validator=_positive)
    lhs_type: str = "f32"
    rhs_type: str = "f32"
    out_type: str = "f32"
    alpha: float = 1.0
    beta: float = 0.0
    bias: bool = False
    activation: str = "none"

    def __attrs_post_init__(self) -> None:
        accumulation = ACCUMULATION.get((self.lhs_type, self.rhs_type))
        if accumulation is None:
            raise ThunkError(
                f"gemm: no library GEMM of {self.lhs_type} x {self.rhs_type} (takes"
                f" {', '.join(' x '.join(pair) for pair in ACCUMULATION)})"
            )
        if self.out_type not in _OUTPUTS[accumulation]:
            raise ThunkError(
                f"gemm: {self.lhs_type} x {self.rhs_type} accumulates in {accumulation}, which"
                f" rounds to {', '.join(_OUTPUTS[accumulation])}, not {self.out_type}"
            )
        if self.activation not in ACTIVATIONS:
            raise ThunkError(f"gemm: activation {self.activation!r} (takes {ACTIVATIONS})")
        if accumulation == "s32" and (self.bias or self.activation != "none"):
            raise ThunkError("gemm: an s8 GEMM has no bias or activation epilogue")
        for name in ("alpha", "beta"):
            value = getattr(self, name)
            if isinstance(value, bool) or not isinstance(value, (int, float)):
                raise ThunkError(f"gemm: {name} must be a number, got {value!r}")

    # -- derived ---------------------------------------------------------------------------
    @property
    def accumulation(self) -> str:
        """The type the products are summed in (XLA's for the input types)."""
        return ACCUMULATION[(self.lhs_type, self.rhs_type)]

    @property
    def operand_names(self) -> tuple[str, ...]:
        return ("lhs", "rhs", "bias", "out") if self.bias else ("lhs", "rhs", "out")

    def element_counts(self) -> tuple[int, ...]:
        """Elements of each argument, in :attr:`operand_names` order."""
        counts = [self.batch * self.m * self.k, self.batch * self.k * self.n]
        if self.bias:
            counts.append(self.n)
        return (*counts, self.batch * self.m * self.n)

    def element_types(self) -> tuple[str, ...]:
        types = [self.lhs_type, self.rhs_type]
        if self.bias:
            types.append(self.out_type)
        return (*types, self.out_type)

    def byte_sizes(self) -> tuple[int, ...]:
        """Bytes of each argument, in :attr:`operand_names` order."""
        return tuple(
            count * ElementType(kind).byte_width
            for count, kind in zip(self.element_counts(), self.element_types(), strict=True)
        )

    def flops(self) -> int:
        return 2 * self.batch * self.m * self.n * self.k

    def describe(self) -> str:
        """``gemm f16[8x64x32] x [8x32x128] -> f32, bias, relu`` for reports."""
        batch = f"{self.batch}x" if self.batch > 1 else ""
        extras = [e for e in ("bias" if self.bias else "", self.activation) if e and e != "none"]
        return (
            f"gemm {self.lhs_type}[{batch}{self.m}x{self.k}] x {self.rhs_type}"
            f"[{batch}{self.k}x{self.n}] -> {self.out_type}" + "".join(f", {e}" for e in extras)
        )

    # -- the thunk's form --------------------------------------------------------------------
    def attributes(self) -> dict[str, Any]:
        return {f.name: getattr(self, f.name) for f in attrs.fields(GemmCall)}

    @classmethod
    def from_attributes(cls, attributes: Mapping[str, Any]) -> GemmCall:
        names = {f.name for f in attrs.fields(GemmCall)}
        unknown = sorted(set(attributes) - names)
        missing = sorted(names - set(attributes))
        if unknown or missing:
            raise ThunkError(
                f"gemm: attributes {', '.join(missing)} missing" * bool(missing)
                + ("; " if unknown and missing else "")
                + f"unknown attributes {', '.join(unknown)}" * bool(unknown)
            )
        return cls(**attributes)

    @classmethod
    def from_thunk(cls, thunk: LibraryCallThunk) -> GemmCall:
        """The call a thunk describes; ThunkError when its slices do not fit the contract."""
        if thunk.operation != GEMM:
            raise ThunkError(f"library call {thunk.operation!r} is not a gemm")
        call = cls.from_attributes(dict(thunk.attributes))
        call.check_slices(thunk.arguments)
        return call

    def check_slices(self, arguments: Sequence[BufferSlice]) -> None:
        names, sizes = self.operand_names, self.byte_sizes()
        if len(arguments) != len(names):
            raise ThunkError(
                f"{self.describe()}: takes {len(names)} arguments ({', '.join(names)}),"
                f" given {len(arguments)}"
            )
        for name, size, piece in zip(names, sizes, arguments, strict=True):
            if piece.size != size:
                raise ThunkError(
                    f"{self.describe()}: {name} is {size} bytes, its slice {piece} {piece.size}"
                )
        out = arguments[-1]
        for name, piece in zip(names[:-1], arguments[:-1], strict=True):
            if (
                piece.allocation == out.allocation
                and piece.offset < out.end
                and out.offset < piece.end
            ):
                raise ThunkError(f"{self.describe()}: out {out} overlaps {name} {piece}")

    # -- numpy -------------------------------------------------------------------------------
    def reference(
        self,
        lhs: np.ndarray,
        rhs: np.ndarray,
        bias: np.ndarray | None = None,
        out: np.ndarray | None = None,
    ) -> np.ndarray:
        """The contract computed with numpy from the operands' raw bytes (uint8 arrays).

        Returns the output's bytes. Products are summed in the accumulation
        type (numpy's order, not a GPU library's: floats agree within the
        accumulation's rounding, integers exactly); ``out`` is what the output
        held before, needed only when ``beta`` is not 0.
        """

        def typed(raw: np.ndarray, kind: str, shape: tuple[int, ...]) -> np.ndarray:
            dtype = ElementType(kind).numpy_dtype
            return np.ascontiguousarray(raw).view(dtype).reshape(shape)

        accumulate = ElementType(self.accumulation).numpy_dtype
        a = typed(lhs, self.lhs_type, (self.batch, self.m, self.k)).astype(accumulate)
        b = typed(rhs, self.rhs_type, (self.batch, self.k, self.n)).astype(accumulate)
        with np.errstate(over="ignore"):
            result = np.matmul(a, b)  # int32 wraps, as XLA's s32 accumulation
            if self.alpha != 1:
                result = (result * np.asarray(self.alpha, accumulate)).astype(accumulate)
            if self.beta != 0:
                before = typed(out, self.out_type, (self.batch, self.m, self.n))
                result = result + np.asarray(self.beta, accumulate) * before.astype(accumulate)
            if self.bias:
                vector = typed(bias, self.out_type, (self.n,)).astype(accumulate)
                result = result + vector
            if self.activation == "relu":
                result = np.maximum(result, np.zeros((), accumulate))
        rounded = result.astype(ElementType(self.out_type).numpy_dtype)
        return np.ascontiguousarray(rounded).reshape(-1).view(np.uint8)
