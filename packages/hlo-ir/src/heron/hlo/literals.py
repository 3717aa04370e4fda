"""Constant literals: reading them from HLO text and writing them back.

A constant's value is a numpy array in logical (row-major) order of the
shape's dtype, or a tuple of such values for a tuple-shaped constant. The
printer must write values that read back bit for bit, so:

* floats print as the shortest decimal that converts back to the same value of
  the element type (a decimal is read as float64 and then rounded to the
  element type; every string written here is checked to survive that trip);
  integral floats drop their ``.0`` (``1``, ``-0``) the way XLA prints them;
* NaNs keep their sign (``-nan``) and, for the IEEE-like types that have NaN
  payloads (f16, bf16, f32, f64, f8e5m2), a non-canonical payload is written
  as ``nan(0x<mantissa bits>)``; the types with a single NaN encoding (the
  fnuz fp8 types, f8e8m0fnu) print plain ``nan``;
* pred prints ``true``/``false``, sub-byte integers as plain integers,
  complex values as ``(re, im)``;
* large constants print in full. ``{...}`` (XLA's elided form) reads as
  ``literal=None``: the value is unknown, and prints back as ``{...}``.
"""

from __future__ import annotations

import re
from typing import Any

import ml_dtypes
import numpy as np

from heron.hlo.element_types import ElementType, TypeKind
from heron.hlo.float_text import format_float, tidy
from heron.hlo.lexer import Cursor
from heron.hlo.shape_syntax import parse_shape_at
from heron.hlo.shapes import ArrayShape, Shape, TupleShape

#: One scalar token (not complex). Checked with fullmatch before conversion.
_NUMBER = r"[-+]?(?:[0-9]+(?:\.[0-9]*)?(?:[eE][-+]?[0-9]+)?|\.[0-9]+(?:[eE][-+]?[0-9]+)?)"
_SPECIAL = r"[-+]?(?:inf|nan(?:\(0x[0-9a-fA-F]+\))?)"
_SCALAR_TOKEN = rf"(?:{_NUMBER}|{_SPECIAL}|true|false)"
_SCALAR = re.compile(_SCALAR_TOKEN + r"(?![A-Za-z0-9_.])")
#: A whole innermost-dimension body: ``1, 2.5, -inf`` (possibly empty).
_FLAT_BODY = re.compile(rf"\s*(?:{_SCALAR_TOKEN}\s*(?:,\s*{_SCALAR_TOKEN}\s*)*)?")
_ELIDED = re.compile(r"\{\s*\.\.\.\s*\}")
_SHAPE_START = re.compile(r"[a-z][a-z0-9]*\[")
_NAN_PAYLOAD = re.compile(r"([-+]?)nan\(0x([0-9a-fA-F]+)\)")

#: Float types whose NaNs carry a sign bit that survives conversions.
_SIGNED_NAN_TYPES = frozenset(
    {
        ElementType.F16,
        ElementType.BF16,
        ElementType.F32,
        ElementType.F64,
        ElementType.F8E5M2,
        ElementType.F8E4M3FN,
        ElementType.F8E4M3,
        ElementType.F8E3M4,
    }
)
#: Float types with IEEE-style NaN payloads (several NaN encodings per sign).
_PAYLOAD_NAN_TYPES = frozenset(
    {
        ElementType.F16,
        ElementType.BF16,
        ElementType.F32,
        ElementType.F64,
        ElementType.F8E5M2,
        ElementType.F8E4M3,
        ElementType.F8E3M4,
    }
)
_UINT_OF_WIDTH = {1: np.uint8, 2: np.uint16, 4: np.uint32, 8: np.uint64}


# -- float bit facts -------------------------------------------------------------


class _FloatBits:
    """Bit-level facts about one float type, for NaN signs and payloads."""

    def __init__(self, element_type: ElementType):
        dtype = element_type.numpy_dtype
        self.element_type = element_type
        self.dtype = dtype
        self.uint = _UINT_OF_WIDTH[dtype.itemsize]
        self.width = element_type.bit_width
        self.sign_bit = 1 << (self.width - 1)
        finfo = ml_dtypes.finfo(dtype)
        self.mantissa_mask = (1 << int(finfo.nmant)) - 1
        with np.errstate(invalid="ignore", over="ignore"):
            nan = np.array([np.nan], np.float64).astype(dtype)
        self.has_nan = bool(np.isnan(nan.astype(np.float64))[0])
        canonical = int(nan.view(self.uint)[0])
        if element_type in _SIGNED_NAN_TYPES:
            canonical &= ~self.sign_bit
        self.canonical_nan = canonical
        self.signed_nan = element_type in _SIGNED_NAN_TYPES
        self.payloads = element_type in _PAYLOAD_NAN_TYPES

    def nan_bits(self, negative: bool, payload: int | None) -> int:
        bits = self.canonical_nan
        if payload is not None:
            bits = (bits & ~self.mantissa_mask) | payload
        if negative and self.signed_nan:
            bits |= self.sign_bit
        return bits


_BITS_CACHE: dict[ElementType, _FloatBits] = {}


def _float_bits(element_type: ElementType) -> _FloatBits:
    info = _BITS_CACHE.get(element_type)
    if info is None:
        info = _BITS_CACHE[element_type] = _FloatBits(element_type)
    return info


# -- parsing ---------------------------------------------------------------------


def parse_literal(cur: Cursor, shape: Shape) -> Any:
    """Read the literal of a ``constant(...)`` whose result shape is ``shape``.

    The cursor is just after ``constant(``; it is left before the ``)``.
    Returns a numpy array, a tuple of values, or None for ``{...}``.
    """
    if cur.match(_ELIDED) is not None:
        return None
    if isinstance(shape, TupleShape):
        return _parse_tuple_literal(cur, shape)
    return _parse_array_literal(cur, shape)


def _parse_tuple_literal(cur: Cursor, shape: TupleShape) -> tuple[Any, ...]:
    open_pos = cur.expect("(", "to start a tuple constant")
    values = []
    for i, element in enumerate(shape.elements):
        if i:
            cur.expect(",", f"between tuple constant elements ({len(shape.elements)} expected)")
        values.append(parse_literal(cur, element))
    if not cur.accept(")"):
        raise cur.error(
            f"tuple constant of shape {shape} has {len(shape.elements)} elements;"
            f" expected ')' (the tuple opened at column {cur.location(open_pos).column}),"
            f" found {cur.describe_next()}"
        )
    return tuple(values)


def _skip_shape_prefix(cur: Cursor, shape: ArrayShape) -> None:
    """Older dumps write ``constant(f32[2] {1, 2})``: accept and check the shape."""
    pos = cur.skip()
    m = _SHAPE_START.match(cur.text, pos)
    if m is None:
        return
    written = parse_shape_at(cur)
    if not written.same_type_and_dims(shape):
        raise cur.error(
            f"constant's literal is written with shape {written}, but the instruction's"
            f" shape is {shape}",
            pos,
        )


def _parse_array_literal(cur: Cursor, shape: ArrayShape) -> np.ndarray:
    element_type = shape.element_type
    if element_type is ElementType.TOKEN:
        raise cur.error("a token cannot be a constant")
    _skip_shape_prefix(cur, shape)
    if element_type.is_complex:
        return _parse_complex_array(cur, shape)
    if not shape.dims:
        pos = cur.skip()
        m = cur.match(_SCALAR)
        if m is None:
            raise cur.error(
                f"expected a {element_type.value} value, found {cur.describe_next()}", pos
            )
        return _convert_tokens(cur, [m.group(0)], [(pos, 0)], shape)
    tokens: list[str] = []
    chunks: list[tuple[int, int]] = []  # (offset of body, index of its first token)
    _parse_level(cur, shape, 0, tokens, chunks)
    return _convert_tokens(cur, tokens, chunks, shape)


def _parse_level(
    cur: Cursor,
    shape: ArrayShape,
    depth: int,
    tokens: list[str],
    chunks: list[tuple[int, int]],
) -> None:
    """One ``{...}`` level of a dense array literal, checked against the dims."""
    dims = shape.dims
    open_pos = cur.skip()
    if not cur.text.startswith("{", open_pos):
        what = "'{' to start a dimension" if depth else "'{' to start an array constant"
        raise cur.error(
            f"expected {what} (shape {shape} has rank {len(dims)}), found {cur.describe_next()}"
        )
    cur.pos = open_pos + 1
    text = cur.text
    if depth == len(dims) - 1:
        close = text.find("}", cur.pos)
        if close < 0:
            raise cur.error(
                "unexpected end of file inside an array constant: '{' is never closed", open_pos
            )
        body_start = cur.pos
        m = _FLAT_BODY.match(text, body_start)
        if m is None or m.end() != close:
            _report_bad_token(cur, body_start, close, shape)
        body = text[body_start:close]
        found = body.split(",") if body.strip() else []
        if len(found) != dims[depth]:
            raise cur.error(
                f"expected {dims[depth]} elements in dimension {depth} of {shape},"
                f" found {len(found)}",
                close,
            )
        chunks.append((body_start, len(tokens)))
        tokens.extend(t.strip() for t in found)
        cur.pos = close + 1
        return
    count = 0
    while True:
        if cur.peek() == "}":
            break
        if count:
            cur.expect(",", "between the elements of an array constant")
        if cur.peek() != "{":
            if cur.pos >= len(text):
                raise cur.error(
                    "unexpected end of file inside an array constant: '{' is never closed",
                    open_pos,
                )
            raise cur.error(
                f"expected '{{' for dimension {depth + 1} of {shape}"
                f" (rank {len(dims)}), found {cur.describe_next()}"
            )
        _parse_level(cur, shape, depth + 1, tokens, chunks)
        count += 1
    if count != dims[depth]:
        raise cur.error(
            f"expected {dims[depth]} elements in dimension {depth} of {shape}, found {count}",
            cur.pos,
        )
    cur.pos += 1


def _report_bad_token(cur: Cursor, start: int, close: int, shape: ArrayShape) -> None:
    """Find the first token of a flat body that is not a scalar and raise there."""
    text = cur.text
    pos = start
    for piece in text[start:close].split(","):
        stripped = piece.strip()
        at = pos + (len(piece) - len(piece.lstrip()))
        if "{" in piece:
            raise cur.error(
                f"too many nested '{{' for shape {shape} (rank {len(shape.dims)})",
                at + piece.lstrip().index("{"),
            )
        if not _SCALAR.fullmatch(stripped):
            raise cur.error(
                f"expected a {shape.element_type.value} value, found '{stripped}'"
                if stripped
                else f"expected a {shape.element_type.value} value",
                at,
            )
        pos += len(piece) + 1
    raise cur.error(f"malformed array constant for {shape}", start)


def _token_position(cur: Cursor, chunks: list[tuple[int, int]], index: int) -> int:
    """Offset of flat token ``index`` (chunks: list of (body offset, first index))."""
    body_start, first = 0, 0
    for start, first_index in chunks:
        if first_index > index:
            break
        body_start, first = start, first_index
    pos = body_start
    text = cur.text
    for _ in range(index - first):
        pos = text.index(",", pos) + 1
    while text[pos] in " \t\r\n":
        pos += 1
    return pos


def _convert_tokens(
    cur: Cursor, tokens: list[str], chunks: list[tuple[int, int]], shape: ArrayShape
) -> np.ndarray:
    """Turn scalar tokens into an array of the shape's dtype, with range checks."""
    element_type = shape.element_type
    dtype = element_type.numpy_dtype
    kind = element_type.kind
    if kind is TypeKind.PRED:
        values = []
        for i, token in enumerate(tokens):
            if token == "true" or token == "1":
                values.append(True)
            elif token == "false" or token == "0":
                values.append(False)
            else:
                raise cur.error(
                    f"expected true or false for pred, found '{token}'",
                    _token_position(cur, chunks, i),
                )
        return np.array(values, dtype=np.bool_).reshape(shape.dims)
    if kind in (TypeKind.SIGNED, TypeKind.UNSIGNED):
        ints = []
        for i, token in enumerate(tokens):
            try:
                ints.append(int(token))
            except ValueError:
                raise cur.error(
                    f"expected an integer for {element_type.value}, found '{token}'",
                    _token_position(cur, chunks, i),
                ) from None
        info = ml_dtypes.iinfo(dtype)
        lo, hi = int(info.min), int(info.max)
        if ints and (min(ints) < lo or max(ints) > hi):
            i = next(k for k, v in enumerate(ints) if v < lo or v > hi)
            raise cur.error(
                f"value {ints[i]} is out of range for {element_type.value} [{lo}, {hi}]",
                _token_position(cur, chunks, i),
            )
        return (
            np.array(ints, dtype=np.int64 if hi < 2**63 else np.uint64)
            .astype(dtype)
            .reshape(shape.dims)
        )
    # floating point
    floats = []
    payloads: dict[int, tuple[bool, int]] = {}
    for i, token in enumerate(tokens):
        if token[-1] == ")":
            m = _NAN_PAYLOAD.fullmatch(token)
            if m is None:
                raise cur.error(f"malformed NaN '{token}'", _token_position(cur, chunks, i))
            payloads[i] = (m.group(1) == "-", int(m.group(2), 16))
            floats.append(float("nan"))
            continue
        try:
            floats.append(float(token))
        except ValueError:
            raise cur.error(
                f"expected a {element_type.value} value, found '{token}'",
                _token_position(cur, chunks, i),
            ) from None
    wide = np.array(floats, dtype=np.float64)
    if dtype == np.float64:
        result = back = wide
    else:
        with np.errstate(over="ignore", invalid="ignore"):
            result = wide.astype(dtype)
            back = result.astype(np.float64)
        bad = np.isfinite(wide) & ~np.isfinite(back)
        if bad.any():
            i = int(np.flatnonzero(bad)[0])
            raise cur.error(
                f"value {tokens[i]} is out of range for {element_type.value}",
                _token_position(cur, chunks, i),
            )
    nans = np.isnan(wide)
    if nans.any() or np.isinf(wide).any():
        result = _fix_special_values(
            cur, tokens, chunks, wide, result, back, payloads, element_type
        )
    return result.reshape(shape.dims)


def _fix_special_values(
    cur: Cursor,
    tokens: list[str],
    chunks: list[tuple[int, int]],
    wide: np.ndarray,
    result: np.ndarray,
    back: np.ndarray,
    payloads: dict[int, tuple[bool, int]],
    element_type: ElementType,
) -> np.ndarray:
    """Set NaN bits exactly (sign, payload); refuse NaN/inf a type cannot hold."""
    info = _float_bits(element_type)
    bits = result.view(info.uint).copy()
    for i in np.flatnonzero(np.isnan(wide) | np.isinf(wide)):
        i = int(i)
        value = wide[i]
        if np.isinf(value):
            if not np.isinf(back[i]):
                raise cur.error(
                    f"{element_type.value} has no infinity ('{tokens[i]}')",
                    _token_position(cur, chunks, i),
                )
            continue
        if not info.has_nan:
            raise cur.error(
                f"{element_type.value} has no NaN ('{tokens[i]}')", _token_position(cur, chunks, i)
            )
        negative, payload = payloads.get(i, (bool(np.signbit(value)), None))
        if payload is not None:
            if not info.payloads:
                raise cur.error(
                    f"{element_type.value} has no NaN payloads ('{tokens[i]}')",
                    _token_position(cur, chunks, i),
                )
            if payload == 0 or payload > info.mantissa_mask:
                raise cur.error(
                    f"NaN payload {payload:#x} does not fit {element_type.value}"
                    f" (1..{info.mantissa_mask:#x})",
                    _token_position(cur, chunks, i),
                )
        bits[i] = info.nan_bits(negative, payload)
    return bits.view(result.dtype)


def _parse_complex_array(cur: Cursor, shape: ArrayShape) -> np.ndarray:
    """Complex constants: ``(re, im)`` per element, nested like any array."""
    component = ArrayShape(shape.element_type.component_type, ())
    reals: list[np.ndarray] = []
    imags: list[np.ndarray] = []

    def element() -> None:
        cur.expect("(", f"to start a {shape.element_type.value} value '(re, im)'")
        for target in (reals, imags):
            if target is imags:
                cur.expect(",", "between the parts of a complex value")
            pos = cur.skip()
            m = cur.match(_SCALAR)
            if m is None:
                raise cur.error(
                    f"expected a {component.element_type.value} value, found {cur.describe_next()}",
                    pos,
                )
            target.append(_convert_tokens(cur, [m.group(0)], [(pos, 0)], component))
        cur.expect(")", "to close a complex value")

    def level(depth: int) -> None:
        if depth == len(shape.dims):
            element()
            return
        open_pos = cur.expect("{", f"to start dimension {depth} of {shape}")
        count = 0
        while cur.peek() != "}":
            if cur.pos >= len(cur.text):
                raise cur.error(
                    "unexpected end of file inside an array constant: '{' is never closed",
                    open_pos,
                )
            if count:
                cur.expect(",", "between the elements of an array constant")
            level(depth + 1)
            count += 1
        if count != shape.dims[depth]:
            raise cur.error(
                f"expected {shape.dims[depth]} elements in dimension {depth} of {shape},"
                f" found {count}"
            )
        cur.pos += 1

    level(0)
    result = np.empty(len(reals), dtype=shape.element_type.numpy_dtype)
    if reals:  # copy through a view of the parts: NaN bits stay exact
        parts = result.view(component.element_type.numpy_dtype)
        parts[0::2] = np.concatenate([r.reshape(1) for r in reals])
        parts[1::2] = np.concatenate([i.reshape(1) for i in imags])
    return result.reshape(shape.dims)


# -- printing --------------------------------------------------------------------


def format_literal(value: Any, shape: Shape) -> str:
    """The text of a constant's literal, as it goes between ``constant(`` and ``)``."""
    if value is None:
        return "{...}"
    if isinstance(shape, TupleShape):
        if not isinstance(value, tuple) or len(value) != len(shape.elements):
            raise ValueError(f"tuple constant of shape {shape} needs a tuple of values")
        return "(" + ", ".join(format_literal(v, s) for v, s in zip(value, shape.elements)) + ")"
    array = np.asarray(value)
    if array.dtype != shape.element_type.numpy_dtype:
        raise ValueError(
            f"constant of shape {shape} holds a {array.dtype} array, not"
            f" {shape.element_type.numpy_dtype}"
        )
    strings = format_elements(array.reshape(-1), shape.element_type)
    dims = shape.dims
    if not dims:
        return strings[0]
    count = 1
    levels = [1]
    for d in dims[:-1]:
        count *= d
        levels.append(count)
    # XLA's spelling: the innermost dimension tight ({1, 2}), outer ones spaced
    # ({ {1, 2}, {3, 4} }).
    for depth in range(len(dims) - 1, -1, -1):
        n = dims[depth]
        groups = levels[depth]
        if depth == len(dims) - 1 or n == 0:
            strings = ["{" + ", ".join(strings[g * n : (g + 1) * n]) + "}" for g in range(groups)]
        else:
            strings = ["{ " + ", ".join(strings[g * n : (g + 1) * n]) + " }" for g in range(groups)]
    return strings[0]


def format_elements(flat: np.ndarray, element_type: ElementType) -> list[str]:
    """Each element of a 1-D array as HLO text."""
    kind = element_type.kind
    if kind is TypeKind.PRED:
        return ["true" if v else "false" for v in flat.tolist()]
    if kind in (TypeKind.SIGNED, TypeKind.UNSIGNED):
        if flat.dtype.kind == "V":  # ml_dtypes sub-byte integers
            flat = flat.astype(np.int64)
        return [str(v) for v in flat.tolist()]
    if kind is TypeKind.COMPLEX:
        component = element_type.component_type
        re_parts = format_elements(np.ascontiguousarray(flat.real), component)
        im_parts = format_elements(np.ascontiguousarray(flat.imag), component)
        return [f"({r}, {i})" for r, i in zip(re_parts, im_parts)]
    return _format_floats(flat, element_type)


def _format_floats(flat: np.ndarray, element_type: ElementType) -> list[str]:
    """Floats, fast: numpy's shortest round-trip spelling (Dragon4) for f16/f32,
    ``repr`` for f64, a per-value cache for the small types, each then checked
    to read back to the same bits; NaNs and anything else go one by one."""
    if element_type is ElementType.F64:
        texts = [repr(v) for v in flat.tolist()]
        suspects = np.flatnonzero(np.isnan(flat))
    elif element_type in (ElementType.F32, ElementType.F16):
        texts = [str(v) for v in flat]
        with np.errstate(over="ignore", invalid="ignore"):
            back = np.array(texts if texts else [], dtype=np.float64).astype(flat.dtype)
        uint = _UINT_OF_WIDTH[flat.dtype.itemsize]
        suspects = np.flatnonzero(back.view(uint) != flat.view(uint))
    else:
        uint = _UINT_OF_WIDTH[flat.dtype.itemsize]
        cache = _SMALL_TYPE_CACHE.setdefault(element_type, {})
        texts = []
        for i, bits in enumerate(flat.view(uint).tolist()):
            text = cache.get(bits)
            if text is None:
                text = cache[bits] = format_float_bits(element_type, flat, i)
            texts.append(text)
        return texts
    for i in suspects.tolist():
        texts[i] = format_float_bits(element_type, flat, i)
    return [
        t[:-2] if t.endswith(".0") else (tidy(t) if "e" in t and "n" not in t else t) for t in texts
    ]


def format_float_bits(element_type: ElementType, flat: np.ndarray, i: int) -> str:
    value = flat[i]
    wide = float(value)
    if wide != wide:
        info = _float_bits(element_type)
        bits = int(flat[i : i + 1].view(info.uint)[0])
        negative = info.signed_nan and bool(bits & info.sign_bit)
        text = "-nan" if negative else "nan"
        if info.payloads:
            mantissa = bits & info.mantissa_mask
            if mantissa != info.canonical_nan & info.mantissa_mask:
                text += f"(0x{mantissa:x})"
        return text
    return format_float(wide, element_type)


#: Spelling of each value of the small float types (bf16, fp8, f4), by bit pattern.
_SMALL_TYPE_CACHE: dict[ElementType, dict[int, str]] = {}
