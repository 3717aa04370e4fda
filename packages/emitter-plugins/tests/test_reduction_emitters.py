"""The reduction emitters (row, multi-row, column, small column) on the corpus and edge cases.

Hero selection picks the variant (and its parameters) once; most tests force
that variant with the ``force_emitter`` fixture (a registry holding the loop
emitter and the one under test) on an H100 analysis, where it is the one
selected; tests/test_corpus_compile.py and tests/test_check_corpus.py run
every corpus file (warps of 32, PTX sm_80 and sm_90, HSACO gfx942) through the
real registry. What is checked here:

- every corpus file of the four reduction folders agrees with the reference
  evaluator on 64-lane wavefronts, with the emitter hero selection picks for
  a 64-lane target (XLA reads the device's warp size: a few small reductions
  become loop fusions there);
- the emitted structure: shuffles in a row reduction, shared memory and a
  barrier only when a row has several warps, none in a multi-row reduction;
- the hand-written edge cases of tests/data/check/reduce_*.hlo, compared
  bitwise (their reducers are exact in any order).

Float sums depend on the association order: the harness compares float
reduction outputs within the reassociation bounds of
``heron.harness.tolerance.output_tolerance`` on moderate inputs and only for
write coverage on edge inputs; integer, pred and non-reduction outputs stay
bitwise.
"""

from __future__ import annotations

from pathlib import Path

import pytest
from heron_test_support.analysis import A100, H100, MI300X, analysed

from heron.compiler import compile_fusion, fusions_of
from heron.harness import check_file
from heron.harness.corpus import default_corpus, expected_emitter
from heron.hlo.errors import UnsupportedError
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


def _factory(name: str):
    return next(s.factory for s in reduction.heron_emitter_specs() if s.name == name)


def _fusion(path: Path):
    (fusion,) = fusions_of(parse_module_file(path))
    return fusion


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
    assert [s.factory for s in specs] == [
        reduction.RowReductionEmitter,
        reduction.MultiRowReductionEmitter,
        reduction.ColumnReductionEmitter,
        reduction.SmallColumnReductionEmitter,
    ]
    assert not specs[0].claims(object())  # not an analysis: no claim
    fusion = _fusion(CORPUS / "reduce_multirow" / "f32_x8.hlo")
    assert not any(s.claims(fusion) for s in specs)  # a fusion is not its analysis
    assert [s.claims(analysed(fusion)) for s in specs] == [False, True, False, False]


@pytest.mark.parametrize(
    ("folder", "name"),
    [(f, n) for f, n in FILES if n not in SLOW],
    ids=[f"{f}/{n}" for f, n in FILES if n not in SLOW],
)
def test_corpus_file_agrees_on_64_lane_wavefronts(folder, name):
    path = CORPUS / folder / name
    chosen = analysed(_fusion(path), MI300X).kind
    report = check_file(path, device=InterpreterDevice(warp_size=64))
    assert report.ok, report.text()
    assert f"({chosen} emitter, interpreter)" in report.text()


@pytest.mark.parametrize(("folder", "name"), FILES, ids=[f"{f}/{n}" for f, n in FILES])
def test_corpus_file_compiles_for_both_vendors(folder, name, force_emitter):
    """The variant XLA picks compiles for sm_80 and sm_90 (forced) and gfx942 (selected).

    The backends check their products: the kernel in the PTX, ptxas accepting
    it when installed, the HSACO an AMDGPU ELF.
    """
    path = CORPUS / folder / name
    variant = expected_emitter(path)
    fusion = _fusion(path)
    rocm = compile_fusion(fusion, MI300X)
    assert rocm.emitter == analysed(fusion, MI300X).kind and rocm.image.format == "hsaco"
    force_emitter(variant, _factory(variant))
    for target in (A100, H100):
        kernel = compile_fusion(fusion, target)
        assert kernel.emitter == variant
        assert kernel.image is not None and kernel.image.format in ("ptx", "cubin")


def _emitted(path: Path, name: str, force_emitter) -> tuple[str, object]:
    force_emitter(name, _factory(name))
    kernel = compile_fusion(_fusion(path), H100, stop_after="emitted")
    return str(kernel.module), kernel


def test_row_reduction_shuffles_and_uses_shared_memory_between_warps(force_emitter):
    text, kernel = _emitted(CORPUS / "reduce_row" / "epilogue.hlo", "reduce_row", force_emitter)
    # 2048 elements a row: 128 threads (4 warps) a row, two rows a block.
    assert kernel.launch.thread_x == 256 and kernel.launch.block_x == 4
    assert text.count("heron_gpu.shuffle_reduce") == 2  # per warp, then across warps
    assert "heron_gpu.allocate_shared" in text and "heron_gpu.sync_threads" in text
    assert "tensor<2x4xf32>" in text  # [rows a block, warps a row]
    assert "heron_gpu.predicated_insert" in text
    lowered = compile_fusion(
        _fusion(CORPUS / "reduce_row" / "epilogue.hlo"), H100, stop_after="lower-tensors"
    )
    assert "vector<2xf32>" in str(
        lowered.module
    )  # two neighbours a read (XLA: f32 rows read 2-wide)


def _sibling_row_reductions(count: int) -> str:
    """A fusion of ``count`` row reductions of one f32[8,2048] input (four warps a row:
    each reduction's tile goes through shared memory)."""
    lines = [
        "HloModule siblings",
        "add { a = f32[] parameter(0) b = f32[] parameter(1) ROOT s = f32[] add(a, b) }",
        "ENTRY main {",
        "  x = f32[8,2048]{1,0} parameter(0)",
        "  zero = f32[] constant(0)",
    ]
    for k in range(count):
        lines += [
            f"  c{k} = f32[] constant({k + 1}.5)",
            f"  b{k} = f32[8,2048]{{1,0}} broadcast(c{k}), dimensions={{}}",
            f"  m{k} = f32[8,2048]{{1,0}} multiply(x, b{k})",
            f"  r{k} = f32[8]{{0}} reduce(m{k}, zero), dimensions={{1}}, to_apply=add",
        ]
    shapes = ", ".join(["f32[8]{0}"] * count)
    roots = ", ".join(f"r{k}" for k in range(count))
    return "\n".join([*lines, f"  ROOT t = ({shapes}) tuple({roots})", "}"]) + "\n"


def test_more_row_reductions_than_one_barrier_takes_sync_in_several(tmp_path, force_emitter):
    """Seventeen sibling row reductions (a jaxtronomy lens gradient's fusion) sync their
    seventeen tiles in two barriers, the dialect's sync_threads taking sixteen tensors;
    the fusion passes had made the fusion and its emission refused it."""
    path = tmp_path / "siblings.hlo"
    path.write_text(_sibling_row_reductions(17))
    text, _ = _emitted(path, "reduce_row", force_emitter)
    assert text.count("heron_gpu.sync_threads") == 2
    report = check_file(path)
    assert report.ok, report.text()


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


def test_the_variant_is_xla_s_and_the_kernel_names_it():
    """reduction_groups_two_in_same_group sits in XLA's reduce_row tests, but is a column
    reduction [128, 288, 32] that XLA emits with its small-column emitter."""
    path = CORPUS / "reduce_row" / "reduction_groups_two_in_same_group.hlo"
    fusion = _fusion(path)
    analysis = analysed(fusion)
    assert analysis.kind == "reduce_column_small" == expected_emitter(path)
    assert analysis.reduction.dimensions.dimensions == (128, 288, 32)
    kernel = compile_fusion(fusion, H100, stop_after="emitted")
    assert kernel.emitter == "reduce_column_small" and kernel.launch.thread_x == 128


def test_a_variant_forced_on_another_shape_is_refused_naming_it():
    fusion = _fusion(CORPUS / "reduce_row" / "reduction_groups_two_in_same_group.hlo")
    with pytest.raises(UnsupportedError, match="reduce_row emitter.*column reduction, not a row"):
        reduction.RowReductionEmitter(analysed(fusion))
    with pytest.raises(UnsupportedError, match="chose 'reduce_column_small', not a multi-row"):
        reduction.MultiRowReductionEmitter(analysed(fusion))
    loop = _fusion(CORPUS.parent / "common" / "loop" / "vectorize_x4.hlo")
    with pytest.raises(UnsupportedError, match="no reduction hero.*kind is 'loop'"):
        reduction.ColumnReductionEmitter(analysed(loop))


def test_the_multi_row_vector_is_the_analysis_s():
    fusion = _fusion(CORPUS / "reduce_multirow" / "f32_x8.hlo")
    analysis = analysed(fusion)
    emitter = reduction.MultiRowReductionEmitter(analysis)
    assert emitter.vector_size == analysis.reduction.vector_size == 1  # 4 lanes a row of 4
    assert emitter.writes_each_element_once is False


def test_the_edge_case_files_are_there():
    assert {
        "reduce_scalar_s32.hlo",
        "reduce_row_odd_max.hlo",
        "reduce_size1_dims.hlo",
        "reduce_tall_column_f32.hlo",
        "reduce_tall_small_column_s32.hlo",
        "reduce_argmax.hlo",
        "reduce_argmax_column.hlo",
        "reduce_side_output.hlo",
    } <= set(EDGE_FILES)


def test_a_variadic_column_reduction_reads_two_columns_a_thread():
    """XLA:GPU 0.12 launches a column argmax of f32[4096, 32768] in 512 blocks: two
    columns a thread (benchmarks/launches_vs_xla.py); a variadic row reduction reads one."""
    emitter = reduction.ColumnReductionEmitter(analysed(_fusion(DATA / "reduce_argmax_column.hlo")))
    assert emitter.vector_size == 2 and emitter.blocks == 3  # 130 columns, 64 a block
    row = reduction.RowReductionEmitter(analysed(_fusion(DATA / "reduce_argmax.hlo")))
    assert row.vector_size == 1


def test_column_tiles_fit_the_block_s_shared_memory():
    """Three f32 sums of bf16 columns would take 48.4 KiB of tiles four columns a thread
    (ptxas refused a ResNet-50 step's kernel): the emitter reads two, under the 48 KiB."""
    fusion = _fusion(DATA / "reduce_column_three_sums_bf16.hlo")
    emitter = reduction.ColumnReductionEmitter(analysed(fusion))
    assert emitter.vector_size == 2 and emitter.blocks == 2048 // 64
    tile_bytes = 32 * (32 * emitter.vector_size + 1) * 4 * 3
    assert tile_bytes <= H100.shared_memory_per_block < 32 * (32 * 4 + 1) * 4 * 3
    kernel = compile_fusion(fusion, H100, "cuda")  # ptxas takes it
    assert kernel.image is not None and kernel.image.format == "cubin"


EDGE_VARIANTS = {
    "reduce_scalar_s32.hlo": "reduce_row",
    "reduce_row_odd_max.hlo": "reduce_row",
    "reduce_size1_dims.hlo": "reduce_row",
    "reduce_tall_column_f32.hlo": "reduce_column",
    "reduce_tall_small_column_s32.hlo": "reduce_column_small",
    "reduce_argmax.hlo": "reduce_row",
    "reduce_argmax_column.hlo": "reduce_column",
    "reduce_side_output.hlo": "reduce_row",
    "reduce_init_parameter_bare_bijection.hlo": "reduce_row",
    "reduce_column_three_sums_bf16.hlo": "reduce_column",
}


#: What hero selection picks for 64-lane wavefronts where it differs (XLA's rule with a
#: warp of 64: a row of 40 is not worth a reduction); None: a loop fusion whose outputs
#: differ in size, which no emitter takes (XLA's fusion passes would not form it).
EDGE_VARIANTS_64 = {"reduce_row_odd_max.hlo": "loop", "reduce_side_output.hlo": None}


@pytest.mark.parametrize("name", EDGE_FILES)
def test_edge_case_agrees_bitwise(name, force_emitter):
    variant = EDGE_VARIANTS[name]
    assert analysed(_fusion(DATA / name)).kind == variant
    force_emitter(variant, _factory(variant))
    report = check_file(DATA / name)
    assert report.ok, report.text()
    assert report.text().endswith("all agree")


@pytest.mark.parametrize("name", EDGE_FILES)
def test_edge_case_on_64_lane_wavefronts(name):
    variant = EDGE_VARIANTS_64.get(name, EDGE_VARIANTS[name])
    fusion = _fusion(DATA / name)
    report = check_file(DATA / name, device=InterpreterDevice(warp_size=64))
    if variant is None:
        assert analysed(fusion, MI300X).kind == "loop"
        assert "a loop fusion's outputs must have the same number of elements" in report.text()
        return
    assert analysed(fusion, MI300X).kind == variant
    assert report.ok, report.text()
    assert f"({variant} emitter, interpreter)" in report.text()


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
    analysis = analysed(fusion)
    assert analysis.kind == "loop"  # kept {1, 3} and reduced {0, 2} both interleave
    with pytest.raises(UnsupportedError, match="fusion 'fusion': the reduce_row emitter"):
        reduction.RowReductionEmitter(analysis)


def _reduction_fusion(body: str):
    from heron.hlo import parse_module

    module = parse_module(
        f"""
add {{
  a = f32[] parameter(0)
  b = f32[] parameter(1)
  ROOT s = f32[] add(a, b)
}}
fusion {{
{body}
}}
"""
    )
    (fusion,) = fusions_of(module)
    return fusion


def test_every_variant_refuses_when_built_as_its_spec_promises():
    """The fusion passes build these emitters instead of emitting each fusion they make
    (``EmitterSpec.refuses_when_built``): what they cannot write they refuse when built."""
    assert all(spec.refuses_when_built for spec in reduction.heron_emitter_specs())


def test_an_epilogue_root_of_another_shape_is_refused_when_built():
    """A root computed from a row reduction must have its reduce's output shape (only a
    reduction to a scalar may be broadcast); f32[16,1] after a reduce to f32[16] is not."""
    fusion = _reduction_fusion(
        """  p = f32[16,512] parameter(0)
  c = f32[] constant(0)
  r = f32[16] reduce(p, c), dimensions={1}, to_apply=add
  b = f32[16,1] bitcast(r)
  ROOT t = (f32[16], f32[16,1]) tuple(r, b)"""
    )
    analysis = analysed(fusion)
    emitter = _factory(analysis.kind)
    with pytest.raises(UnsupportedError, match="bitcast 'b'.*an epilogue root whose shape differs"):
        emitter(analysis)


def test_a_reduction_to_a_scalar_may_be_broadcast_in_its_epilogue():
    """The one epilogue of another shape the emitters write, built and emitted: XLA's
    ``side_output_broadcast`` (a sum to a scalar broadcast back to the input's shape)."""
    analysis = analysed(_fusion(CORPUS / "reduce_row" / "side_output_broadcast.hlo"))
    assert analysis.reduction is not None, analysis.kind
    assert _factory(analysis.kind)(analysis).emit().module is not None


def test_an_epilogue_of_two_ranks_is_refused_when_built():
    """blackjax's MCLMC step: ``x * exp(sum(x))`` and ``exp(sum(x))`` both outputs. Their
    epilogue is one function indexed as the scalar root is, so the vector root has no
    index to read ``x`` at: refused when built (multi-output fusion then leaves the two
    kernels apart), never a fusion the emitter refuses only while emitting it."""
    fusion = _reduction_fusion(
        """  x = f32[4] parameter(0)
  zero = f32[] constant(0)
  ss = f32[] reduce(x, zero), dimensions={0}, to_apply=add
  e = f32[] exponential(ss)
  eb = f32[4] broadcast(e), dimensions={}
  r = f32[4] multiply(x, eb)
  ROOT t = (f32[], f32[4]) tuple(e, r)"""
    )
    analysis = analysed(fusion)
    emitter = _factory(analysis.kind)
    with pytest.raises(UnsupportedError, match="multiply 'r'.*an epilogue root of rank 1 beside"):
        emitter(analysis)


def test_a_program_of_a_sum_s_exponential_and_its_product_runs(tmp_path):
    """The same two outputs as a program: two kernels, the evaluator's answers."""
    from heron.cli.main import main

    path = tmp_path / "mclmc.hlo"
    path.write_text(
        """HloModule mclmc
add {
  a = f32[] parameter(0)
  b = f32[] parameter(1)
  ROOT s = f32[] add(a, b)
}
ENTRY main {
  x = f32[4] parameter(0)
  zero = f32[] constant(0)
  ss = f32[] reduce(x, zero), dimensions={0}, to_apply=add
  e = f32[] exponential(ss)
  eb = f32[4] broadcast(e), dimensions={}
  r = f32[4] multiply(x, eb)
  ROOT t = (f32[4], f32[]) tuple(r, e)
}
"""
    )
    assert main(["run", "--backend", "interpreter", "--check", str(path)]) == 0


def test_a_reduction_with_twenty_side_outputs_runs(tmp_path):
    """XLA's multi-output fusion of numpyro's distributions put one reduce and 23 side
    outputs in a kInput fusion; the reduction's per-thread loop carries them all (once
    refused: 17 accumulators and side outputs exceeded a loop's 16)."""
    from heron.cli.main import main

    sides = 20
    body = "\n".join(
        f"  c{i} = f32[] constant({i})\n  b{i} = f32[2]{{0}} broadcast(c{i}), dimensions={{}}\n"
        f"  o{i} = f32[2]{{0}} multiply(p0, b{i})"
        for i in range(1, sides + 1)
    )
    outputs = ", ".join(f"o{i}" for i in range(1, sides + 1))
    shapes = ", ".join(["f32[]", *["f32[2]{0}"] * sides])
    path = tmp_path / "side_outputs.hlo"
    path.write_text(
        f"""HloModule side_outputs
add {{
  a = f32[] parameter(0)
  b = f32[] parameter(1)
  ROOT s = f32[] add(a, b)
}}
fused {{
  p0 = f32[2]{{0}} parameter(0)
  z = f32[] constant(0)
  r = f32[] reduce(p0, z), dimensions={{0}}, to_apply=add
{body}
  ROOT t = ({shapes}) tuple(r, {outputs})
}}
ENTRY main {{
  p0 = f32[2]{{0}} parameter(0)
  ROOT f = ({shapes}) fusion(p0), kind=kInput, calls=fused
}}
"""
    )
    assert main(["run", "--backend", "interpreter", "--check", str(path)]) == 0
