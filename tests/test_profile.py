"""heron profile: the access recorder's counts on known patterns, occupancy, roofline, the CLI.

The recorder is checked on accesses whose answers are known from the hardware
rules (docs/profile.md): a coalesced f32 warp load is 4 sectors, a stride-2
one 8; a transposed read of a 32x33 f32 shared tile has no bank conflict, of
a 32x32 one 31 extra wavefronts (32-way). Then on kernels heron emits and the
interpreter runs, and through ``heron profile``.
"""

from __future__ import annotations

import json
from types import SimpleNamespace

import numpy as np
import pytest

from heron.harness.profile import Resources, occupancy, profile_module, roofline
from heron.hlo.parser import parse_module
from heron.runtime.interpreter import memory
from heron.runtime.interpreter.lanes import LaneSpace
from heron.runtime.interpreter.profile import AccessRecorder
from heron.runtime.interpreter.types import parse_type
from heron.target import Target

H100 = Target.preset("h100")


def _frame(threads: int, blocks: int = 1, warp_size: int = 32, mask=None):
    lanes = LaneSpace((blocks, 1, 1), (threads, 1, 1), 0, blocks, warp_size)
    return SimpleNamespace(lanes=lanes, mask=mask)


_OP = SimpleNamespace(describe=lambda: "op #0 'memref.load'")


def _memref(space: str, type_text: str, nbytes: int) -> memory.MemRef:
    data = np.zeros((1, nbytes), np.uint8)
    return memory.MemRef(memory.Memory("m", space, data), parse_type(type_text))


def _global_load(elements, width: int = 1, threads: int = 64, active=None) -> AccessRecorder:
    recorder = AccessRecorder()
    ref = _memref("global", "memref<4096xf32>", 4 * 4096)
    recorder.access(_frame(threads), _OP, "load", ref, elements, width, active)
    return recorder


def test_a_coalesced_f32_warp_load_is_four_sectors():
    stats = _global_load(np.arange(64)).stats("global")
    assert stats.requests == 2
    assert stats.sectors_per_request == 4 and stats.ideal_sectors_per_request == 4
    assert stats.bytes_per_lane == 4


def test_a_stride_two_f32_load_is_eight_sectors_for_an_ideal_of_four():
    stats = _global_load(2 * np.arange(64)).stats("global")
    assert stats.sectors_per_request == 8 and stats.ideal_sectors_per_request == 4


def test_a_broadcast_is_one_sector_and_a_misaligned_row_five():
    assert _global_load(np.full(64, 7)).stats("global").sectors_per_request == 1
    stats = _global_load(np.arange(64) + 4).stats("global")  # rows start mid-sector
    assert stats.sectors_per_request == 5 and stats.ideal_sectors_per_request == 5


def test_vector_loads_count_their_width_and_only_active_lanes_count():
    recorder = _global_load(4 * np.arange(64), width=4)
    stats = recorder.stats("global")
    assert stats.bytes_per_lane == 16 and stats.sectors_per_request == 16
    assert recorder.buffers()[0]["unique_bytes"] == 64 * 16
    half = _global_load(np.arange(64), active=np.arange(16)).stats("global")
    assert half.requests == 1 and half.lane_accesses == 16 and half.sectors == 2


def _transposed_shared_read(columns: int, warp_size: int = 32) -> AccessRecorder:
    recorder = AccessRecorder()
    ref = _memref("workgroup", f"memref<32x{columns}xf32, 3>", 32 * columns * 4)
    frame = _frame(32 * 4, warp_size=warp_size)
    thread = frame.lanes.thread_linear
    # Lane l of warp w reads tile[l][w]: a column of the tile.
    recorder.access(frame, _OP, "load", ref, (thread % 32) * columns + thread // 32, 1, None)
    return recorder


def test_a_transposed_read_of_a_padded_32x33_tile_has_no_bank_conflict():
    stats = _transposed_shared_read(33).stats("workgroup")
    assert stats.requests == 4 and stats.bank_conflicts == 0


def test_a_transposed_read_of_a_32x32_tile_is_32_way():
    stats = _transposed_shared_read(32).stats("workgroup")
    assert stats.wavefronts == 4 * 32 and stats.bank_conflicts == 4 * 31


def test_a_64_wide_wavefront_is_served_in_two_halves():
    recorder = AccessRecorder()
    ref = _memref("workgroup", "memref<64xf32, 3>", 256)
    recorder.access(_frame(64, warp_size=64), _OP, "load", ref, np.arange(64), 1, None)
    stats = recorder.stats("workgroup")
    assert stats.requests == 1 and stats.phases == 2 and stats.bank_conflicts == 0


def test_the_same_word_read_by_every_lane_is_a_broadcast():
    recorder = AccessRecorder()
    ref = _memref("workgroup", "memref<64xf32, 3>", 256)
    recorder.access(_frame(32), _OP, "load", ref, np.zeros(32, np.int64), 1, None)
    assert recorder.stats("workgroup").bank_conflicts == 0


def test_occupancy_follows_registers_shared_memory_and_threads():
    # 128 registers x 256 threads: 4096 registers a warp, 16 warps, 2 blocks of 8 warps.
    by_registers = occupancy(H100, 256, 10_000, Resources(registers=128, shared_memory=0))
    assert by_registers.limiter == "registers" and by_registers.blocks_per_core == 2
    assert by_registers.theoretical == pytest.approx(16 / 64)
    # 100 KiB of shared memory a block (+1 KiB reserved): 2 blocks on 228 KiB.
    shared = occupancy(H100, 128, 10_000, Resources(registers=16, shared_memory=100 * 1024))
    assert shared.limiter == "shared memory" and shared.blocks_per_core == 2
    small_grid = occupancy(H100, 128, 66, Resources(registers=16, shared_memory=0))
    assert small_grid.theoretical == 1.0 and small_grid.grid_limited == pytest.approx(4 / 64)
    unknown = occupancy(H100, 1024, 10, Resources())
    assert unknown.limiter == "threads" and "registers unknown" in unknown.note


def test_roofline_bounds_use_the_target():
    roof = roofline(H100, H100.memory_bandwidth // 1000, 10)
    assert roof.memory_seconds == pytest.approx(1e-3)
    assert roof.bound == "memory"
    assert roof.estimate_seconds == pytest.approx(1e-3 + H100.launch_overhead_seconds)
    assert 0.99 < roof.bandwidth_fraction < 1


STRIDED = """
HloModule strided

fusion {
  p0 = f32[8192] parameter(0)
  ROOT s = f32[4096] slice(p0), slice={[0:8192:2]}
}

ENTRY main {
  p0 = f32[8192] parameter(0)
  ROOT f = f32[4096] fusion(p0), kind=kLoop, calls=fusion
}
"""


def test_an_emitted_strided_slice_reads_twice_the_ideal_sectors():
    (profile,) = profile_module(parse_module(STRIDED), H100, resources=False)
    rec = profile.recorder
    loads, stores = rec.stats("global", "load"), rec.stats("global", "store")
    assert loads.sectors == 2 * loads.ideal_sectors
    assert stores.sectors == stores.ideal_sectors
    assert stores.bytes_requested == 4096 * 4
    by_name = {b["name"]: b for b in rec.buffers()}
    assert sum(b["unique_bytes_written"] for b in by_name.values()) == 4096 * 4
    assert sum(b["unique_bytes_read"] for b in by_name.values()) == 4096 * 4
    assert rec.warp_operations > 0 and profile.roofline.dram_bytes == 8192 * 4 + 4096 * 4


def test_heron_profile_prints_each_kernel_and_json(tmp_path, capsys):
    from heron.cli.main import main

    path = tmp_path / "strided.hlo"
    path.write_text(STRIDED)
    assert main(["profile", str(path), "--target", "h100"]) == 0
    text = capsys.readouterr().out
    assert "emitter loop" in text
    assert "sectors/request (ideal 4, 50%)" in text
    assert "occupancy:" in text and "roofline (h100)" in text
    assert main(["profile", str(path), "--json"]) == 0
    document = json.loads(capsys.readouterr().out)
    (kernel,) = document["kernels"]
    load = kernel["accesses"]["global"]["load"]
    assert load["sectors"] == 2 * load["ideal_sectors"]
    assert kernel["roofline"]["bound"] in ("memory", "issue")
    assert main(["profile", str(path), "--fusion", "nope"]) == 2
    assert "no kernel of fusion 'nope'" in capsys.readouterr().err


GEMM = """
HloModule gemm

ENTRY main {
  a = f16[128,64]{1,0} parameter(0)
  b = f16[64,128]{1,0} parameter(1)
  ROOT d = f32[128,128]{1,0} dot(a, b), lhs_contracting_dims={1}, rhs_contracting_dims={0}
}
"""


def test_a_gemm_roofline_counts_its_multiply_adds_at_the_tensor_core_peak():
    # f16 on sm_90: the GEMM emitter's tensor-core path, so the PTX runs mma.sync and
    # the 2*M*N*K FLOPs are bounded by the Target's mma rate, not its FP32 lanes.
    (profile,) = profile_module(parse_module(GEMM), H100)
    roof = profile.roofline
    assert profile.emitter == "gemm" and profile.resources.mma_instructions
    assert roof.flops == 2 * 128 * 128 * 64 and roof.peak == "mma"
    clock = H100.core_count * H100.clock_rate_ghz * 1e9
    mma_rate = H100.mma_multiply_adds_per_core_per_cycle * clock
    assert roof.compute_seconds == pytest.approx(128 * 128 * 64 / mma_rate)
    assert roof.arithmetic_intensity == pytest.approx(roof.flops / roof.dram_bytes)
    # Unique DRAM bytes: both f16 operands read once, the f32 result written once.
    assert roof.dram_bytes == 2 * 128 * 64 * 2 + 128 * 128 * 4
    # The same kernel priced on its FP32 lanes: 2048 / 128 times slower arithmetic.
    fp32 = roofline(H100, roof.dram_bytes, roof.warp_instructions, _gemm_body())
    assert fp32.peak == "fp32" and fp32.compute_seconds == pytest.approx(
        roof.compute_seconds * H100.mma_multiply_adds_per_core_per_cycle / H100.fpus_per_core
    )


def _gemm_body():
    from heron.compiler.executable import prepare_module

    module, _ = prepare_module(parse_module(GEMM), H100)
    (fusion,) = [i for i in module.entry.instructions if i.opcode == "fusion"]
    return fusion.called("calls")


def test_heron_profile_prints_the_arithmetic_intensity(tmp_path, capsys):
    from heron.cli.main import main

    path = tmp_path / "gemm.hlo"
    path.write_text(GEMM)
    assert main(["profile", str(path), "--target", "h100"]) == 0
    text = capsys.readouterr().out
    assert f"arithmetic: {2 * 128 * 128 * 64} FLOPs" in text and "at the mma peak" in text
    assert "FLOP/B" in text
