"""topk-decomposer: topk as a stable sort and slices, bit for bit the same results."""

from __future__ import annotations

import ml_dtypes
import numpy as np
import pytest

from heron.hlo.evaluator import evaluate_module
from heron.hlo.parser import parse_module
from heron.hlo.passes import HloPass, run_pipeline
from heron.hlo.passes.topk_decomposer import decompose_topk

TOPK = """
HloModule topk
ENTRY main {
  v = TYPE[5,9] parameter(0)
  t = (TYPE[5,K], s32[5,K]) topk(v), k=K, largest=LARGEST
  a = TYPE[5,K] get-tuple-element(t), index=0
  b = s32[5,K] get-tuple-element(t), index=1
  ROOT r = (TYPE[5,K], s32[5,K]) tuple(a, b)
}
"""

DTYPES = {"f32": np.float32, "bf16": ml_dtypes.bfloat16, "s32": np.int32, "u8": np.uint8}


def _values(type_name: str, rng: np.random.Generator) -> np.ndarray:
    if type_name in ("s32", "u8"):  # few distinct values: many ties
        return rng.integers(0, 4, size=(5, 9)).astype(DTYPES[type_name])
    pool = np.array([0.0, -0.0, 1.5, -1.5, np.nan, -np.nan, np.inf, -np.inf, 2.0], np.float32)
    return rng.choice(pool, size=(5, 9)).astype(DTYPES[type_name])


@pytest.mark.parametrize("type_name", sorted(DTYPES))
@pytest.mark.parametrize("largest", ["true", "false"])
@pytest.mark.parametrize("k", [1, 4, 9])
def test_decomposed_topk_gives_the_same_bits(type_name: str, largest: str, k: int) -> None:
    text = TOPK.replace("TYPE", type_name).replace("LARGEST", largest).replace("K", str(k))
    original, module = parse_module(text), parse_module(text)
    run_pipeline(module, HloPass("under-test", decompose_topk))
    opcodes = [i.opcode for i in module.entry.instructions]
    assert "topk" not in opcodes and "sort" in opcodes and opcodes.count("slice") == 2
    comparator = next(i for i in module.entry.instructions if i.opcode == "sort").called("to_apply")
    assert comparator.root_instruction.attr("direction") == ("GT" if largest == "true" else "LT")
    for seed in range(5):
        values = _values(type_name, np.random.default_rng(seed))
        expected = evaluate_module(original, [values])
        actual = evaluate_module(module, [values])
        for e, a in zip(expected, actual, strict=True):
            assert np.asarray(e).tobytes() == np.asarray(a).tobytes()
