"""The reduction emitters (row, multi-row, column, small column) on the corpus and edge cases.

Each test forces its emitter with the ``force_emitter`` fixture (a registry
holding the loop emitter and the one under test), so the variants are tested
whatever hero selection decides; tests/test_corpus_compile.py and
tests/test_check_corpus.py run every corpus file (warps of 32, PTX sm_80 and
sm_90, HSACO gfx942) through the real registry. What is checked here:

- every corpus file of the four reduction folders agrees with the reference
  evaluator on 64-lane wavefronts (lowered for ROCm, shuffle width 64);
- the emitted structure: shuffles in a row reduction, shared memory and a
  barrier only when a row has several warps, none in a multi-row reduction;
- the hand-written edge cases of tests/data/check/reduce_*.hlo, compared
  bitwise (their reducers are exact in any order).

Float sums depend on the association order: the harness compares float
reduction outputs within ``heron.harness.tolerance.reassociation_bounds`` on
moderate inputs and only for write coverage on edge inputs; integer, pred
and non-reduction outputs stay bitwise.
"""

from __future__ import annotations

from pathlib import Path

import pytest

from heron.compiler import compile_backend, fusions_of, lower
from heron.compiler.driver import emit_one
from heron.harness import check_file
from heron.harness.corpus import default_corpus
from heron.hlo.parser import parse_module_file
from heron.plugins import reduction
from heron.runtime.interpreter.device import InterpreterDevice

ROOT = Path(__file__).resolve().parents[3]
CORPUS = default_corpus() / "gpu"
DATA = ROOT / "tests" / "data" / "check"
FOLDERS = ("reduce_row", "reduce_multirow", "reduce_column", "reduce_column_small")
FILES = [(folder, p.name) for folder in FOLDERS for p in sorted((CORPUS / folder).glob("*.hlo"))]
#: Files too slow to run twice (23.6M-element input): checked with warps of 32 only.
SLOW = {"f32_32_v2.hlo", "odd_sizes.hlo"}
EDGE_FILES = sorted(p.name for p in DATA.glob("reduce_*.hlo"))
EM_AMDGPU = 224


def _factory(name: str):
    return next(s.factory for s in reduction.heron_emitter_specs() if s.name == name)


def test_the_corpus_folders_are_there():
    names = {name for _, name in FILES}
    assert len(FILES) == 26
    assert {"epilogue.hlo", "f32_x8.hlo", "odd_sizes.hlo", "f32_8_v2.hlo"} <= names


def test_specs_claim_by_fusion_kind_at_priority_10():
    specs = reduction.heron_emitter_specs()
    assert [s.name for s in specs] == [
        "reduce_row",
        "reduce_multirow",
        "reduce_column",
        "reduce_column_small",
    ]
    assert {s.priority for s in specs} == {10}
    assert not specs[0].claims(object())  # not a fusion: no claim, no import
    (fusion,) = fusions_of(parse_module_file(CORPUS / "reduce_multirow" / "f32_x8.hlo"))
    assert [s.claims(fusion) for s in specs] == [False, True, False, False]


@pytest.mark.parametrize(
    ("folder", "name"),
    [(f, n) for f, n in FILES if n not in SLOW],
    ids=[f"{f}/{n}" for f, n in FILES if n not in SLOW],
)
def test_corpus_file_agrees_on_64_lane_wavefronts(folder, name, force_emitter):
    force_emitter(folder, _factory(folder))
    report = check_file(CORPUS / folder / name, device=InterpreterDevice(warp_size=64))
    assert report.ok, report.text()


@pytest.mark.parametrize(("folder", "name"), FILES, ids=[f"{f}/{n}" for f, n in FILES])
def test_corpus_file_compiles_for_both_vendors(folder, name, force_emitter):
    from heron.runtime.cuda.compiler import validate_ptx

    force_emitter(folder, _factory(folder))
    module = parse_module_file(CORPUS / folder / name)
    for fusion in fusions_of(module):
        kernel = emit_one(fusion)
        assert kernel.emitter == folder
        cuda = str(lower(kernel, "cuda"))
        for arch in ("sm_80", "sm_90"):
            result = compile_backend(cuda, "cuda", arch, assemble=False, fusion_name=fusion.name)
            assert result.kernel_names == (kernel.name,)
            validate_ptx(result.ptx, arch)
        rocm = str(lower(emit_one(fusion), "rocm"))  # lowering changes the module in place
        image = compile_backend(rocm, "rocm", "gfx942", fusion_name=fusion.name).hsaco
        assert image[:4] == b"\x7fELF"
        assert int.from_bytes(image[18:20], "little") == EM_AMDGPU


def _emitted(path: Path, name: str, force_emitter) -> tuple[str, object]:
    force_emitter(name, _factory(name))
    (fusion,) = fusions_of(parse_module_file(path))
    kernel = emit_one(fusion)
    return str(kernel.module), kernel


def test_row_reduction_shuffles_and_uses_shared_memory_between_warps(force_emitter):
    text, kernel = _emitted(CORPUS / "reduce_row" / "epilogue.hlo", "reduce_row", force_emitter)
    # 2048 elements a row: 128 threads (4 warps) a row, two rows a block.
    assert kernel.launch.thread_x == 256 and kernel.launch.block_x == 4
    assert text.count("heron_gpu.shuffle_reduce") == 2  # per warp, then across warps
    assert "heron_gpu.allocate_shared" in text and "heron_gpu.sync_threads" in text
    assert "tensor<2x4xf32>" in text  # [rows a block, warps a row]
    assert "heron_gpu.predicated_insert" in text
    lowered = str(lower(kernel, "cuda", stop_after="lower-tensors"))
    assert "vector<2xf32>" in lowered  # two neighbours a read (XLA: f32 rows read 2-wide)


def test_single_warp_row_reduction_needs_no_shared_memory(force_emitter):
    text, kernel = _emitted(CORPUS / "reduce_row" / "small_s32.hlo", "reduce_row", force_emitter)
    assert kernel.launch.thread_x == 256  # 32 lanes a row of 128, 8 rows a block
    assert text.count("heron_gpu.shuffle_reduce") == 1
    assert "allocate_shared" not in text and "sync_threads" not in text


def test_multi_row_reduction_shuffles_within_segments_without_shared_memory(force_emitter):
    text, kernel = _emitted(
        CORPUS / "reduce_multirow" / "f32_x8.hlo", "reduce_multirow", force_emitter
    )
    # XLA's check: 8 rows a warp, "shuffle_reduce ... to 2" (4 lanes a row of 4 floats).
    assert text.count('"heron_gpu.shuffle_reduce"') == 1 and "max_distance = 2 " in text
    assert "allocate_shared" not in text and "sync_threads" not in text
    assert kernel.launch.thread_x == 256 and kernel.launch.block_x == 16


def test_column_reductions_transpose_through_padded_tiles(force_emitter):
    text, _ = _emitted(
        CORPUS / "reduce_column_small" / "f32_8_v2.hlo", "reduce_column_small", force_emitter
    )
    assert "tensor<32x9xf32>" in text and "max_distance = 16 " in text
    text, _ = _emitted(
        CORPUS / "reduce_column_small" / "f32_32_v2.hlo", "reduce_column_small", force_emitter
    )
    assert "tensor<8x33xf32>" in text and "max_distance = 4 " in text
    text, kernel = _emitted(
        CORPUS / "reduce_column" / "odd_sizes.hlo", "reduce_column", force_emitter
    )
    assert "tensor<32x33xf32>" in text and "heron_gpu.sync_threads" in text
    assert kernel.launch.thread_x == 1024 and kernel.launch.block_x == 13 * 11


def test_reduction_groups_run_on_block_y(force_emitter):
    _, kernel = _emitted(
        CORPUS / "reduce_row" / "reduction_groups.hlo", "reduce_row", force_emitter
    )
    assert kernel.launch.block_y == 2
    _, kernel = _emitted(CORPUS / "reduce_row" / "mof_epilogue.hlo", "reduce_row", force_emitter)
    assert kernel.launch.block_y == 1  # both reductions read param_0: one group


def test_a_variant_that_does_not_fit_falls_back_to_the_shape_s_variant(force_emitter):
    path = CORPUS / "reduce_row" / "reduction_groups_two_in_same_group.hlo"
    (fusion,) = fusions_of(parse_module_file(path))
    emitter = _factory("reduce_row")(fusion)
    assert isinstance(emitter, reduction.SmallColumnReductionEmitter)  # 32 kept columns
    with pytest.raises(reduction.VariantMismatch, match="column reduction, not a row one"):
        reduction.RowReductionEmitter(fusion)


def test_the_edge_case_files_are_there():
    assert {
        "reduce_scalar_s32.hlo",
        "reduce_row_odd_max.hlo",
        "reduce_size1_dims.hlo",
        "reduce_tall_column_f32.hlo",
        "reduce_tall_small_column_s32.hlo",
        "reduce_argmax.hlo",
        "reduce_side_output.hlo",
    } <= set(EDGE_FILES)


EDGE_VARIANTS = {
    "reduce_scalar_s32.hlo": "reduce_row",
    "reduce_row_odd_max.hlo": "reduce_row",
    "reduce_size1_dims.hlo": "reduce_row",
    "reduce_tall_column_f32.hlo": "reduce_column",
    "reduce_tall_small_column_s32.hlo": "reduce_column_small",
    "reduce_argmax.hlo": "reduce_row",
    "reduce_side_output.hlo": "reduce_row",
}


@pytest.mark.parametrize("name", EDGE_FILES)
@pytest.mark.parametrize("warp", [32, 64])
def test_edge_case_agrees_bitwise(name, warp, force_emitter, monkeypatch):
    variant = EDGE_VARIANTS[name]
    force_emitter(variant, _factory(variant))
    (fusion,) = fusions_of(parse_module_file(DATA / name))
    assert type(reduction.natural_variant(fusion)).name == variant
    report = check_file(DATA / name, device=InterpreterDevice(warp_size=warp))
    assert report.ok, report.text()
    assert report.text().endswith("all agree")


def test_unsupported_reduction_names_the_reduce():
    from heron.hlo import parse_module

    module = parse_module(
        """
add {
  a = f32[] parameter(0)
  b = f32[] parameter(1)
  ROOT s = f32[] add(a, b)
}
fusion {
  p = f32[4,5,6,7] parameter(0)
  c = f32[] constant(0)
  ROOT r = f32[5,7] reduce(p, c), dimensions={0,2}, to_apply=add
}
"""
    )
    (fusion,) = fusions_of(module)
    with pytest.raises(Exception, match="reduce 'r'.*do not form"):
        reduction.RowReductionEmitter(fusion)
