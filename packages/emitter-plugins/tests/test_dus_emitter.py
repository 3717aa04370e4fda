"""The in-place dynamic-update-slice emitter: a loop over the update, clamped starts, aliasing.

Every file of common/dynamic_update_slice and the hand-written
``tests/data/check/dus_*.hlo`` go through ``heron check`` with the registry
forced to this emitter: the output buffer starts as the aliased parameter
(``output_aliases``), the kernel writes only the window. That only the window
is written, each element once, is checked from the interpreter's per-byte
write counts; the files also compile for sm_80, sm_90 and gfx942.
"""

from __future__ import annotations

import re
from pathlib import Path

import numpy as np
import pytest
from heron_test_support.analysis import A100, H100, analysed, artefact_text, compile_everywhere

from heron.compiler import compile_emitted, compile_fusion, fusions_of, target_for_device
from heron.compiler.device_kernels import run_on_device
from heron.harness import check_file
from heron.hlo.errors import UnsupportedError
from heron.hlo.parser import parse_module, parse_module_file
from heron.plugins.dynamic_update_slice import DynamicUpdateSliceEmitter, heron_emitter_specs
from heron.runtime.interpreter.device import InterpreterDevice

REPO = Path(__file__).resolve().parents[3]
DATA = REPO / "tests" / "data" / "check"
FOLDER = "common/dynamic_update_slice"
CORPUS = (
    "int4.hlo",
    "mof.hlo",
    "operand_subgraph_two_roots.hlo",
    "simple.hlo",
    "vectorize_x1_too_small.hlo",
    "vectorize_x4.hlo",
)
EDGE_CASES = ("dus_clamped_starts.hlo", "dus_runtime_clamp.hlo")
FILES = [*(f"{FOLDER}/{n}" for n in CORPUS), *(f"edge/{n}" for n in EDGE_CASES)]


def _file(path: str, corpus_dir: Path) -> Path:
    return DATA / path.split("/", 1)[1] if path.startswith("edge/") else corpus_dir / path


def test_the_corpus_folder_holds_exactly_the_listed_files(corpus_dir):
    assert sorted(p.name for p in (corpus_dir / FOLDER).glob("*.hlo")) == sorted(CORPUS)
    assert sorted(p.name for p in DATA.glob("dus_*.hlo")) == sorted(EDGE_CASES)


@pytest.mark.parametrize("path", FILES)
def test_check_agrees_with_the_reference(path, corpus_dir, force_emitter):
    force_emitter("dynamic_update_slice", DynamicUpdateSliceEmitter)
    report = check_file(_file(path, corpus_dir))
    assert [f.emitter for f in report.fusions] == ["dynamic_update_slice"]
    assert report.ok, report.text()


@pytest.mark.parametrize("path", FILES)
def test_compiles_for_nvidia_and_amd(path, corpus_dir):
    for fusion in fusions_of(parse_module_file(_file(path, corpus_dir))):
        compiled = compile_everywhere(DynamicUpdateSliceEmitter, fusion)
        assert all(k.emitter == "dynamic_update_slice" for k in compiled)


def _element_writes(counts, shape) -> np.ndarray:
    """Per logical element (default layout): the most any of its bytes or bits was written."""
    element = shape.element_type
    if element.is_sub_byte:
        width = element.bit_width
        bits = np.repeat(counts.writes[:, None], 8, axis=1)
        if counts.bit_writes is not None:
            packed = counts.bit_writes.any(axis=1)
            bits = np.where(packed[:, None], counts.bit_writes, bits)
        flat = bits.reshape(-1)[: shape.num_elements * width].reshape(-1, width).max(axis=1)
    else:
        size = element.byte_width
        flat = counts.writes[: shape.num_elements * size].reshape(-1, size).max(axis=1)
    return flat.reshape(shape.dims)


def _run(fusion, inputs, warp_size=32):
    device = InterpreterDevice(warp_size=warp_size)
    kernel = compile_fusion(fusion, target_for_device(device, "interpreter"), "interpreter")
    return kernel, run_on_device(device, kernel, inputs)


@pytest.mark.parametrize(("i0", "i1", "rows", "cols"), [(17, -2, 15, 0), (-9, 40, 0, 24)])
def test_only_the_clamped_window_is_written(corpus_dir, force_emitter, i0, i1, rows, cols):
    """simple.hlo: f32[20,30] updated by f32[5,6]; out-of-range starts are clamped."""
    force_emitter("dynamic_update_slice", DynamicUpdateSliceEmitter)
    [fusion] = fusions_of(parse_module_file(corpus_dir / FOLDER / "simple.hlo"))
    rng = np.random.default_rng(0)
    operand = rng.standard_normal((20, 30)).astype(np.float32)
    update = rng.standard_normal((5, 6)).astype(np.float32)
    inputs = [operand, update, np.int32(i0), np.int32(i1)]
    kernel, run = _run(fusion, inputs, warp_size=64)
    assert kernel.output_aliases == {0: 0}
    window = np.zeros((20, 30), dtype=bool)
    window[rows : rows + 5, cols : cols + 6] = True
    writes = _element_writes(run.output_counts[0], kernel.output_shapes[0])
    assert (writes[window] == 1).all() and (writes[~window] == 0).all()
    expected = operand.copy()
    expected[window] = update.reshape(-1)
    np.testing.assert_array_equal(run.outputs[0], expected)


def test_int4_writes_only_the_update_nibbles(corpus_dir, force_emitter):
    """int4.hlo: s4[100,9] <- s4[100,6] at (0, 0): rows of 9 nibbles, so windows are unaligned."""
    force_emitter("dynamic_update_slice", DynamicUpdateSliceEmitter)
    [fusion] = fusions_of(parse_module_file(corpus_dir / FOLDER / "int4.hlo"))
    rng = np.random.default_rng(1)
    operand = rng.integers(-8, 8, (100, 9)).astype(np.int8)
    update = rng.integers(-8, 8, (100, 6)).astype(np.int8)
    kernel, run = _run(fusion, [operand, update])
    writes = _element_writes(run.output_counts[0], kernel.output_shapes[0])
    assert (writes[:, :6] == 1).all() and (writes[:, 6:] == 0).all()
    expected = operand.copy()
    expected[:, :6] = update
    np.testing.assert_array_equal(np.asarray(run.outputs[0], dtype=np.int8), expected)


def test_multi_output_aliases_each_operand(corpus_dir):
    [fusion] = fusions_of(parse_module_file(corpus_dir / FOLDER / "mof.hlo"))
    emitter = DynamicUpdateSliceEmitter(analysed(fusion))
    assert emitter.output_aliases() == {0: 0, 1: 2}
    assert emitter.iteration.shape.dims == (1, 11, 12)  # the update, not the operand
    assert emitter.launch_dimensions().num_threads == 2 * 128


@pytest.mark.parametrize(
    ("name", "target", "stores"),
    [
        # 240,000 update elements fill an A100 (2048 x 108 threads), not an H100 (x 132).
        ("vectorize_x4.hlo", A100, 4),
        ("vectorize_x4.hlo", H100, 1),
        ("vectorize_x1_too_small.hlo", A100, 1),
    ],
    ids=lambda v: getattr(v, "name", None),
)
def test_update_stores_are_vectorised_when_the_update_allows(corpus_dir, name, target, stores):
    [fusion] = fusions_of(parse_module_file(corpus_dir / FOLDER / name))
    kernel = DynamicUpdateSliceEmitter(analysed(fusion, target)).emit()
    ptx = artefact_text(compile_emitted(kernel, target, stop_after="ptx"), "ptx")
    found = set(re.findall(r"\bst\.global(?:\.[a-z0-9]+)+", ptx))
    assert found == ({"st.global.v4.b32"} if stores == 4 else {"st.global.b32"})


NOT_IN_PLACE = """HloModule m
fusion {
  p = f32[8,8] parameter(0)
  u = f32[2,2] parameter(1)
  i = s32[] parameter(2)
  n = f32[8,8] negate(p)
  ROOT d = f32[8,8] dynamic-update-slice(n, u, i, i)
}
ENTRY main {
  p = f32[8,8] parameter(0)
  u = f32[2,2] parameter(1)
  i = s32[] parameter(2)
  ROOT f = f32[8,8] fusion(p, u, i), kind=kLoop, calls=fusion
}
"""


def test_an_operand_that_is_not_a_parameter_is_refused_by_name():
    [fusion] = fusions_of(parse_module(NOT_IN_PLACE, "not_in_place.hlo"))
    with pytest.raises(UnsupportedError, match="updates negate 'n', not a fusion parameter"):
        DynamicUpdateSliceEmitter(analysed(fusion))


def test_the_spec_claims_at_priority_ten():
    [spec] = heron_emitter_specs()
    assert (spec.name, spec.priority) == ("dynamic_update_slice", 10)
