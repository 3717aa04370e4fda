"""Regressions of hero selection that real JAX programs hit, through the real registry.

Both came from deciding a fusion's hero twice, with different rules, in hero
selection and in the emitter; the analysis is now computed once and the
emitter builds on it.

- A plain ``transpose`` outlined as its own fusion (JAX's ``x.T``): hero
  selection normalised it in logical dimensions, the emitter in physical
  order, so a transpose whose output layout undoes it (no data moves) was a
  "transpose" to one and "no transpose hero" to the other. Both now normalise
  physically: such a transpose is a bitcast, emitted by the loop emitter.
- A reduce of every dimension to a scalar (f32[1000,300] -> f32[]) was not a
  reduction hero because it is not race free, so the loop emitter ran it with
  a single thread. XLA makes any reduce that is its own root a reduction hero:
  it is a row reduction (1, 1, 300000), emitted in parallel by reduce_row.
"""

from __future__ import annotations

import pytest
from heron_test_support.analysis import H100, MI300X, analysed

from heron.compiler import compile_fusion, fusions_of
from heron.harness.check import check_file
from heron.hlo.parser import parse_module_file
from heron.runtime.interpreter.device import InterpreterDevice


def _module(name: str, fused: str, entry: str, signature: str = "") -> str:
    layout = f", entry_computation_layout={{{signature}}}" if signature else ""
    return f"HloModule {name}{layout}\n\n{fused}\nENTRY main {{\n{entry}\n}}\n"


def _transpose(in_shape: str, out_shape: str, dims: str) -> str:
    fused = (
        f"fused_t {{\n  p = {in_shape} parameter(0)\n"
        f"  ROOT t = {out_shape} transpose(p), dimensions={{{dims}}}\n}}\n"
    )
    entry = (
        f"  a = {in_shape} parameter(0)\n"
        f"  ROOT f = {out_shape} fusion(a), kind=kLoop, calls=fused_t"
    )
    return _module("t", fused, entry, f"({in_shape})->{out_shape}")


#: name -> (HLO text, the emitter XLA uses: transpose, or loop where no data moves).
TRANSPOSES = {
    # JAX's x.T as JAX prints it (no fusion: heron check outlines the entry).
    "jax_x_T": (
        _module(
            "jit_f",
            "",
            "  x = f32[288,768]{1,0} parameter(0)\n"
            "  ROOT t = f32[768,288]{1,0} transpose(x), dimensions={1,0}",
        ),
        "transpose",
    ),
    "2d": (_transpose("f32[288,768]{1,0}", "f32[768,288]{1,0}", "1,0"), "transpose"),
    "021": (_transpose("f32[16,64,128]{2,1,0}", "f32[16,128,64]{2,1,0}", "0,2,1"), "transpose"),
    "210": (_transpose("f32[16,64,128]{2,1,0}", "f32[128,64,16]{2,1,0}", "2,1,0"), "transpose"),
    # The output layout undoes the transpose: a bitcast in memory, a copy for XLA.
    "2d_layout_01": (_transpose("f32[288,768]{1,0}", "f32[768,288]{0,1}", "1,0"), "loop"),
    "021_layout_120": (
        _transpose("f32[16,64,128]{2,1,0}", "f32[16,128,64]{1,2,0}", "0,2,1"),
        "loop",
    ),
    "210_layout_012": (
        _transpose("f32[16,64,128]{2,1,0}", "f32[128,64,16]{0,1,2}", "2,1,0"),
        "loop",
    ),
    # The output layout undoes part of it: physically a 021 transpose.
    "210_layout_102": (
        _transpose("f32[16,64,128]{2,1,0}", "f32[128,64,16]{1,0,2}", "2,1,0"),
        "transpose",
    ),
}


@pytest.mark.parametrize("name", sorted(TRANSPOSES))
def test_an_outlined_transpose_selects_its_hero_and_agrees(name, tmp_path):
    text, emitter = TRANSPOSES[name]
    path = tmp_path / f"{name}.hlo"
    path.write_text(text)
    report = check_file(path)
    assert report.ok, report.text()
    assert f"({emitter} emitter, interpreter)" in report.text()


def _reduce_all(element: str) -> str:
    fused = (
        f"add {{\n  x = {element}[] parameter(0)\n  y = {element}[] parameter(1)\n"
        f"  ROOT s = {element}[] add(x, y)\n}}\n\n"
        f"fused_r {{\n  p = {element}[1000,300]{{1,0}} parameter(0)\n"
        f"  z = {element}[] constant(0)\n"
        f"  ROOT r = {element}[] reduce(p, z), dimensions={{0,1}}, to_apply=add\n}}\n"
    )
    entry = (
        f"  a = {element}[1000,300]{{1,0}} parameter(0)\n"
        f"  ROOT f = {element}[] fusion(a), kind=kInput, calls=fused_r"
    )
    return _module("r", fused, entry)


@pytest.mark.parametrize("element", ["f32", "f16"])
def test_a_reduction_to_a_scalar_is_a_parallel_row_reduction(element, tmp_path):
    path = tmp_path / f"reduce_{element}.hlo"
    path.write_text(_reduce_all(element))
    (fusion,) = fusions_of(parse_module_file(path))
    analysis = analysed(fusion)
    assert analysis.kind == "reduce_row"
    assert analysis.reduction.dimensions.dimensions == (1, 1, 300000)
    kernel = compile_fusion(fusion, H100, stop_after="emitted")
    assert kernel.emitter == "reduce_row"
    assert (kernel.launch.block_x, kernel.launch.thread_x) == (1, 512)  # not one thread
    for device in (None, InterpreterDevice(warp_size=64)):
        report = check_file(path, device=device)
        assert report.ok, report.text()
        assert "(reduce_row emitter, interpreter)" in report.text()


def test_the_reduction_to_a_scalar_is_a_row_reduction_on_wavefronts_too(tmp_path):
    path = tmp_path / "reduce.hlo"
    path.write_text(_reduce_all("f32"))
    (fusion,) = fusions_of(parse_module_file(path))
    assert analysed(fusion, MI300X).kind == "reduce_row"
