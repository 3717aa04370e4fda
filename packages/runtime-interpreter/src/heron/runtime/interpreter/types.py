"""MLIR types of the interpreter's programs, parsed from their text, and their numpy forms.

A program carries types as MLIR text (``i32``, ``vector<4xbf16>``,
``memref<64x33xf32, #gpu.address_space<workgroup>>``); the interpreter needs
to know how a value of each is held in numpy:

=================  ====================================================
MLIR type          numpy value
=================  ====================================================
``i1``             ``bool``
``iN``, N <= 64    the signed integer type of the next width in 8, 16,
                   32, 64, holding the value sign-extended from N bits
                   (signless: unsigned ops reinterpret the low N bits)
``index``          ``int64``
``f16``, ``f32``,  ``float16``, ``float32``, ``float64``,
``f64``, ``bf16``  ``ml_dtypes.bfloat16``
``complex<fN>``    ``complex64``, ``complex128``
``vector<..xT>``   T's type, the vector shape as trailing axes
=================  ====================================================

A memref's element is held as its scalar type; memory itself is bytes (see
:mod:`heron.runtime.interpreter.memory`).
"""

from __future__ import annotations

import functools
import re

import attrs
import ml_dtypes
import numpy as np

__all__ = [
    "ComplexType",
    "FloatType",
    "IndexType",
    "IntegerType",
    "MemRefType",
    "ScalarType",
    "VectorType",
    "parse_type",
]


class TypeParseError(ValueError):
    pass


@attrs.frozen
class IntegerType:
    width: int

    @property
    def dtype(self) -> np.dtype:
        if self.width == 1:
            return np.dtype(np.bool_)
        for bits in (8, 16, 32, 64):
            if self.width <= bits:
                return np.dtype(f"int{bits}")
        raise TypeParseError(f"i{self.width} is wider than 64 bits")

    @property
    def unsigned_dtype(self) -> np.dtype:
        return np.dtype(np.bool_) if self.width == 1 else np.dtype(f"u{self.dtype.name}")

    def __str__(self) -> str:
        return f"i{self.width}"


@attrs.frozen
class IndexType:
    width: int = 64

    @property
    def dtype(self) -> np.dtype:
        return np.dtype(np.int64)

    @property
    def unsigned_dtype(self) -> np.dtype:
        return np.dtype(np.uint64)

    def __str__(self) -> str:
        return "index"


_FLOATS = {
    "f16": np.dtype(np.float16),
    "bf16": np.dtype(ml_dtypes.bfloat16),
    "f32": np.dtype(np.float32),
    "f64": np.dtype(np.float64),
}


@attrs.frozen
class FloatType:
    name: str

    @property
    def dtype(self) -> np.dtype:
        return _FLOATS[self.name]

    @property
    def width(self) -> int:
        return self.dtype.itemsize * 8

    def __str__(self) -> str:
        return self.name


@attrs.frozen
class ComplexType:
    element: FloatType

    @property
    def dtype(self) -> np.dtype:
        return np.dtype(np.complex64 if self.element.name == "f32" else np.complex128)

    @property
    def width(self) -> int:
        return self.dtype.itemsize * 8

    def __str__(self) -> str:
        return f"complex<{self.element}>"


ScalarType = IntegerType | IndexType | FloatType | ComplexType


@attrs.frozen
class VectorType:
    shape: tuple[int, ...]
    element: ScalarType

    @property
    def dtype(self) -> np.dtype:
        return self.element.dtype

    def __str__(self) -> str:
        return f"vector<{'x'.join(map(str, self.shape))}x{self.element}>"


@attrs.frozen
class MemRefType:
    """A static memref. ``space``: ``global``, ``workgroup`` (shared) or ``private``."""

    shape: tuple[int, ...]
    element: ScalarType
    space: str = "global"

    @property
    def size(self) -> int:
        count = 1
        for d in self.shape:
            count *= d
        return count

    @property
    def strides(self) -> tuple[int, ...]:
        """Row-major strides in elements (the only layout the interpreter accepts)."""
        strides = []
        step = 1
        for d in reversed(self.shape):
            strides.append(step)
            step *= d
        return tuple(reversed(strides))

    @property
    def dtype(self) -> np.dtype:
        return self.element.dtype

    def __str__(self) -> str:
        dims = "".join(f"{d}x" for d in self.shape)
        space = "" if self.space == "global" else f", {self.space}"
        return f"memref<{dims}{self.element}{space}>"


AnyType = ScalarType | VectorType | MemRefType

_SHAPED = re.compile(r"(vector|memref)<(.*)>\Z", re.S)
_DIMS = re.compile(r"((?:\d+x)*)(.*)\Z", re.S)
_SPACES = {
    "#gpu.address_space<workgroup>": "workgroup",
    "3": "workgroup",
    "#gpu.address_space<private>": "private",
    "5": "private",
    "#gpu.address_space<global>": "global",
    "1": "global",
}


def _split_top_level(text: str) -> list[str]:
    """``a, b<c, d>, e`` -> ``['a', 'b<c, d>', 'e']``."""
    parts, depth, current = [], 0, ""
    for ch in text:
        if ch in "<([{":
            depth += 1
        elif ch in ">)]}":
            depth -= 1
        if ch == "," and depth == 0:
            parts.append(current.strip())
            current = ""
        else:
            current += ch
    parts.append(current.strip())
    return parts


def _scalar(text: str) -> ScalarType:
    if text == "index":
        return IndexType()
    if text in _FLOATS:
        return FloatType(text)
    match = re.fullmatch(r"i(\d+)", text)
    if match:
        return IntegerType(int(match[1]))
    match = re.fullmatch(r"complex<(.*)>", text)
    if match and match[1] in ("f32", "f64"):
        return ComplexType(FloatType(match[1]))
    raise TypeParseError(f"the interpreter does not support the type '{text}'")


@functools.cache
def parse_type(text: str) -> AnyType:
    """The type that MLIR prints as ``text``; ``TypeParseError`` names what it cannot hold."""
    text = text.strip()
    match = _SHAPED.match(text)
    if not match:
        return _scalar(text)
    kind, inner = match.groups()
    parts = _split_top_level(inner)
    dims_text, element_text = _DIMS.match(parts[0]).groups()
    shape = tuple(int(d) for d in dims_text.split("x") if d)
    element = _scalar(element_text)
    if kind == "vector":
        if len(parts) != 1 or not shape:
            raise TypeParseError(f"the interpreter does not support the type '{text}'")
        return VectorType(shape, element)
    space = "global"
    for extra in parts[1:]:
        if extra in _SPACES:
            space = _SPACES[extra]
        else:
            raise TypeParseError(
                f"the interpreter supports static memrefs with the identity layout only,"
                f" not '{text}' ('{extra}')"
            )
    return MemRefType(shape, element, space)
