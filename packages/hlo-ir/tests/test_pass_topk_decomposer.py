"""topk-decomposer: topk as a stable sort and slices, bit for bit the same results,
except the topk instructions it keeps for the top-k emitter (XLA's conditions)."""

from __future__ import annotations

import ml_dtypes
import numpy as np
import pytest

from heron.hlo.evaluator import evaluate_module
from heron.hlo.parser import parse_module
from heron.hlo.passes import HloPass, run_pipeline
from heron.hlo.passes.topk_decomposer import decompose_topk, kept_for_the_topk_kernel

TOPK = """
HloModule topk
ENTRY main {
  v = TYPE[2,5,9] parameter(0)
  t = (TYPE[2,5,K], s32[2,5,K]) topk(v), k=K, largest=LARGEST
  a = TYPE[2,5,K] get-tuple-element(t), index=0
  b = s32[2,5,K] get-tuple-element(t), index=1
  ROOT r = (TYPE[2,5,K], s32[2,5,K]) tuple(a, b)
}
"""

DTYPES = {"f32": np.float32, "bf16": ml_dtypes.bfloat16, "s32": np.int32, "u8": np.uint8}


def _values(type_name: str, rng: np.random.Generator) -> np.ndarray:
    if type_name in ("s32", "u8"):  # few distinct values: many ties
        return rng.integers(0, 4, size=(2, 5, 9)).astype(DTYPES[type_name])
    pool = np.array([0.0, -0.0, 1.5, -1.5, np.nan, -np.nan, np.inf, -np.inf, 2.0], np.float32)
    return rng.choice(pool, size=(2, 5, 9)).astype(DTYPES[type_name])


@pytest.mark.parametrize("type_name", sorted(DTYPES))
@pytest.mark.parametrize("largest", ["true", "false"])
@pytest.mark.parametrize("k", [1, 4, 9])
def test_decomposed_topk_gives_the_same_bits(type_name: str, largest: str, k: int) -> None:
    """Rank 3: no topk here is one the kernel takes, so every one is decomposed."""
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


@pytest.mark.parametrize(
    ("shape", "k", "kept"),
    [
        ("f32[8,32]", 4, True),  # the corpus's top_k program: XLA's __gpu$TopK
        ("bf16[4096]", 16, True),
        ("f32[2,5000]", 1, True),
        ("f32[2,40]", 17, False),  # k over XLA's max_k
        ("s32[8,32]", 4, False),  # XLA's kernel takes F32 and BF16 only
        ("f16[8,32]", 4, False),
        ("f32[2,8,32]", 4, False),  # rank 3: XLA's kernel takes [n] and [batch, n]
        ("f32[8,32]", 0, False),
    ],
)
def test_a_topk_is_kept_for_the_kernel_on_xlas_conditions(shape: str, k: int, kept: bool) -> None:
    element, dims = shape.rstrip("]").split("[")
    out = ",".join([*dims.split(",")[:-1], str(k)])
    text = f"""
HloModule topk
ENTRY main {{
  v = {shape} parameter(0)
  ROOT t = ({element}[{out}], s32[{out}]) topk(v), k={k}, largest=true
}}
"""
    module = parse_module(text)
    topk = module.entry.root_instruction
    assert kept_for_the_topk_kernel(topk) is kept
    changed = decompose_topk(module)
    assert changed is not kept
    assert ("topk" in [i.opcode for i in module.entry.instructions]) is kept
