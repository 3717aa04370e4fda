"""The loop-like launches follow XLA's rules, with the device facts taken from the Target.

- Loop unroll factor (XLA's ``ComputeLoopFusionConfig``): a loop vectorises
  once it has at least ``threads_per_core_limit x core_count`` elements (the
  threads the device keeps resident: 2048 x 132 = 270,336 on an H100, 2048 x
  108 = 221,184 on an A100), by 4 or 2, whichever divides the *element count*
  (not the minor dimension: a vector may span two rows); sub-byte outputs get
  a whole byte per thread whatever the shape.
- Loop, not a hero (XLA 0.12's ``GetEmitterFusionKind`` and
  ``GetDescriptionForTiledTransposeEmitter``): a fusion of several roots is
  never its concatenate emitter's, and a 4-bit transpose of the minor
  dimension never a tiled transpose; both launch over the output.
- Reduction blocks (XLA's ``CreateReductionFusion``): a column reduction whose
  kept minor dimension divides the warp, however small, is a small-column
  block of 128 threads; short power-of-two rows are multi-row blocks of as
  many threads as the row has elements, even when that makes one block.
- Scatter (XLA's ``ScatterWithDistributedUpdates``): the threads of a block
  are rounded up to whole warps of the target; the extra threads do nothing.

Kernels whose vectors span rows, and scatters with idle threads, run on the
interpreter against the reference evaluator.
"""

from __future__ import annotations

import math
import re

import attrs
import pytest
from heron_test_support.analysis import A100, H100, MI300X, analysed

from heron.compiler import compile_fusion, fusions_of
from heron.harness import CheckOptions, check_file, check_fusions
from heron.harness.corpus import default_corpus
from heron.hlo.parser import parse_module, parse_module_file
from heron.plugins.iteration import loop_unroll_factor, resident_threads
from heron.plugins.loop import LoopEmitter
from heron.plugins.scatter import ScatterEmitter
from heron.runtime.interpreter.device import InterpreterDevice

CORPUS = default_corpus()


def _negate(dims: tuple[int, ...], element: str = "f32") -> str:
    shape = f"{element}[{','.join(map(str, dims))}]"
    return (
        f"HloModule m\nfusion {{\n  p = {shape} parameter(0)\n  ROOT n = {shape} negate(p)\n}}\n"
        f"ENTRY main {{\n  p = {shape} parameter(0)\n"
        f"  ROOT f = {shape} fusion(p), kind=kLoop, calls=fusion\n}}\n"
    )


def _loop(dims: tuple[int, ...], target) -> LoopEmitter:
    [fusion] = fusions_of(parse_module(_negate(dims)))
    return LoopEmitter(analysed(fusion, target))


def test_resident_threads_are_the_targets():
    assert resident_threads(H100) == H100.threads_per_core_limit * H100.core_count == 2048 * 132
    assert resident_threads(A100) == 2048 * 108
    assert resident_threads(MI300X) == MI300X.threads_per_core_limit * MI300X.core_count


@pytest.mark.parametrize("target", [H100, A100, MI300X], ids=lambda t: t.name)
def test_a_loop_vectorises_from_the_targets_resident_threads(target):
    threshold = target.threads_per_core_limit * target.core_count  # 270,336 on an H100
    assert threshold % 4 == 0
    below = _loop((threshold // 4 - 1, 4), target)
    assert below.vector_size == 1
    assert below.launch_dimensions().num_threads >= threshold - 4
    at = _loop((threshold // 4, 4), target)
    assert at.vector_size == 4
    assert at.launch_dimensions().num_blocks == math.ceil(threshold / 4 / 128)


def test_the_vector_size_divides_the_element_count_not_the_minor_dimension():
    threshold = resident_threads(H100)
    rows = math.ceil(threshold / 150 / 4) * 4  # 150 * rows: a multiple of 4
    assert _loop((rows, 150), H100).vector_size == 4  # 150 % 4 != 0: vectors span rows
    assert _loop((rows + 1, 150), H100).vector_size == 2  # 150 * odd: 2 (mod 4)
    assert _loop((rows + 1, 151), H100).vector_size == 1  # odd element count
    # corpus iota_copy_bitcast: s32[60,20,7,150], 1,260,000 elements, x4 like XLA.
    [fusion] = fusions_of(parse_module_file(CORPUS / "common/loop/iota_copy_bitcast.hlo"))
    emitter = LoopEmitter(analysed(fusion, H100))
    assert emitter.vector_size == 4
    assert str(emitter.launch_dimensions()) == "blocks=2461 threads=128"


def test_unroll_factor_rule():
    h100 = resident_threads(H100)
    assert loop_unroll_factor(h100, H100) == 4
    assert loop_unroll_factor(h100 + 2, H100) == 2
    assert loop_unroll_factor(h100 + 1, H100) == 1
    assert loop_unroll_factor(h100 - 4, H100) == 1
    assert loop_unroll_factor(h100, H100, may_vectorize=False) == 1
    # Sub-byte outputs: a byte per thread whatever the count (3 s4: 2 per thread).
    assert loop_unroll_factor(3, H100, smallest_output_bits=4) == 2
    assert loop_unroll_factor(3, H100, smallest_output_bits=2) == 4
    assert loop_unroll_factor(h100, H100, smallest_output_bits=4) == 4


@pytest.mark.parametrize(("dims", "vector"), [((20, 150), 4), ((15, 150), 2), ((67, 31), 1)])
def test_vectors_spanning_rows_agree_with_the_reference(dims, vector):
    """A device of one core vectorises from 2048 elements: small kernels exercise the rule."""
    small = attrs.evolve(H100, core_count=1)
    assert math.prod(dims) >= resident_threads(small) == 2048
    [fusion] = fusions_of(parse_module(_negate(dims)))
    assert LoopEmitter(analysed(fusion, small)).vector_size == vector
    report = check_fusions([fusion], "rows", CheckOptions(target=small))
    assert report.ok, report.text()
    assert all(f.emitter == "loop" for f in report.fusions)


@pytest.mark.parametrize(
    ("name", "threads"),
    [("broadcast_constant_s4.hlo", 2), ("broadcast_non_scalar_constant_s4.hlo", 47)],
)
def test_sub_byte_outputs_get_a_byte_per_thread_for_an_odd_minor_dimension(name, threads):
    path = CORPUS / "common/loop" / name
    [fusion] = fusions_of(parse_module_file(path))
    emitter = LoopEmitter(analysed(fusion, H100))
    assert emitter.vector_size == 2
    assert emitter.launch_dimensions().num_threads == threads  # ceil(elements / 2)
    report = check_file(path)
    assert report.ok, report.text()


@pytest.mark.parametrize(
    ("name", "launch"),
    [
        ("gpu/transpose/partial_tile_s4.hlo", "blocks=5 threads=128"),  # 1,152 s4 / 2
        ("gpu/transpose/transpose_10_s4.hlo", "blocks=16 threads=128"),  # 4,096 s4 / 2
        ("gpu/concatenate/multiple_roots_epilogue.hlo", "blocks=128 threads=128"),
        ("gpu/concatenate/multiple_roots_shared_hero.hlo", "blocks=16 threads=128"),
    ],
)
def test_fusions_xla_gives_its_loop_emitter_launch_over_the_output(name, launch):
    """4-bit transposes of the minor dimension and multi-root concatenates: XLA 0.12's loops.

    One thread per output element (a whole byte of s4: two), not the
    transpose's tiles or the concatenate's largest operand.
    """
    path = CORPUS / name
    [fusion] = fusions_of(parse_module_file(path))
    analysis = analysed(fusion, H100)
    assert analysis.kind == "loop"
    emitter = LoopEmitter(analysis)
    assert str(emitter.launch_dimensions()) == launch
    assert emitter.vector_size == (2 if "s4" in name else 1)
    report = check_file(path)
    assert report.ok, report.text()
    assert all(f.emitter == "loop" for f in report.fusions)


@pytest.mark.parametrize(
    ("name", "kind", "launch", "shared", "shuffle"),
    [
        # f32[3,128,4] over 128: a kept minor dim of 4 divides the warp: 128 threads
        # hold 32 reduced rows of 4 each, one padded 32x5 tile (not 32x32 threads).
        ("gpu/reduce_column/small.hlo", "reduce_column_small", "3x128", "tensor<32x5xf32>", 16),
        # f64[4] -> f64[]: a multi-row block of one 4-thread row (not a whole warp).
        ("gpu/reduce_row/inefficient_codegen.hlo", "reduce_multirow", "1x4", None, 2),
    ],
)
def test_reduction_blocks_are_sized_to_the_reduction(name, kind, launch, shared, shuffle):
    """XLA's ``CreateReductionFusion``: small columns for any kept minor dim dividing the warp;
    multi-row rows of fewer threads than a warp however few blocks that leaves."""
    path = CORPUS / name
    [fusion] = fusions_of(parse_module_file(path))
    assert analysed(fusion, H100).kind == kind
    kernel = compile_fusion(fusion, H100, "cuda", stop_after="emitted")
    assert kernel.emitter == kind
    assert f"{kernel.launch.num_blocks}x{kernel.launch.thread_x}" == launch
    text = str(kernel.module)
    tiles = re.findall(r"allocate_shared\"\(\) : \(\) -> (tensor<[^>]*>)", text)
    assert tiles == ([shared] if shared else [])
    distances = re.findall(r"shuffle_reduce\".*?max_distance = (\d+)", text)
    assert distances and {int(d) for d in distances} == {shuffle}
    report = check_file(path)
    assert report.ok, report.text()


@pytest.mark.parametrize(
    ("name", "updates"),
    [
        ("overwrite.hlo", 18),
        ("unique_indices.hlo", 16),
        ("variadic_scatter_argmax.hlo", 72),
        ("variadic_scatter_simple.hlo", 72),
    ],
)
@pytest.mark.parametrize("target", [H100, MI300X], ids=lambda t: t.name)
def test_scatter_blocks_are_whole_warps_of_the_target(name, updates, target):
    path = CORPUS / "gpu/scatter" / name
    [fusion] = fusions_of(parse_module_file(path))
    emitter = ScatterEmitter(analysed(fusion, target))
    launch = emitter.launch_dimensions()
    assert emitter.vector_size == 1
    assert launch.num_blocks == 1
    assert launch.thread_x == math.ceil(updates / target.warp_size) * target.warp_size
    assert launch.thread_x > updates
    # The idle threads lie outside the thread map's domain (one block: th_x < updates),
    # so the loop's bounds check skips them.
    thread_map = emitter.thread_map()
    th_x = thread_map.dimensions[0]
    assert th_x.bounds.upper == updates - 1 or thread_map.constraints
    device = InterpreterDevice(warp_size=target.warp_size)
    report = check_file(path, CheckOptions(target=target), device=device)
    assert report.ok, report.text()
    assert all(f.emitter == "scatter" for f in report.fusions)
