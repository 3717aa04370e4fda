"""The row-resident normalisation emitter: one kernel per softmax / layer norm / RMS norm.

Kernels run on the interpreter device (sanitizer on, 32- and 64-lane warps)
through the harness (``check_fusions``: the reference evaluator with
dtype-aware tolerances, every output element written exactly once), compile
to PTX (ptxas when present) and gfx942 HSACO, and hero selection gives the
emitter exactly the normalisations: nothing of the XLA corpus changes
emitter. The fusions of ``data/row_normalization/`` are the corpus programs
(``programs/NAME/module.hlo``) as heron's fusion passes fuse them into one
kernel (``softmax.hlo`` is written by hand: the same body in one fusion).

The registry is the installed one plus this plugin (the dev environment's
entry points may predate it).
"""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest
from heron_test_support.analysis import H100, analysed, artefact_text, compile_everywhere

import heron.plugins.row_normalization as row_plugin
from heron.compiler import compile_emitted, fusions_of
from heron.compiler.fusion.builder import build_fusion
from heron.compiler.fusion.fusible import FusionChecker
from heron.emitters import selection
from heron.emitters.registry import EmitterRegistry
from heron.harness import check_fusions
from heron.harness.corpus import corpus_files
from heron.hlo.errors import UnsupportedError
from heron.hlo.parser import parse_module, parse_module_file
from heron.plugins.row_normalization import (
    MAX_ELEMENTS_PER_THREAD,
    RowNormalizationEmitter,
    describe_row_normalization,
)
from heron.runtime.interpreter.device import InterpreterDevice
from heron.target import Target

DATA = Path(__file__).parent / "data" / "row_normalization"
PROGRAMS = sorted(p.stem for p in DATA.glob("*.hlo"))


def _with_plugin() -> EmitterRegistry:
    installed = selection.load_emitters()
    specs = [(s, None) for s in installed.specs if s.name != "row_normalization"]
    return EmitterRegistry([*specs, *((s, None) for s in row_plugin.heron_emitter_specs())])


@pytest.fixture(scope="module")
def registry() -> EmitterRegistry:
    return _with_plugin()


@pytest.fixture
def installed(monkeypatch, registry):
    """Hero selection (and so the harness) with this plugin registered."""
    monkeypatch.setattr(selection, "default_registry", lambda: registry)
    return registry


def softmax(dtype: str, rows: int, length: int, *, log: bool = False) -> str:
    """A softmax (or log-softmax) fusion over the rows of ``dtype[rows, length]``, f32 inside."""
    shape, row = f"[{rows},{length}]", f"[{rows}]"
    if log:
        tail = f"""  lg = f32{row}{{0}} log(sm)
  lgb = f32{shape}{{1,0}} broadcast(lg), dimensions={{0}}
  out = f32{shape}{{1,0}} subtract(sub, lgb)"""
    else:
        tail = f"""  smb = f32{shape}{{1,0}} broadcast(sm), dimensions={{0}}
  out = f32{shape}{{1,0}} divide(e, smb)"""
    return f"""
max_r {{
  a = f32[] parameter(0)
  b = f32[] parameter(1)
  ROOT m = f32[] maximum(a, b)
}}
add_r {{
  a = f32[] parameter(0)
  b = f32[] parameter(1)
  ROOT s = f32[] add(a, b)
}}
fused {{
  p = {dtype}{shape}{{1,0}} parameter(0)
  x = f32{shape}{{1,0}} convert(p)
  ninf = f32[] constant(-inf)
  mx = f32{row}{{0}} reduce(x, ninf), dimensions={{1}}, to_apply=max_r
  mxb = f32{shape}{{1,0}} broadcast(mx), dimensions={{0}}
  sub = f32{shape}{{1,0}} subtract(x, mxb)
  e = f32{shape}{{1,0}} exponential(sub)
  zero = f32[] constant(0)
  sm = f32{row}{{0}} reduce(e, zero), dimensions={{1}}, to_apply=add_r
{tail}
  ROOT o = {dtype}{shape}{{1,0}} convert(out)
}}
ENTRY main {{
  p0 = {dtype}{shape}{{1,0}} parameter(0)
  ROOT f = {dtype}{shape}{{1,0}} fusion(p0), kind=kLoop, calls=fused
}}
"""


def _check(text_or_module, warp: int = 32):
    module = parse_module(text_or_module) if isinstance(text_or_module, str) else text_or_module
    fusions = fusions_of(module)
    report = check_fusions(fusions, "row_normalization", device=InterpreterDevice(warp_size=warp))
    assert report.ok, report.text()
    assert [f.emitter for f in report.fusions] == ["row_normalization"] * len(fusions)
    return report


@pytest.mark.parametrize("name", PROGRAMS)
@pytest.mark.parametrize("warp", [32, 64])
def test_the_corpus_normalisations_equal_the_evaluator(name, warp, installed):
    _check(parse_module_file(DATA / f"{name}.hlo"), warp)


SHAPES = [
    (8, 128),  # a warp a row, 8 rows a block
    (9, 64),  # a partial last block (the 9th row alone)
    (6, 1000),  # 4 warps a row through shared memory, a partial last column step
    (2, 4096),  # 512 threads a row, 8 elements each
    (3, 33),  # one element a thread, most lanes idle
]


@pytest.mark.parametrize(
    ("dtype", "rows", "length"),
    [
        *((dtype, *shape) for dtype in ("f32", "bf16", "f16") for shape in SHAPES),
        ("f32", 1, 32768),  # the longest row kept in registers: 1,024 threads x 32
    ],
)
def test_softmax_rows_of_every_length_and_type(dtype, rows, length, installed):
    _check(softmax(dtype, rows, length))


def rmsnorm_narrow(dtype: str, rows: int, length: int) -> str:
    """RMS norm summed in ``dtype`` itself (no f32 accumulation): 16-bit shared tiles."""
    shape, row = f"[{rows},{length}]", f"[{rows}]"
    return f"""
add_r {{
  a = {dtype}[] parameter(0)
  b = {dtype}[] parameter(1)
  ROOT s = {dtype}[] add(a, b)
}}
fused {{
  x = {dtype}{shape}{{1,0}} parameter(0)
  g = {dtype}[{length}]{{0}} parameter(1)
  sq = {dtype}{shape}{{1,0}} multiply(x, x)
  zero = {dtype}[] constant(0)
  ss = {dtype}{row}{{0}} reduce(sq, zero), dimensions={{1}}, to_apply=add_r
  n = {dtype}[] constant({length})
  nb = {dtype}{row}{{0}} broadcast(n), dimensions={{}}
  ms = {dtype}{row}{{0}} divide(ss, nb)
  r = {dtype}{row}{{0}} rsqrt(ms)
  rb = {dtype}{shape}{{1,0}} broadcast(r), dimensions={{0}}
  gb = {dtype}{shape}{{1,0}} broadcast(g), dimensions={{1}}
  y = {dtype}{shape}{{1,0}} multiply(x, rb)
  ROOT o = {dtype}{shape}{{1,0}} multiply(y, gb)
}}
ENTRY main {{
  p0 = {dtype}{shape}{{1,0}} parameter(0)
  p1 = {dtype}[{length}]{{0}} parameter(1)
  ROOT f = {dtype}{shape}{{1,0}} fusion(p0, p1), kind=kLoop, calls=fused
}}
"""


@pytest.mark.parametrize("dtype", ["bf16", "f16"])
@pytest.mark.parametrize("warp", [32, 64])
def test_a_norm_reduced_in_a_16_bit_type(dtype, warp, installed):
    _check(rmsnorm_narrow(dtype, 3, 520), warp)


@pytest.mark.parametrize("warp", [32, 64])
def test_log_softmax_with_several_warps_a_row(warp, installed):
    _check(softmax("f32", 5, 300, log=True), warp)


SEVERAL_ROOTS = """
max_r {
  a = f32[] parameter(0)
  b = f32[] parameter(1)
  ROOT m = f32[] maximum(a, b)
}
add_r {
  a = f32[] parameter(0)
  b = f32[] parameter(1)
  ROOT s = f32[] add(a, b)
}
fused {
  x = f32[2,3,96]{2,1,0} parameter(0)
  t = f32[2,3]{1,0} parameter(1)
  ninf = f32[] constant(-inf)
  mx = f32[2,3]{1,0} reduce(x, ninf), dimensions={2}, to_apply=max_r
  mxr = f32[6,1]{1,0} reshape(mx)
  mxb = f32[2,3,96]{2,1,0} broadcast(mx), dimensions={0,1}
  shifted = f32[2,3,96]{2,1,0} subtract(x, mxb)
  e = f32[2,3,96]{2,1,0} exponential(shifted)
  zero = f32[] constant(0)
  sm = f32[2,3]{1,0} reduce(e, zero), dimensions={2}, to_apply=add_r
  scaled = f32[2,3]{1,0} multiply(sm, t)
  smr = f32[6,1]{1,0} reshape(scaled)
  both = f32[6,1]{1,0} add(smr, mxr)
  bothr = f32[2,3]{1,0} reshape(both)
  bb = f32[2,3,96]{2,1,0} broadcast(bothr), dimensions={0,1}
  out = f32[2,3,96]{2,1,0} divide(e, bb)
  ROOT r = (f32[2,3,96]{2,1,0}, f32[2,3,96]{2,1,0}, f32[2,3,96]{2,1,0}) tuple(out, shifted, out)
}
ENTRY main {
  p0 = f32[2,3,96]{2,1,0} parameter(0)
  p1 = f32[2,3]{1,0} parameter(1)
  ROOT f = (f32[2,3,96]{2,1,0}, f32[2,3,96]{2,1,0}, f32[2,3,96]{2,1,0}) fusion(p0, p1),
    kind=kLoop, calls=fused
}
"""


@pytest.mark.parametrize("warp", [32, 64])
def test_several_roots_kept_dims_and_a_per_row_parameter(warp, installed):
    """Rows of two kept dimensions, per-row values reshaped on the way and mixed with a
    per-row parameter, a side output (x - max) and a root listed twice."""
    _check(SEVERAL_ROOTS, warp)


#: blackjax's MCLMC step: a row of [0.05, p, 0.05, 0.05] (one constant read by two
#: operands of a concatenate) summed and broadcast back. Each operand is emitted in the
#: ``scf.if`` branch that selects it; the constant emitted in the first branch was reused
#: in the third, a value that does not dominate it (invalid IR, the program refused).
CONCATENATED_CONSTANT = """
HloModule row_norm_concatenated_constant

add {
  a = f32[] parameter(0)
  b = f32[] parameter(1)
  ROOT s = f32[] add(a, b)
}

fused {
  p = f32[1]{0} parameter(0)
  c = f32[] constant(0.05)
  zero = f32[] constant(0)
  cb = f32[1]{0} bitcast(c)
  q = f32[2]{0} broadcast(c), dimensions={}
  x = f32[4]{0} concatenate(cb, p, q), dimensions={0}
  sum = f32[] reduce(x, zero), dimensions={0}, to_apply=add
  ROOT sb = f32[4]{0} broadcast(sum), dimensions={}
}

ENTRY main {
  p = f32[1]{0} parameter(0)
  ROOT f = f32[4]{0} fusion(p), kind=kLoop, calls=fused
}
"""


def test_a_value_shared_by_two_branches_is_emitted_in_each(installed):
    _check(CONCATENATED_CONSTANT)


#: A loop carry updated in place by a normalisation: ``x <- x + sum(y) * y`` over rows of 8
#: (lanes 8..31 of each row's warp hold no element), twice. Copy insertion lets the fusion
#: write x's new value over the carry it reads elementwise (issue 26: the backward pass of
#: a LayerNorm stack under ``nn.scan`` with ``nn.remat``).
IN_PLACE_CARRY = """
HloModule row_norm_in_place_carry

add {
  a = f32[] parameter(0)
  b = f32[] parameter(1)
  ROOT s = f32[] add(a, b)
}

cond {
  cp = (s32[], f32[4,8], f32[4,8]) parameter(0)
  ci = s32[] get-tuple-element(cp), index=0
  two = s32[] constant(2)
  ROOT lt = pred[] compare(ci, two), direction=LT
}

body {
  bp = (s32[], f32[4,8], f32[4,8]) parameter(0)
  bi = s32[] get-tuple-element(bp), index=0
  x = f32[4,8] get-tuple-element(bp), index=1
  y = f32[4,8] get-tuple-element(bp), index=2
  one = s32[] constant(1)
  next = s32[] add(bi, one)
  zero = f32[] constant(0)
  s = f32[4] reduce(y, zero), dimensions={1}, to_apply=add
  b = f32[4,8] broadcast(s), dimensions={0}
  m = f32[4,8] multiply(b, y)
  r = f32[4,8] add(x, m)
  ROOT t = (s32[], f32[4,8], f32[4,8]) tuple(next, r, y)
}

ENTRY main {
  x0 = f32[4,8] parameter(0)
  y0 = f32[4,8] parameter(1)
  z = s32[] constant(0)
  init = (s32[], f32[4,8], f32[4,8]) tuple(z, x0, y0)
  w = (s32[], f32[4,8], f32[4,8]) while(init), condition=cond, body=body
  ROOT out = f32[4,8] get-tuple-element(w), index=1
}
"""


def test_idle_lanes_read_nothing_of_a_carry_the_kernel_overwrites(installed):
    """Lanes past a row's end (and rows past the last) clamp their index and their result
    is discarded; they must not load either: here the output shares x's buffer, so a
    clamped load of x[row, 7] raced with lane 7's store of it (the interpreter's
    sanitizer refused the program: 'global-memory-race ... read by several threads')."""
    from heron.compiler.program_run import run_program
    from heron.hlo.evaluator import evaluate_module
    from heron.runtime.core.registry import load_backends

    module = parse_module(IN_PLACE_CARRY)
    rng = np.random.default_rng(0)
    x, y = (rng.standard_normal((4, 8)).astype(np.float32) for _ in range(2))
    device = load_backends().create_device("interpreter")
    run = run_program(module, [x, y], device, "interpreter", target=H100)
    np.testing.assert_allclose(run.outputs[0], evaluate_module(module, [x, y]), rtol=1e-5)
    (fusion,) = [f for f in fusions_of(parse_module(softmax("f32", 9, 8)))]
    emitted = str(RowNormalizationEmitter(analysed(fusion)).emit().module)
    assert "heron_gpu.predicated_extract" in emitted  # partial rows, and a partial block


def _emitter(text: str, target: Target | None = None) -> RowNormalizationEmitter:
    (fusion,) = fusions_of(parse_module(text))
    return RowNormalizationEmitter(analysed(fusion) if target is None else analysed(fusion, target))


def test_launch_one_block_or_warp_a_row():
    short = _emitter(softmax("f32", 9, 64))
    assert (short.row_threads, short.rows_per_block, short.blocks, short.elements) == (32, 8, 2, 2)
    # about 32 elements a thread, as XLA's Triton softmax: 1000 is one warp's row
    one_warp = _emitter(softmax("f32", 6, 1000))
    assert (one_warp.row_threads, one_warp.rows_per_block, one_warp.elements) == (32, 6, 32)
    wide = _emitter(softmax("f32", 6, 4000))
    assert (wide.row_threads, wide.rows_per_block, wide.blocks, wide.elements) == (128, 2, 3, 32)
    long = _emitter(softmax("f32", 2, 4096))
    assert (long.row_threads, long.rows_per_block, long.blocks, long.vector_size) == (128, 2, 1, 4)
    emitted = str(wide.emit().module)
    assert emitted.count("heron_gpu.shuffle_reduce") == 2  # max, then sum
    assert emitted.count("heron_gpu.allocate_shared") == 2  # a warp-partials tile each
    assert emitted.count("heron_gpu.sync_threads") == 2
    assert "heron_gpu.loop" not in emitted.split("func.func @")[-1]  # straight-line entry


@pytest.mark.parametrize("dtype", ["f32", "bf16"])
def test_each_input_element_is_loaded_once_in_vectors(dtype):
    """The row stays in registers: one read of x per element, whatever reads it, in
    16-byte vectors of adjacent elements (4 f32, 8 bf16: one ld.global.v4.b32 each)."""
    loads = "ld.global.nc.v4.b32"
    (fusion,) = fusions_of(parse_module(softmax(dtype, 4, 256)))
    emitter = RowNormalizationEmitter(analysed(fusion, H100))
    kernel = compile_emitted(emitter.emit(), H100)
    ptx = [line.strip() for line in artefact_text(kernel, "ptx").splitlines()]
    global_loads = [line for line in ptx if line.startswith("ld.global")]
    assert emitter.elements == 8  # 32 threads a row, 8 elements each
    assert global_loads and all(line.startswith(loads) for line in global_loads)
    assert len(global_loads) * emitter.vector_size == emitter.elements


def test_rows_longer_than_registers_hold_are_not_claimed_and_a_forced_emitter_names_them():
    length = 1024 * MAX_ELEMENTS_PER_THREAD + 1
    (fusion,) = fusions_of(parse_module(softmax("f32", 2, length)))
    analysis = analysed(fusion)
    assert describe_row_normalization(analysis) is not None
    assert not row_plugin.claims(analysis)
    with pytest.raises(UnsupportedError, match=rf"fusion 'f'.*rows of {length} elements"):
        RowNormalizationEmitter(analysis)


def _selected(text: str, registry: EmitterRegistry) -> str:
    (fusion,) = fusions_of(parse_module(text))
    return selection.select_emitter(analysed(fusion), registry).name


REDUCERS = """
add_r {
  a = f32[] parameter(0)
  b = f32[] parameter(1)
  ROOT s = f32[] add(a, b)
}
"""


def _fused(body: str, params: str, result: str) -> str:
    args = ", ".join(f"p{k}" for k in range(len(params.split(";"))))
    entry = "\n".join(
        f"  p{k} = {shape} parameter({k})" for k, shape in enumerate(params.split(";"))
    )
    return f"""{REDUCERS}
fused {{
{body}
}}
ENTRY main {{
{entry}
  ROOT f = {result} fusion({args}), kind=kLoop, calls=fused
}}
"""


def test_only_normalisations_are_claimed(registry):
    assert _selected(softmax("f32", 8, 128), registry) == "row_normalization"
    plain_row = _fused(
        """  x = f32[8,128]{1,0} parameter(0)
  z = f32[] constant(0)
  ROOT r = f32[8]{0} reduce(x, z), dimensions={1}, to_apply=add_r""",
        "f32[8,128]{1,0}",
        "f32[8]{0}",
    )
    assert _selected(plain_row, registry) == "reduce_row"
    # Two reductions of one row, side by side: still the reduction emitter's.
    siblings = _fused(
        """  x = f32[8,128]{1,0} parameter(0)
  z = f32[] constant(0)
  r = f32[8]{0} reduce(x, z), dimensions={1}, to_apply=add_r
  m = f32[8,128]{1,0} multiply(x, x)
  q = f32[8]{0} reduce(m, z), dimensions={1}, to_apply=add_r
  ROOT t = (f32[8]{0}, f32[8]{0}) tuple(r, q)""",
        "f32[8,128]{1,0}",
        "(f32[8]{0}, f32[8]{0})",
    )
    assert _selected(siblings, registry) == "reduce_row"
    # A chain, the second row read through the first's broadcast: this emitter's.
    chain = _fused(
        """  x = f32[8,128]{1,0} parameter(0)
  z = f32[] constant(0)
  r = f32[8]{0} reduce(x, z), dimensions={1}, to_apply=add_r
  b = f32[8,128]{1,0} broadcast(r), dimensions={0}
  c = f32[8,128]{1,0} subtract(x, b)
  m = f32[8,128]{1,0} multiply(c, c)
  q = f32[8]{0} reduce(m, z), dimensions={1}, to_apply=add_r
  ROOT t = (f32[8]{0}, f32[8]{0}) tuple(r, q)""",
        "f32[8,128]{1,0}",
        "(f32[8]{0}, f32[8]{0})",
    )
    assert _selected(chain, registry) == "row_normalization"
    # A column reduction broadcast back: not a row normalisation.
    column = _fused(
        """  x = f32[128,8]{1,0} parameter(0)
  z = f32[] constant(0)
  r = f32[8]{0} reduce(x, z), dimensions={0}, to_apply=add_r
  b = f32[128,8]{1,0} broadcast(r), dimensions={1}
  ROOT d = f32[128,8]{1,0} divide(x, b)""",
        "f32[128,8]{1,0}",
        "f32[128,8]{1,0}",
    )
    assert _selected(column, registry) == "loop"
    # A row sum broadcast along the wrong dimension of a square array.
    crossed = _fused(
        """  x = f32[64,64]{1,0} parameter(0)
  z = f32[] constant(0)
  r = f32[64]{0} reduce(x, z), dimensions={1}, to_apply=add_r
  b = f32[64,64]{1,0} broadcast(r), dimensions={1}
  ROOT d = f32[64,64]{1,0} divide(x, b)""",
        "f32[64,64]{1,0}",
        "f32[64,64]{1,0}",
    )
    assert _selected(crossed, registry) == "loop"
    # A reduction too short to be a reduction hero stays elemental.
    tiny = _fused(
        """  x = f32[64,3]{1,0} parameter(0)
  z = f32[] constant(0)
  r = f32[64]{0} reduce(x, z), dimensions={1}, to_apply=add_r
  b = f32[64,3]{1,0} broadcast(r), dimensions={0}
  ROOT d = f32[64,3]{1,0} divide(x, b)""",
        "f32[64,3]{1,0}",
        "f32[64,3]{1,0}",
    )
    assert _selected(tiny, registry) == "loop"


def test_no_corpus_reduction_fusion_changes_emitter(corpus_dir, registry):
    """This emitter takes a reduction-kind fusion only where a reduce's row reads another
    reduce (which the reduction emitters recompute per element) in rows of a warp or
    more: the corpus's one chain (``inefficient_codegen.hlo``, "valid, but we can't
    efficiently codegen it") is of 4-element rows, and keeps its multi-row emitter."""
    h100 = Target.preset("h100")
    taken = []
    files = corpus_files(corpus_dir)
    assert files
    for path in files:
        for fusion in fusions_of(parse_module_file(path)):
            analysis = analysed(fusion, h100)
            chosen = selection.select_emitter(analysis, registry).name
            if chosen == "row_normalization" and analysis.kind != "loop":
                taken.append(f"{path.name}: {analysis.kind}")
    assert taken == []


@pytest.mark.parametrize("name", ["softmax", "layernorm_bf16", "rmsnorm_f16"])
def test_compiles_for_nvidia_and_amd(name):
    (fusion,) = fusions_of(parse_module_file(DATA / f"{name}.hlo"))
    compiled = compile_everywhere(RowNormalizationEmitter, fusion)
    assert len(compiled) == 3


CHECK_DATA = Path(__file__).parents[3] / "tests" / "data" / "check"


@pytest.mark.parametrize(
    "name", ["row_norm_softmax_statistics.hlo", "row_norm_layernorm_statistics.hlo"]
)
def test_per_row_outputs_of_a_chain_compile_and_equal_the_evaluator(name, installed):
    """A softmax's max and sum (a GPT-2 step's attention statistics, which its forward
    and backward kernels read) and a layer norm's rows with their mean and rsqrt(var +
    eps): one kernel each, the per-row values written by each row's first lane."""
    (fusion,) = fusions_of(parse_module_file(CHECK_DATA / name))
    compiled = compile_everywhere(RowNormalizationEmitter, fusion)
    assert len(compiled) == 3
    for warp in (32, 64):
        report = check_fusions(
            [fusion], "row_normalization", device=InterpreterDevice(warp_size=warp)
        )
        assert report.ok, report.text()
        assert report.fusions[0].emitter == "row_normalization"


def _whole_softmax_candidate():
    """The corpus softmax program's entry, every instruction in one candidate fusion."""
    module = parse_module_file(Path(__file__).parents[3] / "programs" / "softmax" / "module.hlo")
    entry = module.entry
    members = [i for i in entry.post_order() if i.opcode != "parameter"]
    return build_fusion(members, [entry.root_instruction])


def test_the_fusion_checker_lets_this_emitter_take_a_whole_softmax(monkeypatch, registry):
    """With this emitter installed, a reduce broadcast back along its row may be fused (the
    emitter computes it once a row); without it the checker refuses the candidate."""
    h100 = Target.preset("h100")
    monkeypatch.setattr(selection, "default_registry", lambda: registry)
    verdict = FusionChecker(h100).check(_whole_softmax_candidate())
    assert verdict is not None and verdict.reduces_once and verdict.fusion_kind == "kLoop"
    assert FusionChecker(h100).emits(_whole_softmax_candidate())
    without = EmitterRegistry([(s, None) for s in registry.specs if s.name != "row_normalization"])
    monkeypatch.setattr(selection, "default_registry", lambda: without)
    assert FusionChecker(h100).check(_whole_softmax_candidate()) is None


#: A softmax whose reduces start from values the program is given (as priority fusion
#: sees a fusion before it folds the constants it reads, XLA's order: small constants
#: are fused last, so the normalisation is chosen while its inits are parameters).
SOFTMAX_GIVEN_INITS = """
HloModule softmax_given_inits

max_r {
  a = f32[] parameter(0)
  b = f32[] parameter(1)
  ROOT m = f32[] maximum(a, b)
}

add_r {
  a = f32[] parameter(0)
  b = f32[] parameter(1)
  ROOT s = f32[] add(a, b)
}

ENTRY main {
  x = f32[6,1000]{1,0} parameter(0)
  lowest = f32[] parameter(1)
  nothing = f32[] parameter(2)
  mx = f32[6]{0} reduce(x, lowest), dimensions={1}, to_apply=max_r
  mxb = f32[6,1000]{1,0} broadcast(mx), dimensions={0}
  sub = f32[6,1000]{1,0} subtract(x, mxb)
  e = f32[6,1000]{1,0} exponential(sub)
  sm = f32[6]{0} reduce(e, nothing), dimensions={1}, to_apply=add_r
  smb = f32[6,1000]{1,0} broadcast(sm), dimensions={0}
  ROOT out = f32[6,1000]{1,0} divide(e, smb)
}
"""


def test_a_normalisation_whose_inits_are_parameters_is_one_kernel(installed):
    """The inits are read from the kernel's parameters (each the reducer's identity, as
    HLO asks of an init a kernel may apply once per thread)."""
    from heron.compiler.fusion import gpu_pipeline
    from heron.compiler.program_run import run_program
    from heron.hlo.evaluator import evaluate_module
    from heron.hlo.passes import run_pipeline
    from heron.runtime.core.registry import load_backends

    fused = parse_module(SOFTMAX_GIVEN_INITS)
    run_pipeline(fused, gpu_pipeline(H100))
    (fusion,) = fusions_of(fused)
    assert selection.select_emitter(analysed(fusion), installed).name == "row_normalization"
    module = parse_module(SOFTMAX_GIVEN_INITS)
    x = np.random.default_rng(0).standard_normal((6, 1000)).astype(np.float32)
    arguments = [x, np.float32(-np.inf), np.float32(0)]
    device = load_backends().create_device("interpreter")
    run = run_program(module, arguments, device, "interpreter", target=H100)
    np.testing.assert_allclose(run.outputs[0], evaluate_module(module, arguments), rtol=1e-5)
