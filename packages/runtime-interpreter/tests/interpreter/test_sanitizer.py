"""The sanitizer's proofs: kernels with a planted bug, and the finding that names it.

Every finding must name the kernel, the operation and the (first) thread;
the clean version of each kernel must pass.
"""

from __future__ import annotations

import sys
from pathlib import Path

import numpy as np
import pytest

from heron.runtime.interpreter.errors import SanitizerError

sys.path.insert(0, str(Path(__file__).parent))
from kernels_for_tests import kernel_text, run  # noqa: E402

SHARED = "memref<64xf32, #gpu.address_space<workgroup>>"


def finding(text: str, inputs=(), outputs=(256,), **launch) -> SanitizerError:
    with pytest.raises(SanitizerError) as info:
        run(text, list(inputs), list(outputs), **launch)
    return info.value


def assert_names(error: SanitizerError, kind: str, op: str, thread: str) -> None:
    message = str(error)
    assert error.kind == kind, message
    assert "kernel 'k'" in message, message
    assert f"'{op}'" in message, message
    assert thread in message, message


# -- out of bounds -------------------------------------------------------------------------------


def test_global_load_out_of_bounds():
    text = kernel_text(
        "%a: memref<60xf32>, %b: memref<64xf32>",
        """
      %t = gpu.thread_id x
      %v = memref.load %a[%t] : memref<60xf32>
      memref.store %v, %b[%t] : memref<64xf32>""",
    )
    error = finding(text, [np.zeros(60, np.float32)])
    assert_names(error, "out-of-bounds", "memref.load", "block (0, 0, 0) thread (60, 0, 0)")
    assert "index 60" in str(error) and "size 60" in str(error) and "4 threads in all" in str(error)


def test_global_store_out_of_bounds_in_a_later_block():
    text = kernel_text(
        "%b: memref<100xf32>",
        """
      %t = gpu.thread_id x
      %blk = gpu.block_id x
      %c64 = arith.constant 64 : index
      %base = arith.muli %blk, %c64 : index
      %i = arith.addi %base, %t : index
      %one = arith.constant 1.0 : f32
      memref.store %one, %b[%i] : memref<100xf32>""",
        grid=(2, 1, 1),
    )
    error = finding(text, outputs=[400], grid=(2, 1, 1))
    assert_names(error, "out-of-bounds", "memref.store", "block (1, 0, 0) thread (36, 0, 0)")


def test_shared_memory_index_out_of_bounds():
    text = kernel_text(
        "%b: memref<64xf32>",
        f"""
      %t = gpu.thread_id x
      %c1 = arith.constant 1 : index
      %i = arith.addi %t, %c1 : index
      %one = arith.constant 1.0 : f32
      memref.store %one, %s[%i] : {SHARED}""",
        workgroup=f"%s: {SHARED}",
    )
    error = finding(text)
    assert_names(error, "out-of-bounds", "memref.store", "thread (63, 0, 0)")
    assert "workgroup 0" in str(error)


# -- unwritten output ------------------------------------------------------------------------------


def test_unwritten_output_element_has_no_writes():
    text = kernel_text(
        "%a: memref<64xf32>, %b: memref<64xf32>",
        """
      %t = gpu.thread_id x
      %c17 = arith.constant 17 : index
      %skip = arith.cmpi eq, %t, %c17 : index
      scf.if %skip {
      } else {
        %v = memref.load %a[%t] : memref<64xf32>
        memref.store %v, %b[%t] : memref<64xf32>
      }""",
    )
    ran = run(text, [np.ones(64, np.float32)], [256])
    writes = ran.device.access_counts(ran.buffers[0]).writes.reshape(64, 4)
    assert (writes[17] == 0).all()
    assert (np.delete(writes, 17, axis=0) == 1).all()
    assert ran.outputs[0][68:72].tolist() == [0xA5] * 4  # still the poison bytes


# -- barriers and races ----------------------------------------------------------------------------


def test_divergent_barrier():
    text = kernel_text(
        "%b: memref<64xf32>",
        """
      %t = gpu.thread_id x
      %c50 = arith.constant 50 : index
      %early = arith.cmpi ult, %t, %c50 : index
      scf.if %early {
        gpu.barrier
      }""",
    )
    assert_names(
        finding(text), "divergent-barrier", "gpu.barrier", "block (0, 0, 0) thread (50, 0, 0)"
    )


def _exchange(barrier: str, write_twice: bool = False) -> str:
    """Each thread writes s[t] (or s[t / 2]) then reads its neighbour's s[63 - t]."""
    index = "%half" if write_twice else "%t"
    return kernel_text(
        "%b: memref<64xf32>",
        f"""
      %t = gpu.thread_id x
      %c2 = arith.constant 2 : index
      %c63 = arith.constant 63 : index
      %half = arith.divui %t, %c2 : index
      %other = arith.subi %c63, %t : index
      %f = arith.index_cast %t : index to i32
      %v = arith.sitofp %f : i32 to f32
      memref.store %v, %s[{index}] : {SHARED}
      {barrier}
      %w = memref.load %s[%other] : {SHARED}
      memref.store %w, %b[%t] : memref<64xf32>""",
        workgroup=f"%s: {SHARED}",
    )


def test_write_read_race_without_barrier():
    error = finding(_exchange(""))
    assert_names(error, "shared-memory-race", "memref.load", "thread (0, 0, 0)")
    assert "element 63" in str(error) and "which thread 63 of the block" in str(error)


def test_write_write_race():
    error = finding(_exchange("gpu.barrier", write_twice=True))
    assert_names(error, "shared-memory-race", "memref.store", "thread (0, 0, 0)")


def test_exchange_with_barrier_passes():
    out = run(_exchange("gpu.barrier"), [], [256]).output(0, np.float32)
    assert np.array_equal(out, 63 - np.arange(64, dtype=np.float32))


def test_write_after_other_threads_read_is_a_race():
    text = kernel_text(
        "%b: memref<64xf32>",
        f"""
      %t = gpu.thread_id x
      %c0 = arith.constant 0 : index
      %one = arith.constant 1.0 : f32
      %first = arith.cmpi eq, %t, %c0 : index
      scf.if %first {{
        memref.store %one, %s[%c0] : {SHARED}
      }}
      gpu.barrier
      %w = memref.load %s[%c0] : {SHARED}
      scf.if %first {{
        memref.store %w, %s[%c0] : {SHARED}
      }}""",
        workgroup=f"%s: {SHARED}",
    )
    error = finding(text)
    assert_names(error, "shared-memory-race", "memref.store", "thread (0, 0, 0)")
    assert "several threads" in str(error)


def test_shared_read_before_any_write():
    text = kernel_text(
        "%b: memref<64xf32>",
        f"""
      %t = gpu.thread_id x
      %c32 = arith.constant 32 : index
      %low = arith.cmpi ult, %t, %c32 : index
      %one = arith.constant 1.0 : f32
      scf.if %low {{
        memref.store %one, %s[%t] : {SHARED}
      }}
      gpu.barrier
      %v = memref.load %s[%t] : {SHARED}
      memref.store %v, %b[%t] : memref<64xf32>""",
        workgroup=f"%s: {SHARED}",
    )
    error = finding(text)
    assert_names(error, "uninitialised-shared-read", "memref.load", "thread (32, 0, 0)")


# -- vectors and shuffles --------------------------------------------------------------------------


def test_misaligned_vector_access():
    text = kernel_text(
        "%a: memref<260xf32>, %b: memref<256xf32>",
        """
      %t = gpu.thread_id x
      %c4 = arith.constant 4 : index
      %c1 = arith.constant 1 : index
      %i = arith.muli %t, %c4 : index
      %j = arith.addi %i, %c1 : index
      %v = vector.load %a[%j] {alignment = 16} : memref<260xf32>, vector<4xf32>
      vector.store %v, %b[%i] {alignment = 16} : memref<256xf32>, vector<4xf32>""",
    )
    error = finding(text, [np.zeros(260, np.float32)], [1024])
    assert_names(error, "misaligned", "vector.load", "thread (0, 0, 0)")
    assert "byte offset 4" in str(error)


def test_divergent_shuffle():
    text = kernel_text(
        "%a: memref<64xf32>, %b: memref<64xf32>",
        """
      %t = gpu.thread_id x
      %c40 = arith.constant 40 : index
      %w = arith.constant 32 : i32
      %o = arith.constant 1 : i32
      %v = memref.load %a[%t] : memref<64xf32>
      %some = arith.cmpi ult, %t, %c40 : index
      %r = scf.if %some -> f32 {
        %s, %ok = gpu.shuffle down %v, %o, %w : f32
        scf.yield %s : f32
      } else {
        scf.yield %v : f32
      }
      memref.store %r, %b[%t] : memref<64xf32>""",
    )
    error = finding(text, [np.zeros(64, np.float32)])
    assert_names(error, "divergent-shuffle", "gpu.shuffle", "thread (40, 0, 0)")
    assert "8 threads of its warp" in str(error)


# -- a clean block-wide kernel ---------------------------------------------------------------------

TILE = "memref<32x33xf32, #gpu.address_space<workgroup>>"


def transpose(barrier: str) -> str:
    """A 64x64 transpose through a 32x33 (padded) shared tile, one 32x32 block a tile."""
    return kernel_text(
        "%a: memref<64x64xf32>, %b: memref<64x64xf32>",
        f"""
      %tx = gpu.thread_id x
      %ty = gpu.thread_id y
      %bx = gpu.block_id x
      %by = gpu.block_id y
      %c32 = arith.constant 32 : index
      %ox = arith.muli %bx, %c32 : index
      %oy = arith.muli %by, %c32 : index
      %row = arith.addi %oy, %ty : index
      %col = arith.addi %ox, %tx : index
      %v = memref.load %a[%row, %col] : memref<64x64xf32>
      memref.store %v, %tile[%ty, %tx] : {TILE}
      {barrier}
      %w = memref.load %tile[%tx, %ty] : {TILE}
      %row2 = arith.addi %ox, %ty : index
      %col2 = arith.addi %oy, %tx : index
      memref.store %w, %b[%row2, %col2] : memref<64x64xf32>""",
        block=(32, 32, 1),
        grid=(2, 2, 1),
        workgroup=f"%tile: {TILE}",
    )


def test_shared_memory_transpose_with_barrier():
    a = np.arange(64 * 64, dtype=np.float32).reshape(64, 64)
    ran = run(transpose("gpu.barrier"), [a], [a.nbytes], grid=(2, 2, 1), block=(32, 32, 1))
    assert np.array_equal(ran.output(0, np.float32).reshape(64, 64), a.T)
    assert (ran.device.access_counts(ran.buffers[0]).writes == 1).all()


def test_shared_memory_transpose_without_barrier_races():
    a = np.zeros((64, 64), np.float32)
    with pytest.raises(SanitizerError) as info:
        run(transpose(""), [a], [a.nbytes], grid=(2, 2, 1), block=(32, 32, 1))
    # thread (1, 0) reads tile[1][0], which thread (0, 1) (linear 32) wrote
    assert_names(info.value, "shared-memory-race", "memref.load", "thread (1, 0, 0)")
    assert "which thread 32 of the block" in str(info.value)
