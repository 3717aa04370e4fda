"""The transpose emitter: the corpus and edge cases on the interpreter, IR structure, compiles.

The emitter is forced through a registry (``force_emitter``), so these tests
hold whatever hero selection decides (tests/test_corpus_compile.py and
tests/test_check_corpus.py run every corpus file through the real registry).
``multiple_roots_one_shmem_transpose`` (46M elements, about 70 s on the
interpreter) is checked here on a shrunk copy with the same structure
(tests/data/check/transpose_shrunk_one_shmem_transpose.hlo); the full file is
still emitted and compiled.
"""

from __future__ import annotations

from pathlib import Path

import pytest
from heron_test_support.analysis import H100, analysed

from heron.compiler import compile_fusion, fusions_of
from heron.emitters.transposes import normalise_transpose
from heron.harness.check import check_file, check_fusions
from heron.harness.corpus import CORPUS_TARGETS, compile_corpus_file, default_corpus
from heron.hlo.errors import UnsupportedError
from heron.hlo.parser import parse_module, parse_module_file
from heron.plugins.transpose import TransposeEmitter, heron_emitter_specs
from heron.runtime.interpreter.device import InterpreterDevice

CORPUS = default_corpus() / "gpu" / "transpose"
EDGE_CASES = Path(__file__).resolve().parents[3] / "tests" / "data" / "check"
CORPUS_FILES = sorted(CORPUS.glob("*.hlo"))
EDGE_FILES = sorted(EDGE_CASES.glob("transpose_*.hlo"))
SHRUNK = {"multiple_roots_one_shmem_transpose.hlo"}


@pytest.fixture
def transpose(force_emitter, monkeypatch, request):
    force_emitter("transpose", TransposeEmitter)


def _fusion(path: Path):
    return fusions_of(parse_module_file(path))[0]


def test_corpus_is_present():
    assert len(CORPUS_FILES) == 22
    assert len(EDGE_FILES) == 6


#: 4-bit transposes of the minor dimension: XLA 0.12 never tiles them (loop fusions).
NOT_TILED = {"partial_tile_s4.hlo", "transpose_10_s4.hlo", "transpose_s4.hlo"}
CHECKED = [p for p in CORPUS_FILES + EDGE_FILES if p.name not in SHRUNK | NOT_TILED]


def test_exactly_the_4_bit_minor_transposes_are_not_tiled():
    loops = {p.name for p in CORPUS_FILES + EDGE_FILES if analysed(_fusion(p)).kind == "loop"}
    assert loops == NOT_TILED


@pytest.mark.parametrize("transpose", sorted(NOT_TILED), indirect=True)
def test_a_transpose_that_is_not_tiled_is_refused_by_name(transpose, request):
    name = request.node.callspec.params["transpose"]
    path = CORPUS / name if (CORPUS / name).exists() else EDGE_CASES / name
    with pytest.raises(Exception, match="found no tiled transpose in this fusion .*'loop'"):
        TransposeEmitter(analysed(_fusion(path)))


S4_KEPT_MINOR = """HloModule m
fusion {
  p = s4[35,21,2] parameter(0)
  ROOT t = s4[21,35,2] transpose(p), dimensions={1,0,2}
}
ENTRY main {
  p = s4[35,21,2] parameter(0)
  ROOT f = s4[21,35,2] fusion(p), kind=kInput, calls=fusion
}
"""


def test_a_4_bit_transpose_keeping_the_minor_dimension_is_tiled_and_agrees(transpose):
    """Sub-byte elements one per byte in the shared tile; odd sizes, packed global buffers."""
    [fusion] = fusions_of(parse_module(S4_KEPT_MINOR, "s4_kept_minor.hlo"))
    assert analysed(fusion).kind == "transpose"
    report = check_fusions([fusion], "s4_kept_minor")
    assert report.ok, report.text()
    assert [f.emitter for f in report.fusions] == ["transpose"]


@pytest.mark.parametrize("transpose", CHECKED, indirect=True, ids=lambda p: p.name)
def test_check_on_the_interpreter(transpose, request):
    path = request.node.callspec.params["transpose"]
    report = check_file(path)
    assert report.ok, report.text()
    assert "transpose emitter" in report.text()


WARP_64 = [CORPUS / "fused_transpose_210.hlo", EDGE_CASES / "transpose_side_output.hlo"]


@pytest.mark.parametrize("transpose", WARP_64, indirect=True, ids=lambda p: p.name)
def test_check_on_64_lane_wavefronts(transpose, request):
    path = request.node.callspec.params["transpose"]
    report = check_file(path, device=InterpreterDevice(warp_size=64))
    assert report.ok, report.text()


COMPILED = [
    CORPUS / "epilogue.hlo",
    CORPUS / "fused_transpose_102.hlo",
    CORPUS / "packed_transpose_s8.hlo",
    CORPUS / "side_outputs.hlo",
    CORPUS / "transpose_1302.hlo",
    CORPUS / "multiple_roots_one_shmem_transpose.hlo",
    EDGE_CASES / "transpose_bf16.hlo",
]


@pytest.mark.parametrize("transpose", COMPILED, indirect=True, ids=lambda p: p.name)
def test_compiles_to_ptx_and_hsaco(transpose, request):
    path = request.node.callspec.params["transpose"]
    chosen, produced = compile_corpus_file(path)
    assert chosen == ("transpose",)
    assert produced == ["sm_80", "sm_90", "gfx942"]
    assert len(CORPUS_TARGETS) == 3


@pytest.mark.parametrize(
    ("name", "tile"),
    [
        ("epilogue.hlo", "tensor<32x33xf32>"),
        ("fused_transpose_102.hlo", "tensor<32x33x3xi8>"),
        ("packed_transpose_s16.hlo", "tensor<64x65xi16>"),
        ("packed_transpose_s8.hlo", "tensor<128x129xi8>"),
    ],
)
def test_emitted_ir_has_a_padded_shared_tile_and_a_barrier(name, tile):
    text = str(TransposeEmitter(analysed(_fusion(CORPUS / name))).emit().module)
    assert text.count("heron_gpu.allocate_shared") == 1
    assert f"-> {tile}" in text
    assert "heron_gpu.sync_threads" in text
    assert text.count('"heron_gpu.loop"') == 2


def test_several_heroes_get_one_tile_each_and_side_outputs_none():
    path = CORPUS / "packed_transpose_multiple_heroes.hlo"
    heroes = str(TransposeEmitter(analysed(_fusion(path))).emit().module)
    assert heroes.count("heron_gpu.allocate_shared") == 3
    single = TransposeEmitter(analysed(_fusion(CORPUS / "multiple_roots_one_shmem_transpose.hlo")))
    assert [t.name for t in single.transposes] == ["shmem_transpose"]


def _inline(dims: str, out: str, permutation: str, element: str):
    text = (
        f"HloModule m\nfused {{\n  p = {element}[{dims}] parameter(0)\n"
        f"  ROOT t = {element}[{out}] transpose(p), dimensions={{{permutation}}}\n}}\n"
        f"ENTRY main {{\n  p = {element}[{dims}] parameter(0)\n"
        f"  ROOT f = {element}[{out}] fusion(p), kind=kInput, calls=fused\n}}\n"
    )
    return fusions_of(parse_module(text, "inline.hlo"))[0]


def test_a_packed_tile_folds_the_dimension_above_a_short_minor_one():
    """XLA's packed tile ``[T2, A, T1]``: 64 x (10 x 6) s16 per block, 8 blocks as XLA."""
    emitter = TransposeEmitter(analysed(_fusion(CORPUS / "packed_transpose_two_heroes.hlo")))
    tiling = emitter.tiling
    assert (tiling.vector, tiling.fold, tiling.a_extent) == (2, 10, 60)
    assert tiling.tile == (1, 1, 64, 10, 6)
    assert emitter.launch_dimensions().num_blocks == 8
    # A 021 packed transpose has nothing to fold (the dimension above a is b).
    s8 = TransposeEmitter(analysed(_fusion(CORPUS / "packed_transpose_s8.hlo"))).tiling
    assert (s8.vector, s8.fold) == (4, 1)


@pytest.mark.parametrize(
    ("dims", "out", "element", "fold", "blocks"),
    [
        # 13 = 10 + 3 rows of 6 folded (a partial A tile); 70 = 64 + 6 along b.
        ("3,70,13,6", "3,6,13,70", "s16", 10, 12),
        ("2,256,40,12", "2,12,40,256", "s8", 10, 16),
    ],
)
def test_folded_tiles_with_partial_edges_agree_with_the_reference(
    transpose, dims, out, element, fold, blocks
):
    """Launches measured equal to XLA 0.12's with ``heron xla`` (12 and 16 blocks of 128)."""
    fusion = _inline(dims, out, "0,3,2,1", element)
    emitter = TransposeEmitter(analysed(fusion))
    assert emitter.tiling.fold == fold
    assert emitter.launch_dimensions().num_blocks == blocks
    report = check_fusions([fusion], "folded")
    assert report.ok, report.text()
    report = check_fusions([fusion], "folded", device=InterpreterDevice(warp_size=64))
    assert report.ok, report.text()


def test_launch_is_128_threads_over_tiles():
    emitter = TransposeEmitter(analysed(_fusion(EDGE_CASES / "transpose_partial_tile.hlo")))
    launch = emitter.launch_dimensions()
    assert launch.thread_x == 128
    assert launch.block_x == 3 * 2  # ceil(65/32) x ceil(33/32)


def test_normalisation_merges_and_drops_dimensions():
    fusion = _fusion(CORPUS / "transpose_201_simplified_to_021.hlo")
    spec = normalise_transpose(fusion.called("calls").root_instruction)
    assert (spec.dims, spec.permutation) == ((6400, 32), (1, 0))
    fusion = _fusion(CORPUS / "packed_transpose_s16.hlo")
    spec = normalise_transpose(fusion.called("calls").root_instruction)
    assert (spec.dims, spec.permutation) == ((2, 4, 64, 10, 6), (1, 0, 4, 3, 2))


def test_a_fusion_without_a_transpose_is_refused():
    text = "HloModule m\n\nf {\n  %p = f32[4,4] parameter(0)\n  ROOT %n = f32[4,4] negate(%p)\n}\n"
    fusion = fusions_of(parse_module(text, "none.hlo"))[0]
    with pytest.raises(Exception, match="found no tiled transpose in this fusion .*'loop'"):
        TransposeEmitter(analysed(fusion))


def test_spec_claims_at_priority_10():
    (spec,) = heron_emitter_specs()
    assert (spec.name, spec.priority, spec.factory) == ("transpose", 10, TransposeEmitter)
    fusion = _fusion(CORPUS / "transpose_10.hlo")
    assert spec.claims(analysed(fusion)) and not spec.claims(fusion)


def test_compile_uses_the_forced_emitter(transpose):
    kernel = compile_fusion(_fusion(CORPUS / "transpose_10.hlo"), H100, stop_after="emitted")
    assert kernel.emitter == "transpose"


#: Found by checking every fusion the passes were about to make against a full emission
#: (haiku's conv-transpose RMSProp step): the second root reads the first, an epilogue
#: root after another copy of the same transpose. XLA computes such a read from its
#: main partition (the transpose elemental); heron's partition has only the epilogue.
EPILOGUE_READ_ELSEWHERE = """
fusion {
  %param_0 = f32[3,3,4,12]{3,2,1,0} parameter(0)
  %param_1 = f32[12,3,3,4]{3,2,1,0} parameter(1)
  %constant.64 = f32[] constant(0.9)
  %constant.65 = f32[] constant(0.1)
  %mul.46 = f32[3,3,4,12]{3,2,1,0} broadcast(%constant.64), dimensions={}
  %mul.59 = f32[3,3,4,12]{3,2,1,0} multiply(%param_0, %mul.46)
  %mul.47 = f32[3,3,4,12]{3,2,1,0} broadcast(%constant.65), dimensions={}
  %t.1 = f32[3,3,4,12]{3,2,1,0} transpose(%param_1), dimensions={1,2,3,0}
  %square = f32[3,3,4,12]{3,2,1,0} multiply(%t.1, %t.1)
  %mul.58 = f32[3,3,4,12]{3,2,1,0} multiply(%square, %mul.47)
  %add.30 = f32[3,3,4,12]{3,2,1,0} add(%mul.58, %mul.59)
  %param_2 = f32[3,3,4,12]{3,2,1,0} parameter(2)
  %constant.47 = f32[] constant(-0.001)
  %constant.53 = f32[] constant(1e-08)
  %mul.41 = f32[3,3,4,12]{3,2,1,0} broadcast(%constant.47), dimensions={}
  %add.24 = f32[3,3,4,12]{3,2,1,0} broadcast(%constant.53), dimensions={}
  %add.36 = f32[3,3,4,12]{3,2,1,0} add(%add.30, %add.24)
  %rsqrt.8 = f32[3,3,4,12]{3,2,1,0} rsqrt(%add.36)
  %t.2 = f32[3,3,4,12]{3,2,1,0} transpose(%param_1), dimensions={1,2,3,0}
  %mul.68 = f32[3,3,4,12]{3,2,1,0} multiply(%rsqrt.8, %t.2)
  %mul.74 = f32[3,3,4,12]{3,2,1,0} multiply(%mul.68, %mul.41)
  %add.42 = f32[3,3,4,12]{3,2,1,0} add(%param_2, %mul.74)
  ROOT %tuple = (f32[3,3,4,12]{3,2,1,0}, f32[3,3,4,12]{3,2,1,0}) tuple(%add.30, %add.42)
}
"""


def test_a_root_read_outside_its_epilogue_is_refused_by_name_not_as_invalid_ir():
    """The second root is a side output (two transposes reach it): it reads the first
    root, which only the epilogue of hero 't.1' computes. The emitter used to call that
    epilogue without its hero's value (IR that does not verify); it is a refusal naming
    the root and the hero, made by the constructor (the spec promises
    ``refuses_when_built``), so that priority fusion leaves the fusion unmade without
    emitting it."""
    (fusion,) = fusions_of(parse_module(EPILOGUE_READ_ELSEWHERE))
    with pytest.raises(UnsupportedError, match="add 'add.42'.*read outside the epilogue.*'t.1'"):
        TransposeEmitter(analysed(fusion))


def _optimizer_update_on_transposed_gradients(weights: int) -> str:
    """An Adam-like update of ``weights`` depthwise kernels whose gradients arrive
    transposed ([32,3,3,1] -> [3,3,1,32]), three outputs each (m, v, the weight): the
    multi-output fusion XLA's passes make of a MobileNet step's update."""
    params, body, roots = [], [], []
    for w in range(weights):
        params += [f"g{w} = f32[32,3,3,1] parameter({3 * w})"]
        params += [f"m{w} = f32[3,3,1,32] parameter({3 * w + 1})"]
        params += [f"p{w} = f32[3,3,1,32] parameter({3 * w + 2})"]
        body += [
            f"t{w} = f32[3,3,1,32] transpose(g{w}), dimensions={{1,2,3,0}}",
            f"mn{w} = f32[3,3,1,32] add(m{w}, t{w})",
            f"mc{w} = f32[3,3,1,32] divide(mn{w}, correction)",
            f"v{w} = f32[3,3,1,32] multiply(t{w}, t{w})",
            f"vc{w} = f32[3,3,1,32] divide(v{w}, correction)",
            f"pn{w} = f32[3,3,1,32] subtract(p{w}, mn{w})",
            f"pc{w} = f32[3,3,1,32] divide(pn{w}, correction)",
        ]
        roots += [f"mc{w}", f"vc{w}", f"pc{w}"]
    params.append(f"step = f32[] parameter({3 * weights})")
    # The bias correction every weight's update divides by ties the roots into one
    # epilogue (computed once, returned for all).
    shared = [
        "nine = f32[] constant(0.9)",
        "one = f32[] constant(1)",
        "decay = f32[] power(nine, step)",
        "left = f32[] subtract(one, decay)",
        "correction = f32[3,3,1,32] broadcast(left), dimensions={}",
    ]
    shape = ", ".join(["f32[3,3,1,32]"] * len(roots))
    tuple_root = f"ROOT r = ({shape}) tuple({', '.join(roots)})"
    lines = "\n  ".join([*params, *shared, *body, tuple_root])
    operands = ", ".join(p.split(" = ")[0] for p in params)
    entry = "\n  ".join(params)
    return (
        f"HloModule m\nfused {{\n  {lines}\n}}\n"
        f"ENTRY main {{\n  {entry}\n  ROOT f = ({shape}) fusion({operands}), kind=kInput,"
        " calls=fused\n}\n"
    )


def test_a_transpose_fusion_with_a_dozen_outputs_is_emitted_and_agrees(transpose, monkeypatch):
    """Its epilogue is one function returning every output: 12 results, over the 8 a
    ``heron_gpu.pure_call`` once had (the fusion passes installed it, then emission
    failed). A subgraph returning more than the dialect allows is refused when the
    emitter is built (so that the fusion passes' build-only check refuses it too)."""
    text = _optimizer_update_on_transposed_gradients(4)
    fusion = fusions_of(parse_module(text, "adam.hlo"))[0]
    emitter = TransposeEmitter(analysed(fusion))
    assert max(len(sub.roots) for sub in emitter.partitioned().subgraphs) == 12
    report = check_fusions([fusion], "adam")
    assert report.ok, report.text()
    monkeypatch.setattr("heron.emitters.emitter_base.MAX_CALL_RESULTS", 8)
    with pytest.raises(UnsupportedError, match="returns 12 values, more than a heron_gpu"):
        TransposeEmitter(analysed(fusions_of(parse_module(text, "adam.hlo"))[0]))
