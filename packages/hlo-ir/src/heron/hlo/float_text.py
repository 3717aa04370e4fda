"""Floats as HLO text: the shortest decimal that reads back as the same element.

Literals print their elements with it, and attributes their float values; it
needs nothing of either, so both import it.
"""

from __future__ import annotations

import struct

import numpy as np

from heron.hlo.element_types import ElementType

__all__ = ["format_float", "tidy"]


_F32 = struct.Struct("<f")
_F16 = struct.Struct("<e")


def format_float(value: float, element_type: ElementType) -> str:
    """Shortest decimal that reads back as the same ``element_type`` value.

    ``value`` is the element widened to float64 (exact). NaN is not handled
    here (see ``format_float_bits``).
    """
    if value in (float("inf"), float("-inf")):
        return "inf" if value > 0 else "-inf"
    if element_type is ElementType.F64:
        text = repr(value)
    elif element_type is ElementType.F32:
        text = _shortest(value, _F32)
    elif element_type is ElementType.F16:
        text = _shortest(value, _F16)
    else:
        text = _shortest_generic(value, element_type)
    if text.endswith(".0"):
        text = text[:-2]
    return text


def _shortest(value: float, packer: struct.Struct) -> str:
    target = packer.pack(value)
    for digits in range(1, 18):
        text = f"{value:.{digits}g}"
        try:
            if packer.pack(float(text)) == target:
                return tidy(text)
        except OverflowError:  # rounds past the largest finite value
            continue
    return repr(value)


def _shortest_generic(value: float, element_type: ElementType) -> str:
    dtype = element_type.numpy_dtype
    target = np.array([value], np.float64).astype(dtype).tobytes()
    for digits in range(1, 18):
        text = f"{value:.{digits}g}"
        if np.array([float(text)], np.float64).astype(dtype).tobytes() == target:
            return tidy(text)
    return repr(value)


def tidy(text: str) -> str:
    """Prefer Python's spelling of the same float64 when it is no longer.

    ``%g`` writes 100 as ``1e+02``; ``repr`` of the float64 it reads as gives
    ``100.0`` (``100``): the same value, so the same element once rounded.
    """
    plain = repr(float(text))
    if plain.endswith(".0"):
        plain = plain[:-2]
    return plain if len(plain) <= len(text) else text
