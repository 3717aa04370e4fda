"""The input-slices emitter: one loop over the sliced input, a predicated store per slice.

No corpus folder has these fusions; the hand-written ``tests/data/check/slices_*.hlo``
(three slices of different shapes; overlapping sub-byte slices)
go through ``heron check`` with the registry forced to this emitter (each
output element written exactly once) and compile for sm_80, sm_90 and gfx942.
"""

from __future__ import annotations

from pathlib import Path

import pytest
from heron_test_support.analysis import analysed, compile_everywhere

from heron.compiler import fusions_of
from heron.emitters.ir_utils import walk_ops
from heron.harness import check_file, check_fusions
from heron.hlo.errors import UnsupportedError
from heron.hlo.parser import parse_module, parse_module_file
from heron.plugins.input_slices import InputSlicesEmitter, heron_emitter_specs
from heron.runtime.interpreter.device import InterpreterDevice

REPO = Path(__file__).resolve().parents[3]
DATA = REPO / "tests" / "data" / "check"
EDGE_CASES = ("slices_s4_overlap.hlo", "slices_three_shapes.hlo")


def test_the_edge_cases_are_the_listed_files():
    assert sorted(p.name for p in DATA.glob("slices_*.hlo")) == sorted(EDGE_CASES)


@pytest.mark.parametrize("name", EDGE_CASES)
def test_check_agrees_with_the_reference(name, force_emitter):
    force_emitter("input_slices", InputSlicesEmitter)
    report = check_file(DATA / name)
    assert [f.emitter for f in report.fusions] == ["input_slices"]
    assert report.ok, report.text()


def test_a_64_lane_wavefront_gives_the_same_result(force_emitter):
    force_emitter("input_slices", InputSlicesEmitter)
    module = parse_module_file(DATA / "slices_three_shapes.hlo")
    report = check_fusions(fusions_of(module), "slices", device=InterpreterDevice(warp_size=64))
    assert report.ok, report.text()


@pytest.mark.parametrize("name", EDGE_CASES)
def test_compiles_for_nvidia_and_amd(name):
    for fusion in fusions_of(parse_module_file(DATA / name)):
        compile_everywhere(InputSlicesEmitter, fusion)


def test_one_loop_over_the_input_computes_it_once():
    [fusion] = fusions_of(parse_module_file(DATA / "slices_three_shapes.hlo"))
    emitter = InputSlicesEmitter(analysed(fusion))
    assert emitter.iteration.shape.dims == (10, 37)
    assert emitter.iteration.vector_size == 1
    kernel = emitter.emit()
    [loop] = walk_ops(kernel.module.operation, "heron_gpu.loop")
    assert len(walk_ops(loop, "heron_gpu.pure_call")) == 1  # the add, once for all slices
    # One guarded write per slice; no stride tests (XLA fuses only unstrided slices).
    assert len(walk_ops(loop, "heron_gpu.predicated_insert")) == 3
    assert len(walk_ops(loop, "arith.remsi")) == 0


def test_sub_byte_slices_fill_a_byte_per_thread():
    [fusion] = fusions_of(parse_module_file(DATA / "slices_s4_overlap.hlo"))
    assert InputSlicesEmitter(analysed(fusion)).iteration.vector_size == 2


MIXED = """HloModule m
fusion {
  p = f32[8,8] parameter(0)
  q = f32[4,8] parameter(1)
  s0 = f32[2,8] slice(p), slice={[0:2], [0:8]}
  s1 = f32[2,8] slice(q), slice={[0:2], [0:8]}
  ROOT t = (f32[2,8], f32[2,8]) tuple(s0, s1)
}
ENTRY main {
  p = f32[8,8] parameter(0)
  q = f32[4,8] parameter(1)
  ROOT f = (f32[2,8], f32[2,8]) fusion(p, q), kind=kInput, calls=fusion
}
"""

NOT_A_SLICE = """HloModule m
fusion {
  p = f32[8,8] parameter(0)
  s0 = f32[2,8] slice(p), slice={[0:2], [0:8]}
  n = f32[2,8] negate(s0)
  ROOT t = (f32[2,8], f32[2,8]) tuple(s0, n)
}
ENTRY main {
  p = f32[8,8] parameter(0)
  ROOT f = (f32[2,8], f32[2,8]) fusion(p), kind=kInput, calls=fusion
}
"""


@pytest.mark.parametrize(
    ("text", "message"),
    [
        (MIXED, "slice 's1' reads f32\\[4,8\\]"),
        (NOT_A_SLICE, "root negate 'n' is not a slice"),
    ],
)
def test_unsupported_fusions_are_refused_by_name(text, message):
    [fusion] = fusions_of(parse_module(text, "bad.hlo"))
    with pytest.raises(UnsupportedError, match=message):
        InputSlicesEmitter(analysed(fusion))


def test_the_spec_claims_at_priority_ten():
    [spec] = heron_emitter_specs()
    assert (spec.name, spec.priority) == ("input_slices", 10)
