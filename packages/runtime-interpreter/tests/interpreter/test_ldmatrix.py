"""``nvgpu.ldmatrix`` on the interpreter, against the PTX ISA's description.

A warp of 32 lanes copies a buffer into shared memory, each lane reads the
row address it supplies from a second buffer, runs one ``ldmatrix`` and
stores what it received. The reference is written out here from the PTX
ISA's text ("Warp-level matrix load instruction: ldmatrix"): lane ``8i + j``
supplies the address of row ``j`` of matrix ``i``; lane ``l`` receives, from
each matrix, the 32 bits at bytes ``4 (l % 4)`` of row ``l / 4``, or with
``.trans`` elements ``(2 (l % 4), l / 4)`` and ``(2 (l % 4) + 1, l / 4)``.
Addresses of lanes that supply none are set out of bounds here, to show they
are not used. A misaligned or out-of-bounds row is a sanitizer finding.
"""

from __future__ import annotations

import sys
from pathlib import Path

import numpy as np
import pytest

from heron.runtime.interpreter.errors import SanitizerError

sys.path.insert(0, str(Path(__file__).parent))
from kernels_for_tests import kernel_text, run  # noqa: E402

SIZE = 512


def _kernel(element: str, tiles: int, transpose: bool) -> str:
    per_register = 2 if element == "f16" else 4
    result = f"vector<{tiles}x{per_register}x{element}>"
    flat = f"vector<{tiles * per_register}x{element}>"
    shared = f"memref<{SIZE}x{element}, #gpu.address_space<workgroup>>"
    trans = "true" if transpose else "false"
    copies = "\n".join(
        f"""      %i{r} = arith.addi %t, %c{32 * r} : index
      %v{r} = memref.load %src[%i{r}] : memref<{SIZE}x{element}>
      memref.store %v{r}, %s[%i{r}] : {shared}"""
        for r in range(SIZE // 32)
    )
    constants = "\n".join(
        f"      %c{32 * r} = arith.constant {32 * r} : index" for r in range(SIZE // 32)
    )
    return kernel_text(
        f"%src: memref<{SIZE}x{element}>, %addr: memref<32xi32>,"
        f" %out: memref<{32 * tiles * per_register}x{element}>",
        f"""
      %t = gpu.thread_id x
{constants}
{copies}
      gpu.barrier
      %a32 = memref.load %addr[%t] : memref<32xi32>
      %a = arith.index_cast %a32 : i32 to index
      %m = nvgpu.ldmatrix %s[%a] {{numTiles = {tiles} : i32, transpose = {trans}}}
        : {shared} -> {result}
      %f = vector.shape_cast %m : {result} to {flat}
      %cw = arith.constant {tiles * per_register} : index
      %o = arith.muli %t, %cw : index
      vector.store %f, %out[%o] : memref<{32 * tiles * per_register}x{element}>, {flat}""",
        block=(32, 1, 1),
        workgroup=f"%s: {shared}",
    )


def _reference(memory: np.ndarray, addresses: np.ndarray, tiles: int, transpose: bool):
    per_register = 4 // memory.itemsize
    out = np.zeros((32, tiles, per_register), memory.dtype)
    for lane in range(32):
        for i in range(tiles):
            for e in range(per_register):
                if transpose:
                    row_start = addresses[8 * i + 2 * (lane % 4) + e]
                    out[lane, i, e] = memory[row_start + lane // 4]
                else:
                    row_start = addresses[8 * i + lane // 4]
                    out[lane, i, e] = memory[row_start + per_register * (lane % 4) + e]
    return out


def _addresses(rng, tiles: int, row_elements: int) -> np.ndarray:
    """Distinct 16-byte aligned row starts for the supplying lanes, garbage (out of
    bounds) for the others."""
    rows = rng.permutation(SIZE // row_elements)[:32] * row_elements
    return np.where(np.arange(32) < 8 * tiles, rows, 10**6).astype(np.int32)


def _run(element: str, tiles: int, transpose: bool, memory, addresses):
    per_register = 4 // memory.itemsize
    ran = run(
        _kernel(element, tiles, transpose),
        [memory, addresses],
        [32 * tiles * per_register * memory.itemsize],
        block=(32, 1, 1),
    )
    return np.frombuffer(ran.outputs[0], memory.dtype).reshape(32, tiles, per_register)


@pytest.mark.parametrize("transpose", [False, True], ids=["rows", "trans"])
@pytest.mark.parametrize("tiles", [1, 2, 4], ids=["x1", "x2", "x4"])
def test_b16_matrices_reach_the_lanes_the_ptx_isa_names(tiles, transpose):
    rng = np.random.default_rng(tiles + 10 * transpose)
    memory = np.arange(SIZE, dtype=np.float16)  # each element its own offset: exact
    addresses = _addresses(rng, tiles, 8)
    got = _run("f16", tiles, transpose, memory, addresses)
    want = _reference(memory, addresses, tiles, transpose)
    assert np.array_equal(got, want)
    # spot check against the figure: lane 5 gets row 1, elements 2 and 3 of matrix 0
    # (rows), or elements (2, 1) and (3, 1) (trans)
    if transpose:
        assert list(got[5, 0]) == [addresses[2] + 1, addresses[3] + 1]
    else:
        assert list(got[5, 0]) == [addresses[1] + 2, addresses[1] + 3]


def test_b8_rows_give_each_lane_four_bytes():
    rng = np.random.default_rng(3)
    memory = rng.integers(-128, 128, SIZE).astype(np.int8)
    addresses = _addresses(rng, 4, 16)
    got = _run("i8", 4, False, memory, addresses)
    assert np.array_equal(got, _reference(memory, addresses, 4, False))
    # lane 6: row 1 (6 / 4) of matrix 2, bytes 8 to 11 (6 % 4 = 2)
    assert list(got[6, 2]) == list(memory[addresses[17] + 8 : addresses[17] + 12])


@pytest.mark.parametrize(
    ("address", "kind"), [(4, "misaligned"), (SIZE - 4, "out-of-bounds")], ids=["misaligned", "oob"]
)
def test_a_bad_row_address_is_a_finding(address, kind):
    rng = np.random.default_rng(4)
    addresses = _addresses(rng, 4, 8)
    addresses[9] = address
    with pytest.raises(SanitizerError) as info:
        _run("f16", 4, False, np.zeros(SIZE, np.float16), addresses)
    message = str(info.value)
    assert info.value.kind == kind, message
    assert "'nvgpu.ldmatrix'" in message and "thread (9, 0, 0)" in message, message
