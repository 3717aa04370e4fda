"""mulhi (jax's ``lax.mulhi``): the high half of the exact product, every integer width.

The oracle's elementwise table compares the evaluator with XLA:CPU; this checks the
evaluator against Python's exact integers at the edges of each type, and the verifier's
refusal of floats and pred.
"""

from __future__ import annotations

import numpy as np
import pytest

from heron.hlo.element_types import ElementType
from heron.hlo.errors import HloVerifyError
from heron.hlo.evaluator import integer_semantics as ints
from heron.hlo.parser import parse_module
from heron.hlo.verifier import verify_module

TYPES = {
    "s8": np.int8,
    "s16": np.int16,
    "s32": np.int32,
    "s64": np.int64,
    "u8": np.uint8,
    "u16": np.uint16,
    "u32": np.uint32,
    "u64": np.uint64,
}


@pytest.mark.parametrize("name", sorted(TYPES))
def test_mulhi_is_the_high_half_of_the_exact_product(name):
    dtype = TYPES[name]
    info = np.iinfo(dtype)
    edges = [info.min, info.min + 1, -1 if info.min else 1, 0, 1, 2, 3, info.max - 1, info.max]
    a = np.array([x for x in edges for _ in edges], dtype)
    b = np.array([y for _ in edges for y in edges], dtype)
    width = info.bits
    expected = np.array(
        [((int(x) * int(y)) >> width) & ((1 << width) - 1) for x, y in zip(a, b, strict=True)],
        np.uint64,
    )
    got = ints.mulhi(a, b, ElementType(name))
    assert got.dtype == dtype
    codes = np.array([int(x) & ((1 << width) - 1) for x in got], np.uint64)
    assert np.array_equal(codes, expected)


@pytest.mark.parametrize("element", ["f32", "pred"])
def test_mulhi_of_floats_or_pred_is_refused_by_the_verifier(element):
    text = f"""HloModule m
ENTRY e {{
  a = {element}[4] parameter(0)
  ROOT m = {element}[4] mulhi(a, a)
}}"""
    with pytest.raises(HloVerifyError, match=r"\(mulhi\).*expects an integer type"):
        verify_module(parse_module(text))
