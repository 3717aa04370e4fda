"""``nvgpu.mma.sync`` on the interpreter, independently of the GEMM emitter.

Each lane loads its fragments of A, B and C from memory laid out fragment by
fragment (the test places the matrices' elements with the PTX ISA's layout,
written out here once more), runs one MMA, and stores its D fragment; the
result is compared with numpy's product. A warp that runs the op with a lane
missing is a ``divergent-shuffle`` finding naming the lane.
"""

from __future__ import annotations

import sys
from pathlib import Path

import ml_dtypes
import numpy as np
import pytest

from heron.runtime.interpreter.errors import SanitizerError

sys.path.insert(0, str(Path(__file__).parent))
from kernels_for_tests import kernel_text, run  # noqa: E402


def _ptx_layout(operand: str, k: int):
    """{(lane, r, e): (row, column)} from the PTX ISA's fragment figures, element by
    element (a0..a7 / a0..a15 etc. numbered i = p r + e)."""
    p = k // 8
    cells = {}
    for lane in range(32):
        group, tid = lane // 4, lane % 4
        if operand == "a":
            for i in range(4 * p):
                row = group + 8 if (i // p) % 2 else group
                col = tid * p + i % p + (k // 2 if i >= 2 * p else 0)
                cells[lane, i // p, i % p] = (row, col)
        elif operand == "b":
            for i in range(2 * p):
                cells[lane, i // p, i % p] = (tid * p + i % p + (k // 2 if i >= p else 0), group)
        else:
            for i in range(4):
                cells[lane, i // 2, i % 2] = (group + 8 if i >= 2 else group, tid * 2 + i % 2)
    return cells


def _fragments(matrix: np.ndarray, operand: str, k: int, shape) -> np.ndarray:
    out = np.zeros((32, *shape), matrix.dtype)
    for (lane, r, e), (row, col) in _ptx_layout(operand, k).items():
        out[lane, r, e] = matrix[row, col]
    return out


def _kernel(element: str, k: int, accumulator: str, guard: bool = False) -> str:
    p = k // 8
    a_t, b_t, c_t = (
        f"vector<4x{p}x{element}>",
        f"vector<2x{p}x{element}>",
        f"vector<2x2x{accumulator}>",
    )
    mma = (
        f"%d = nvgpu.mma.sync (%a, %b, %c) {{mmaShape = [16, 8, {k}]}}"
        f" : ({a_t}, {b_t}, {c_t}) -> {c_t}"
    )
    if guard:  # only lanes below 20 run it
        mma = f"""%c20 = arith.constant 20 : index
      %some = arith.cmpi ult, %t, %c20 : index
      %d = scf.if %some -> {c_t} {{
        {mma.replace("%d = ", "%dd = ")}
        scf.yield %dd : {c_t}
      }} else {{
        scf.yield %c : {c_t}
      }}"""
    return kernel_text(
        f"%pa: memref<{32 * 4 * p}x{element}>, %pb: memref<{32 * 2 * p}x{element}>,"
        f" %pc: memref<128x{accumulator}>, %pd: memref<128x{accumulator}>",
        f"""
      %t = gpu.thread_id x
      %ca = arith.constant {4 * p} : index
      %cb = arith.constant {2 * p} : index
      %c4 = arith.constant 4 : index
      %oa = arith.muli %t, %ca : index
      %ob = arith.muli %t, %cb : index
      %oc = arith.muli %t, %c4 : index
      %fa = vector.load %pa[%oa] : memref<{32 * 4 * p}x{element}>, vector<{4 * p}x{element}>
      %fb = vector.load %pb[%ob] : memref<{32 * 2 * p}x{element}>, vector<{2 * p}x{element}>
      %fc = vector.load %pc[%oc] : memref<128x{accumulator}>, vector<4x{accumulator}>
      %a = vector.shape_cast %fa : vector<{4 * p}x{element}> to {a_t}
      %b = vector.shape_cast %fb : vector<{2 * p}x{element}> to {b_t}
      %c = vector.shape_cast %fc : vector<4x{accumulator}> to {c_t}
      {mma}
      %fd = vector.shape_cast %d : {c_t} to vector<4x{accumulator}>
      vector.store %fd, %pd[%oc] : memref<128x{accumulator}>, vector<4x{accumulator}>""",
        block=(32, 1, 1),
    )


def _run_mma(dtype, element: str, k: int, accumulator: str, a, b, c):
    p = k // 8
    inputs = [
        _fragments(a, "a", k, (4, p)).ravel(),
        _fragments(b, "b", k, (2, p)).ravel(),
        _fragments(c, "c", k, (2, 2)).ravel(),
    ]
    ran = run(_kernel(element, k, accumulator), inputs, [128 * 4], block=(32, 1, 1))
    d_fragments = np.frombuffer(ran.outputs[0], c.dtype).reshape(32, 2, 2)
    d = np.zeros_like(c)
    for (lane, r, e), (row, col) in _ptx_layout("c", k).items():
        d[row, col] = d_fragments[lane, r, e]
    return d


@pytest.mark.parametrize("dtype", [np.float16, ml_dtypes.bfloat16], ids=["f16", "bf16"])
def test_m16n8k16_is_the_product_rounded_once(dtype):
    rng = np.random.default_rng(1)
    a = rng.standard_normal((16, 16)).astype(dtype)
    b = rng.standard_normal((16, 8)).astype(dtype)
    c = rng.standard_normal((16, 8)).astype(np.float32)
    element = "f16" if dtype is np.float16 else "bf16"
    d = _run_mma(dtype, element, 16, "f32", a, b, c)
    exact = c.astype(np.float64) + a.astype(np.float64) @ b.astype(np.float64)
    assert np.array_equal(d, exact.astype(np.float32))


def test_m16n8k32_s8_is_exact_and_saturates():
    rng = np.random.default_rng(2)
    a = rng.integers(-128, 128, (16, 32)).astype(np.int8)
    b = rng.integers(-128, 128, (32, 8)).astype(np.int8)
    c = rng.integers(-1000, 1000, (16, 8)).astype(np.int32)
    c[0, 0] = 2**31 - 1  # .satfinite: a sum past the s32 range is clamped
    a[0, :], b[:, 0] = 100, 100
    d = _run_mma(np.int8, "i8", 32, "i32", a, b, c)
    exact = c.astype(np.int64) + a.astype(np.int64) @ b.astype(np.int64)
    assert d[0, 0] == 2**31 - 1
    assert np.array_equal(d, np.clip(exact, -(2**31), 2**31 - 1).astype(np.int32))


def test_a_lane_missing_from_the_mma_is_a_finding():
    text = _kernel("f16", 16, "f32", guard=True)
    inputs = [np.zeros(256, np.float16), np.zeros(128, np.float16), np.zeros(128, np.float32)]
    with pytest.raises(SanitizerError) as info:
        run(text, inputs, [128 * 4], block=(32, 1, 1))
    message = str(info.value)
    assert info.value.kind == "divergent-shuffle", message
    assert "'nvgpu.mma.sync'" in message and "thread (20, 0, 0)" in message, message
    assert "20 threads of its warp" in message, message
