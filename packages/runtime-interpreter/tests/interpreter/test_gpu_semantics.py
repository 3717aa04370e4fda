"""GPU ids, gpu.shuffle (all modes, warps of 32 and 64, vectors, 64-bit) and gpu.barrier."""

from __future__ import annotations

import sys
from pathlib import Path

import numpy as np
import pytest

from heron.runtime.interpreter.errors import SanitizerError

sys.path.insert(0, str(Path(__file__).parent))
from kernels_for_tests import kernel_text, run  # noqa: E402


def shuffle_kernel(mode: str, threads: int, element: str = "f32") -> str:
    """Thread t shuffles vals[t] with offsets[t] and widths[t]; stores the value and valid."""
    return kernel_text(
        f"%vals: memref<{threads}x{element}>, %offsets: memref<{threads}xi32>,"
        f" %widths: memref<{threads}xi32>, %out: memref<{threads}x{element}>,"
        f" %valid: memref<{threads}xi1>",
        f"""
      %t = gpu.thread_id x
      %v = memref.load %vals[%t] : memref<{threads}x{element}>
      %o = memref.load %offsets[%t] : memref<{threads}xi32>
      %w = memref.load %widths[%t] : memref<{threads}xi32>
      %r, %ok = gpu.shuffle {mode} %v, %o, %w : {element}
      memref.store %r, %out[%t] : memref<{threads}x{element}>
      memref.store %ok, %valid[%t] : memref<{threads}xi1>""",
        block=(threads, 1, 1),
    )


def reference_shuffle(mode, values, offsets, width, warp):
    """One lane at a time, as the upstream gpu dialect describes gpu.shuffle."""
    out, valid = values.copy(), np.zeros(values.size, np.bool_)
    for t in range(values.size):
        lane, base = t % warp, t - t % warp
        source = {
            "xor": lane ^ offsets[t],
            "up": lane - offsets[t],
            "down": lane + offsets[t],
            "idx": offsets[t],
        }[mode]
        if lane < width and 0 <= source < width and base + source < values.size:
            out[t], valid[t] = values[base + source], True
    return out, valid


@pytest.mark.parametrize("warp", [32, 64])
@pytest.mark.parametrize("mode", ["xor", "up", "down", "idx"])
@pytest.mark.parametrize("width", ["full", "half"])
def test_shuffle_modes_match_the_reference(mode, warp, width):
    threads = 128
    rng = np.random.default_rng(len(mode) * warp)
    values = rng.standard_normal(threads).astype(np.float32)
    limit = warp if mode in ("xor", "idx") else warp // 2
    offsets = rng.integers(0, limit + 3, threads).astype(np.int32)
    w = warp if width == "full" else warp // 2
    ran = run(
        shuffle_kernel(mode, threads),
        [values, offsets, np.full(threads, w, np.int32)],
        [threads * 4, threads],
        block=(threads, 1, 1),
        warp_size=warp,
    )
    expected, valid = reference_shuffle(mode, values, offsets, w, warp)
    assert np.array_equal(ran.output(0, np.float32), expected)
    assert np.array_equal(ran.output(1, np.bool_), valid)
    assert valid.any() and not valid.all() or mode == "xor"


def test_shuffle_in_a_partial_last_warp_treats_missing_threads_as_out_of_range():
    threads = 48  # a full warp and half of one
    values = np.arange(threads, dtype=np.float32)
    offsets = np.full(threads, 8, np.int32)
    ran = run(
        shuffle_kernel("down", threads),
        [values, offsets, np.full(threads, 32, np.int32)],
        [threads * 4, threads],
        block=(threads, 1, 1),
    )
    expected, valid = reference_shuffle("down", values, offsets, 32, 32)
    assert not valid[40:].any() and valid[32:40].all()
    assert np.array_equal(ran.output(0, np.float32), expected)
    assert np.array_equal(ran.output(1, np.bool_), valid)


def test_shuffle_of_64_bit_values_is_whole():
    values = (np.arange(64, dtype=np.int64) << 40) + 12345
    ran = run(
        shuffle_kernel("xor", 64, "i64"),
        [values, np.full(64, 5, np.int32), np.full(64, 32, np.int32)],
        [64 * 8, 64],
    )
    assert np.array_equal(ran.output(0, np.int64), values[np.arange(64) ^ 5])


def test_shuffle_of_a_vector_moves_every_element():
    text = kernel_text(
        "%vals: memref<256xf16>, %out: memref<256xf16>",
        """
      %t = gpu.thread_id x
      %c4 = arith.constant 4 : index
      %c1 = arith.constant 1 : i32
      %c32 = arith.constant 32 : i32
      %i = arith.muli %t, %c4 : index
      %v = vector.load %vals[%i] : memref<256xf16>, vector<4xf16>
      %r, %ok = gpu.shuffle up %v, %c1, %c32 : vector<4xf16>
      vector.store %r, %out[%i] : memref<256xf16>, vector<4xf16>""",
    )
    values = np.arange(256, dtype=np.float16)
    out = run(text, [values], [512]).output(0, np.float16).reshape(64, 4)
    lanes = values.reshape(64, 4)
    t = np.arange(64)
    expected = np.where((t % 32 == 0)[:, None], lanes, lanes[np.maximum(t - 1, 0)])
    assert np.array_equal(out, expected)


WARP_SUM = kernel_text(
    "%vals: memref<256xi32>, %out: memref<256xi32>",
    """
      %t = gpu.thread_id x
      %w = arith.constant 32 : i32
      %v = memref.load %vals[%t] : memref<256xi32>
      %c16 = arith.constant 16 : i32
      %c8 = arith.constant 8 : i32
      %c4 = arith.constant 4 : i32
      %c2 = arith.constant 2 : i32
      %c1 = arith.constant 1 : i32
      %s16, %o16 = gpu.shuffle xor %v, %c16, %w : i32
      %a16 = arith.addi %v, %s16 : i32
      %s8, %o8 = gpu.shuffle xor %a16, %c8, %w : i32
      %a8 = arith.addi %a16, %s8 : i32
      %s4, %o4 = gpu.shuffle xor %a8, %c4, %w : i32
      %a4 = arith.addi %a8, %s4 : i32
      %s2, %o2 = gpu.shuffle xor %a4, %c2, %w : i32
      %a2 = arith.addi %a4, %s2 : i32
      %s1, %o1 = gpu.shuffle xor %a2, %c1, %w : i32
      %a1 = arith.addi %a2, %s1 : i32
      memref.store %a1, %out[%t] : memref<256xi32>""",
    block=(256, 1, 1),
)


def test_warp_reduction_with_xor_shuffles_gives_each_warps_sum():
    values = np.random.default_rng(1).integers(-1000, 1000, 256).astype(np.int32)
    out = run(WARP_SUM, [values], [1024], block=(256, 1, 1)).output(0, np.int32)
    assert np.array_equal(out, np.repeat(values.reshape(8, 32).sum(axis=1), 32))


def test_warp_reduction_on_wavefronts_of_64_sums_halves():
    """The same kernel (width 32) on AMD's 64-lane wavefronts: lanes 32-63 are out of width."""
    values = np.arange(256, dtype=np.int32)
    out = run(WARP_SUM, [values], [1024], block=(256, 1, 1), warp_size=64).output(0, np.int32)
    waves = values.reshape(4, 64)
    low = waves[:, :32].sum(axis=1)
    # lanes >= width get their own value back at every step: v doubles five times
    high = waves[:, 32:] * 32
    assert np.array_equal(out.reshape(4, 64)[:, :32], np.repeat(low[:, None], 32, axis=1))
    assert np.array_equal(out.reshape(4, 64)[:, 32:], high)


def test_shuffle_under_a_whole_warp_condition_is_fine():
    text = kernel_text(
        "%vals: memref<64xf32>, %out: memref<64xf32>",
        """
      %t = gpu.thread_id x
      %c32 = arith.constant 32 : index
      %w = arith.constant 32 : i32
      %c0 = arith.constant 0 : i32
      %v = memref.load %vals[%t] : memref<64xf32>
      %first = arith.cmpi ult, %t, %c32 : index
      %r = scf.if %first -> f32 {
        %s, %ok = gpu.shuffle idx %v, %c0, %w : f32
        scf.yield %s : f32
      } else {
        scf.yield %v : f32
      }
      memref.store %r, %out[%t] : memref<64xf32>""",
    )
    values = np.arange(64, dtype=np.float32) + 1
    out = run(text, [values], [256]).output(0, np.float32)
    assert np.array_equal(out, np.concatenate([np.ones(32), values[32:]]))


def test_lane_id_subgroup_size_and_ids():
    text = kernel_text(
        "%out: memref<4x3x96xindex>",
        """
      %t = gpu.thread_id x
      %ty = gpu.thread_id y
      %b = gpu.block_id x
      %c0 = arith.constant 0 : index
      %c1 = arith.constant 1 : index
      %c2 = arith.constant 2 : index
      %c3 = arith.constant 3 : index
      %nx = gpu.block_dim x
      %l = gpu.lane_id
      %s = gpu.subgroup_size : index
      %g = gpu.grid_dim x
      %row = arith.muli %ty, %nx : index
      %i = arith.addi %row, %t : index
      memref.store %l, %out[%b, %c0, %i] : memref<4x3x96xindex>
      memref.store %s, %out[%b, %c1, %i] : memref<4x3x96xindex>
      %gs = arith.addi %g, %b : index
      memref.store %gs, %out[%b, %c2, %i] : memref<4x3x96xindex>""",
        block=(48, 2, 1),
        grid=(4, 1, 1),
    )
    out = run(text, [], [4 * 3 * 96 * 8], grid=(4, 1, 1), block=(48, 2, 1), warp_size=64)
    values = out.output(0, np.int64).reshape(4, 3, 96)
    assert np.array_equal(values[:, 0], np.tile(np.arange(96) % 64, (4, 1)))
    assert (values[:, 1] == 64).all()
    assert np.array_equal(values[:, 2], np.repeat(4 + np.arange(4)[:, None], 96, axis=1))


def test_barrier_reached_by_whole_blocks_only_is_fine():
    """A condition uniform within each block may skip a barrier for some blocks."""
    text = kernel_text(
        "%out: memref<4x64xi32>",
        """
      %t = gpu.thread_id x
      %b = gpu.block_id x
      %c2 = arith.constant 2 : index
      %one = arith.constant 1 : i32
      %two = arith.constant 2 : i32
      %low = arith.cmpi ult, %b, %c2 : index
      scf.if %low {
        gpu.barrier
        memref.store %one, %out[%b, %t] : memref<4x64xi32>
      } else {
        memref.store %two, %out[%b, %t] : memref<4x64xi32>
      }""",
        grid=(4, 1, 1),
    )
    out = run(text, [], [1024], grid=(4, 1, 1)).output(0, np.int32).reshape(4, 64)
    assert (out[:2] == 1).all() and (out[2:] == 2).all()


def test_divergent_barrier_names_the_block_and_a_missing_thread():
    text = kernel_text(
        "%out: memref<2x64xi32>",
        """
      %t = gpu.thread_id x
      %b = gpu.block_id x
      %c1 = arith.constant 1 : index
      %c40 = arith.constant 40 : index
      %low = arith.cmpi ult, %t, %c40 : index
      %second = arith.cmpi eq, %b, %c1 : index
      %skip = arith.andi %low, %second : i1
      %go = arith.xori %skip, %second : i1
      scf.if %go {
        gpu.barrier
      }""",
        grid=(2, 1, 1),
    )
    with pytest.raises(SanitizerError) as info:
        run(text, [], [512], grid=(2, 1, 1))
    assert info.value.kind == "divergent-barrier"
    message = str(info.value)
    assert "kernel 'k'" in message and "'gpu.barrier'" in message
    # block 1: threads 40-63 reach it, threads 0-39 do not
    assert "block (1, 0, 0) thread (0, 0, 0)" in message
    assert "24 of the 64 threads of its block wait" in message
