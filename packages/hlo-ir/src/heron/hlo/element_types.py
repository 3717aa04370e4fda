"""XLA element types and their numpy counterparts.

Every primitive type that XLA's GPU pipeline can see is listed here once, with
the facts the rest of heron asks about it (width, signedness, float format).
numpy cannot express bf16, the fp8 family, f4 or 2/4-bit integers natively, so
those map to ml_dtypes; a value of a sub-byte type is held one element per byte.
"""

from __future__ import annotations

import enum

import attrs
import ml_dtypes
import numpy as np


class TypeKind(enum.Enum):
    PRED = "pred"
    SIGNED = "signed"
    UNSIGNED = "unsigned"
    FLOAT = "float"
    COMPLEX = "complex"
    TOKEN = "token"


@attrs.frozen
class _TypeInfo:
    kind: TypeKind
    bit_width: int
    numpy_dtype: np.dtype | None


def _info(kind: TypeKind, bits: int, dtype: object | None) -> _TypeInfo:
    return _TypeInfo(kind, bits, None if dtype is None else np.dtype(dtype))


class ElementType(enum.Enum):
    """A primitive type, spelled as in HLO text (``value`` is the spelling)."""

    PRED = "pred"
    S2 = "s2"
    S4 = "s4"
    S8 = "s8"
    S16 = "s16"
    S32 = "s32"
    S64 = "s64"
    U2 = "u2"
    U4 = "u4"
    U8 = "u8"
    U16 = "u16"
    U32 = "u32"
    U64 = "u64"
    F16 = "f16"
    BF16 = "bf16"
    F32 = "f32"
    F64 = "f64"
    C64 = "c64"
    C128 = "c128"
    F8E4M3FN = "f8e4m3fn"
    F8E5M2 = "f8e5m2"
    F8E4M3FNUZ = "f8e4m3fnuz"
    F8E5M2FNUZ = "f8e5m2fnuz"
    F8E4M3B11FNUZ = "f8e4m3b11fnuz"
    F8E4M3 = "f8e4m3"
    F8E3M4 = "f8e3m4"
    F8E8M0FNU = "f8e8m0fnu"
    F4E2M1FN = "f4e2m1fn"
    TOKEN = "token"

    # -- facts -------------------------------------------------------------
    @property
    def info(self) -> _TypeInfo:
        return _TYPE_INFO[self]

    @property
    def kind(self) -> TypeKind:
        return _TYPE_INFO[self].kind

    @property
    def bit_width(self) -> int:
        """Width of one element in bits (pred is 8 bits wide in memory, as in XLA)."""
        return _TYPE_INFO[self].bit_width

    @property
    def byte_width(self) -> int:
        """Bytes one element occupies in an unpacked buffer (sub-byte types: 1)."""
        return max(1, self.bit_width // 8)

    @property
    def numpy_dtype(self) -> np.dtype:
        dtype = _TYPE_INFO[self].numpy_dtype
        if dtype is None:
            raise TypeError(f"element type {self.value} has no array representation")
        return dtype

    @property
    def is_pred(self) -> bool:
        return self is ElementType.PRED

    @property
    def is_integral(self) -> bool:
        """Signed or unsigned integer (not pred)."""
        return self.kind in (TypeKind.SIGNED, TypeKind.UNSIGNED)

    @property
    def is_signed_integral(self) -> bool:
        return self.kind is TypeKind.SIGNED

    @property
    def is_unsigned_integral(self) -> bool:
        return self.kind is TypeKind.UNSIGNED

    @property
    def is_floating(self) -> bool:
        return self.kind is TypeKind.FLOAT

    @property
    def is_complex(self) -> bool:
        return self.kind is TypeKind.COMPLEX

    @property
    def is_token(self) -> bool:
        return self is ElementType.TOKEN

    @property
    def is_array_type(self) -> bool:
        """True for every type an array can hold (everything but token)."""
        return self is not ElementType.TOKEN

    @property
    def is_sub_byte(self) -> bool:
        return self.bit_width < 8 and self is not ElementType.PRED

    @property
    def is_fp8_or_smaller(self) -> bool:
        return self.is_floating and self.bit_width <= 8

    @property
    def component_type(self) -> ElementType:
        """The real type of a complex type's parts; the type itself otherwise."""
        if self is ElementType.C64:
            return ElementType.F32
        if self is ElementType.C128:
            return ElementType.F64
        return self

    @classmethod
    def parse(cls, text: str) -> ElementType:
        try:
            return _BY_NAME[text]
        except KeyError:
            raise ValueError(f"unknown element type '{text}'") from None

    @classmethod
    def from_numpy(cls, dtype: np.dtype | type) -> ElementType:
        dt = np.dtype(dtype)
        try:
            return _BY_DTYPE[dt]
        except KeyError:
            raise ValueError(f"numpy dtype {dt} has no HLO element type") from None

    def __str__(self) -> str:
        return self.value


_TYPE_INFO: dict[ElementType, _TypeInfo] = {
    ElementType.PRED: _info(TypeKind.PRED, 8, np.bool_),
    ElementType.S2: _info(TypeKind.SIGNED, 2, ml_dtypes.int2),
    ElementType.S4: _info(TypeKind.SIGNED, 4, ml_dtypes.int4),
    ElementType.S8: _info(TypeKind.SIGNED, 8, np.int8),
    ElementType.S16: _info(TypeKind.SIGNED, 16, np.int16),
    ElementType.S32: _info(TypeKind.SIGNED, 32, np.int32),
    ElementType.S64: _info(TypeKind.SIGNED, 64, np.int64),
    ElementType.U2: _info(TypeKind.UNSIGNED, 2, ml_dtypes.uint2),
    ElementType.U4: _info(TypeKind.UNSIGNED, 4, ml_dtypes.uint4),
    ElementType.U8: _info(TypeKind.UNSIGNED, 8, np.uint8),
    ElementType.U16: _info(TypeKind.UNSIGNED, 16, np.uint16),
    ElementType.U32: _info(TypeKind.UNSIGNED, 32, np.uint32),
    ElementType.U64: _info(TypeKind.UNSIGNED, 64, np.uint64),
    ElementType.F16: _info(TypeKind.FLOAT, 16, np.float16),
    ElementType.BF16: _info(TypeKind.FLOAT, 16, ml_dtypes.bfloat16),
    ElementType.F32: _info(TypeKind.FLOAT, 32, np.float32),
    ElementType.F64: _info(TypeKind.FLOAT, 64, np.float64),
    ElementType.C64: _info(TypeKind.COMPLEX, 64, np.complex64),
    ElementType.C128: _info(TypeKind.COMPLEX, 128, np.complex128),
    ElementType.F8E4M3FN: _info(TypeKind.FLOAT, 8, ml_dtypes.float8_e4m3fn),
    ElementType.F8E5M2: _info(TypeKind.FLOAT, 8, ml_dtypes.float8_e5m2),
    ElementType.F8E4M3FNUZ: _info(TypeKind.FLOAT, 8, ml_dtypes.float8_e4m3fnuz),
    ElementType.F8E5M2FNUZ: _info(TypeKind.FLOAT, 8, ml_dtypes.float8_e5m2fnuz),
    ElementType.F8E4M3B11FNUZ: _info(TypeKind.FLOAT, 8, ml_dtypes.float8_e4m3b11fnuz),
    ElementType.F8E4M3: _info(TypeKind.FLOAT, 8, ml_dtypes.float8_e4m3),
    ElementType.F8E3M4: _info(TypeKind.FLOAT, 8, ml_dtypes.float8_e3m4),
    ElementType.F8E8M0FNU: _info(TypeKind.FLOAT, 8, ml_dtypes.float8_e8m0fnu),
    ElementType.F4E2M1FN: _info(TypeKind.FLOAT, 4, ml_dtypes.float4_e2m1fn),
    ElementType.TOKEN: _info(TypeKind.TOKEN, 0, None),
}

_BY_NAME: dict[str, ElementType] = {t.value: t for t in ElementType}
_BY_DTYPE: dict[np.dtype, ElementType] = {
    info.numpy_dtype: t for t, info in _TYPE_INFO.items() if info.numpy_dtype is not None
}

FLOATING_TYPES = tuple(t for t in ElementType if t.is_floating)
INTEGRAL_TYPES = tuple(t for t in ElementType if t.is_integral)
COMPLEX_TYPES = tuple(t for t in ElementType if t.is_complex)
