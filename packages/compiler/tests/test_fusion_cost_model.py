"""The fusion cost model: what it charges for, read off small fused computations."""

from __future__ import annotations

import math

import attrs
import pytest

from heron.compiler import Target
from heron.compiler.fusion.builder import build_fusion
from heron.compiler.fusion.cost_model import (
    DEFAULT_OP_CYCLES,
    FLOPS_PER_ELEMENT,
    UNCOALESCED_PENALTY,
    estimate_computation,
    lane_costs,
    lane_operations,
    parallel_rates,
    throughput_costs,
)
from heron.hlo.ir import Module
from heron.hlo.parser import parse_module

H100 = Target.preset("h100")
#: The H100 without its measured op profile: every op costs heron's throughput figure
#: (``FLOPS_PER_ELEMENT``), which the tests counting lane operations spell out.
UNPROFILED = attrs.evolve(H100, op_cycles=())


def _kernel(text: str, target: Target = UNPROFILED):
    """The cost of one kernel computing the entry's root from its parameters."""
    module: Module = parse_module(text)
    entry = module.entry
    members = [i for i in entry.post_order() if i.opcode != "parameter"]
    candidate = build_fusion(members, [entry.root_instruction])
    return estimate_computation(candidate.body, list(candidate.fusion.operands), target)


ELEMENTWISE = """
HloModule m
ENTRY e {
  x = f32[1024,1024]{1,0} parameter(0)
  ROOT n = f32[1024,1024]{1,0} negate(x)
}
"""

TRANSPOSED = """
HloModule m
ENTRY e {
  x = f32[1024,1024]{1,0} parameter(0)
  t = f32[1024,1024]{1,0} transpose(x), dimensions={1,0}
  ROOT n = f32[1024,1024]{1,0} negate(t)
}
"""

BROADCAST = """
HloModule m
ENTRY e {
  v = f32[1024]{0} parameter(0)
  ROOT b = f32[1024,1024]{1,0} broadcast(v), dimensions={1}
}
"""

ROW_SUM = """
HloModule m
add {
  a = f32[] parameter(0)
  b = f32[] parameter(1)
  ROOT s = f32[] add(a, b)
}
ENTRY e {
  x = f32[1024,1024]{1,0} parameter(0)
  z = f32[] constant(0)
  ROOT r = f32[1024]{0} reduce(x, z), dimensions={1}, to_apply=add
}
"""


def test_bytes_read_and_written_come_from_shapes_and_maps() -> None:
    cost = _kernel(ELEMENTWISE)
    assert cost.dram_bytes == 4 * 1024 * 1024 and cost.write_bytes == 4 * 1024 * 1024
    assert cost.cached_bytes == 0
    # A broadcast operand is read once per output element: the repeats hit the cache.
    broadcast = _kernel(BROADCAST)
    assert broadcast.dram_bytes == 4 * 1024
    assert broadcast.cached_bytes == 4 * 1024 * 1024 - 4 * 1024
    # A reduction reads its input once (the map's symbol is the reduced dimension).
    row_sum = _kernel(ROW_SUM)
    assert row_sum.dram_bytes == 4 * 1024 * 1024 and row_sum.write_bytes == 4 * 1024
    assert row_sum.flops == 1024 * 1024


def test_a_transposed_read_outside_a_transpose_hero_is_uncoalesced() -> None:
    straight, transposed = _kernel(ELEMENTWISE), _kernel(TRANSPOSED)
    assert transposed.dram_bytes == UNCOALESCED_PENALTY * straight.dram_bytes
    assert transposed.seconds > straight.seconds


def test_time_follows_the_target() -> None:
    cost = _kernel(ELEMENTWISE)
    moved = cost.dram_bytes + cost.write_bytes
    launch = H100.launch_overhead_seconds
    assert cost.seconds == pytest.approx(launch + moved / H100.memory_bandwidth)
    slower = attrs.evolve(H100, memory_bandwidth=H100.memory_bandwidth // 2)
    assert _kernel(ELEMENTWISE, slower).seconds == pytest.approx(
        launch + 2 * moved / H100.memory_bandwidth
    )
    # Compute-bound: transcendental work beyond what the lanes do in that time.
    tanh = ELEMENTWISE.replace("negate", "tanh")
    few_lanes = attrs.evolve(UNPROFILED, fpus_per_core=1)
    expected = 16 * 1024 * 1024 / (H100.core_count * 1 * H100.clock_rate_ghz * 1e9)
    assert _kernel(tanh, few_lanes).seconds == pytest.approx(launch + expected)


def test_every_preset_prices_a_kernel() -> None:
    from heron.compiler import presets

    for target in presets().values():
        assert target.fpus_per_core > 0 and target.launch_overhead_seconds > 0
        assert _kernel(ELEMENTWISE, target).seconds > 0


SCALAR_SUM = ROW_SUM.replace("f32[1024]{0} reduce", "f32[] reduce").replace(
    "dimensions={1}", "dimensions={0,1}"
)


def test_a_kernel_with_few_threads_gets_a_share_of_the_device() -> None:
    module = parse_module(SCALAR_SUM)
    entry = module.entry
    members = [i for i in entry.post_order() if i.opcode != "parameter"]
    candidate = build_fusion(members, [entry.root_instruction])
    body, operands = candidate.body, list(candidate.fusion.operands)
    # As a loop kernel (one output element, one thread) the sum runs on one lane:
    # priced as slow as it is; as a reduction its input's elements are worked on
    # by every lane of the device.
    one_thread = estimate_computation(body, operands, H100, threads=1)
    parallel = estimate_computation(body, operands, H100, threads=1024 * 1024)
    launch = H100.launch_overhead_seconds
    clock = H100.clock_rate_ghz * 1e9
    assert one_thread.seconds == pytest.approx(launch + one_thread.flops / clock)
    moved = parallel.dram_bytes / H100.memory_bandwidth
    assert parallel.seconds == pytest.approx(launch + moved, rel=1e-3)
    assert one_thread.seconds > 100 * parallel.seconds


def test_bandwidth_grows_with_blocks_as_in_xlas_model() -> None:
    # XLA's AdjustBandwidth: one block reads memory_bytes_per_block_per_clock a clock;
    # the device's bandwidth is reached at 53 blocks of 128 threads on an H100.
    block = H100.clock_rate_ghz * 1e9 * H100.memory_bytes_per_block_per_clock
    assert parallel_rates(16, H100)[0] == pytest.approx(block)
    assert parallel_rates(128, H100)[0] == pytest.approx(block)
    assert parallel_rates(129, H100)[0] == pytest.approx(2 * block)
    full = math.ceil(H100.memory_bandwidth / block) * 128
    assert parallel_rates(full, H100)[0] == H100.memory_bandwidth
    assert parallel_rates(full - 128, H100)[0] < H100.memory_bandwidth
    # Lanes: a block's threads, at most fpus_per_core, on at most core_count cores.
    assert parallel_rates(16, H100)[1] == 16
    assert parallel_rates(1000, H100)[1] == 8 * 128
    assert parallel_rates(1 << 24, H100)[1] == H100.core_count * H100.fpus_per_core


DOT_WITH_PROLOGUE = """
HloModule m
ENTRY e {
  x = f32[16,32]{1,0} parameter(0)
  w = f32[32,8]{1,0} parameter(1)
  t = f32[16,32]{1,0} tanh(x)
  ROOT d = f32[16,8]{1,0} dot(t, w), lhs_contracting_dims={1}, rhs_contracting_dims={0}
}
"""


def test_a_dots_operand_prologue_is_priced_per_read() -> None:
    # The GEMM emitter computes tanh(x) as it stages x's tiles, so once per read:
    # each element of t is read by all 8 columns of the output, and the model
    # charges its 16 flops for every one of those reads, not once per element.
    from heron.compiler.fusion.cost_model import FLOPS_PER_ELEMENT

    cost = _kernel(DOT_WITH_PROLOGUE)
    per_read = 16 * 8 * 32 * FLOPS_PER_ELEMENT["tanh"]
    # The tanh per read; the dot one multiply-add per output element and contracted one.
    assert cost.flops == per_read + 16 * 8 * 32


def test_read_patterns_are_built_once_per_op_form_and_price_alike():
    # A pass run's ReadPatterns memo: clones of an op (in every candidate that holds
    # it) share one entry, and a price with the memo is the price without it.
    from pathlib import Path

    from heron.compiler.fusion.cost_model import ReadPatterns

    programs = Path(__file__).resolve().parents[3] / "programs"
    module = parse_module((programs / "cnn_train_grad" / "module.hlo").read_text())
    from heron.hlo.passes import run_pipeline, simplification_pipeline

    run_pipeline(module, simplification_pipeline())
    computing = [
        i
        for i in module.entry.instructions
        if i.opcode not in ("parameter", "constant", "tuple", "get-tuple-element")
    ]
    patterns = ReadPatterns()
    for inst in computing:
        for copy in (inst, inst):  # the second asks the memo
            candidate = build_fusion([copy], [copy])
            alone = estimate_computation(candidate.body, list(candidate.fusion.operands), H100)
            memo = estimate_computation(
                candidate.body, list(candidate.fusion.operands), H100, patterns=patterns
            )
            assert attrs.astuple(alone) == attrs.astuple(memo), inst.name
    # Each op asked twice, through two candidates' clones: one entry per form, and
    # the CNN's gradient repeats forms (its im2col slices, its elementwise ops).
    assert 0 < len(patterns._known) < len(computing)


def test_a_dots_multiply_adds_are_its_outputs_times_its_contraction_length():
    """The sum's length is heron.hlo.dot_precision.contraction_length, the one the check's
    tolerance reads: two contracting dimensions multiply, none is a sum of one."""
    from heron.compiler.fusion.cost_model import dot_multiply_adds
    from heron.hlo.dot_precision import contraction_length
    from heron.hlo.verifier import verify_module

    module = parse_module(
        """
HloModule m
ENTRY e {
  x = f32[4,8,3,5]{3,2,1,0} parameter(0)
  y = f32[4,3,5,6]{3,2,1,0} parameter(1)
  d = f32[4,8,6]{2,1,0} dot(x, y), lhs_batch_dims={0}, lhs_contracting_dims={2,3},
    rhs_batch_dims={0}, rhs_contracting_dims={1,2}
  u = f32[8]{0} parameter(2)
  v = f32[6]{0} parameter(3)
  o = f32[8,6]{1,0} dot(u, v)
  ROOT t = (f32[4,8,6]{2,1,0}, f32[8,6]{1,0}) tuple(d, o)
}
"""
    )
    verify_module(module)
    d, o = module.entry.root_instruction.operands
    assert contraction_length(d) == 15 and dot_multiply_adds(d) == 4 * 8 * 6 * 15
    assert contraction_length(o) == 1 and dot_multiply_adds(o) == o.array_shape.num_elements


#: A scan's block totals: every sixteenth element of a [256, 16, 4096] array, a slice,
#: scanned by a window of 16 (the scan rewriter's next level).
SLICE_SCANNED = """
HloModule m
add {
  a = f32[] parameter(0)
  b = f32[] parameter(1)
  ROOT s = f32[] add(a, b)
}
ENTRY e {
  x = f32[256,16,4096]{2,1,0} parameter(0)
  t = f32[256,1,4096]{2,1,0} slice(x), slice={[0:256], [15:16], [0:4096]}
  z = f32[] constant(0)
  ROOT s = f32[256,1,4096] reduce-window(t, z), window={size=16x1x1 pad=15_0x0_0x0_0}, to_apply=add
}
"""

TWO_SLICES_SCANNED = """
HloModule m
add {
  a = f32[] parameter(0)
  b = f32[] parameter(1)
  ROOT s = f32[] add(a, b)
}
ENTRY e {
  x = f32[2,65536]{1,0} parameter(0)
  z = f32[] constant(0)
  first = f32[1,65536]{1,0} slice(x), slice={[0:1], [0:65536]}
  second = f32[1,65536]{1,0} slice(x), slice={[1:2], [0:65536]}
  a = f32[1,65536]{1,0} reduce-window(first, z), window={size=1x16 pad=0_0x15_0}, to_apply=add
  b = f32[1,65536]{1,0} reduce-window(second, z), window={size=1x16 pad=0_0x15_0}, to_apply=add
  ROOT s = f32[1,65536]{1,0} add(a, b)
}
"""


def test_reads_through_a_slice_come_from_dram_up_to_the_slice_only():
    cost = _kernel(SLICE_SCANNED)
    sliced = 256 * 4096 * 4
    # each total is read by up to 16 windows: its first read from DRAM, the others cached
    assert cost.dram_bytes == sliced
    assert cost.cached_bytes == 16 * sliced - sliced


def test_two_slices_of_one_operand_need_both_parts_from_dram():
    # each slice is read 16 times over (the larger demand: 16 x 65536 elements); the
    # distinct elements are both slices' added, the whole operand: every byte from DRAM
    # once (the larger of the two slices' alone would have priced half of them)
    cost = _kernel(TWO_SLICES_SCANNED)
    assert cost.dram_bytes == 2 * 65536 * 4
    assert cost.cached_bytes == 16 * 65536 * 4 - 2 * 65536 * 4


def _divide(element_type: str) -> str:
    return f"""
HloModule m
ENTRY e {{
  a = {element_type}[4096]{{0}} parameter(0)
  b = {element_type}[4096]{{0}} parameter(1)
  ROOT d = {element_type}[4096]{{0}} divide(a, b)
}}
"""


def test_an_op_costs_its_measured_cycles():
    """On a Target with a measured op profile (h100: XLA's sm_90 cycles), a division
    costs what XLA's model charges it: half its cycles on its type, per element (a
    c128 division 2,280 cycles, an f32 one 19); an op the profile does not list (a
    compare) XLA's default of 3 cycles. Without a profile every op costs heron's
    throughput figure, and ``heron profile``'s roofline always does (times the type's
    measured ratio to f32)."""
    unmeasured = attrs.evolve(H100, op_cycles=())
    assert _kernel(_divide("f32"), H100).flops == 4096 * 19 / 2
    assert _kernel(_divide("c128"), H100).flops == 4096 * 2280 / 2
    assert _kernel(_divide("f64"), H100).flops == 4096 * 526 / 2
    f32 = _kernel(_divide("f32"), unmeasured)
    assert f32.flops == 4096 * FLOPS_PER_ELEMENT["divide"]
    assert _kernel(_divide("c128"), unmeasured).flops == f32.flops
    module = parse_module(
        _divide("c128")
        .replace("divide", "compare")
        .replace("c128[4096]{0} compare", "pred[4096]{0} compare")
        .replace("b)", "b), direction=LT")
    )
    assert lane_operations(module.entry, lane_costs(H100)) == 4096 * DEFAULT_OP_CYCLES / 2
    throughput = throughput_costs(H100)
    division = parse_module(_divide("c128"))
    assert lane_operations(division.entry, throughput) == pytest.approx(
        4096 * FLOPS_PER_ELEMENT["divide"] * 2280 / 19
    )
