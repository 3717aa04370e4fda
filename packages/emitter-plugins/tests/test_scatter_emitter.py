"""The scatter emitter: every corpus scatter and the hand-written edge cases.

Each file runs through the real harness (``check_file``: interpreter against
the reference evaluator, write coverage, RUN-line bijections) with the
scatter emitter forced, on 32- and 64-lane warps, and compiles to PTX that
ptxas accepts for sm_80 and sm_90 and to a gfx942 HSACO.
"""

from __future__ import annotations

from pathlib import Path

import pytest
from heron_test_support.analysis import analysed, artefact_text, compile_everywhere

from heron.compiler import fusions_of
from heron.harness import check_file
from heron.harness.corpus import default_corpus
from heron.hlo.errors import UnsupportedError
from heron.hlo.parser import parse_module, parse_module_file
from heron.plugins.scatter import ScatterEmitter, heron_emitter_specs
from heron.runtime.interpreter.device import InterpreterDevice

CORPUS = default_corpus() / "gpu" / "scatter"
EDGES = Path(__file__).resolve().parents[3] / "tests" / "data" / "check"
FILES = sorted(CORPUS.glob("*.hlo")) + sorted(EDGES.glob("scatter_*.hlo"))


@pytest.fixture
def force_scatter(force_emitter):
    force_emitter("scatter", ScatterEmitter)


def test_the_files_are_there():
    names = {p.name for p in FILES}
    assert {"add.hlo", "variadic_scatter_argmax.hlo", "scatter_out_of_bounds.hlo"} <= names


@pytest.mark.parametrize("path", FILES, ids=lambda p: p.name)
@pytest.mark.parametrize("warp", [32, 64])
def test_agrees_with_the_reference(force_scatter, path, warp):
    report = check_file(path, device=InterpreterDevice(warp_size=warp))
    assert report.ok, report.text()
    assert all(f.emitter == "scatter" for f in report.fusions)


@pytest.mark.parametrize("path", FILES, ids=lambda p: p.name)
def test_compiles_for_nvidia_and_amd(path):
    for fusion in fusions_of(parse_module_file(path)):
        compiled = compile_everywhere(ScatterEmitter, fusion)
        assert [k.image.format for k in compiled][2] == "hsaco"


def _fusion(text: str):
    (fusion,) = fusions_of(parse_module(text))
    return fusion


def _emit(text: str):
    return ScatterEmitter(analysed(_fusion(text))).emit()


def test_atomics_unique_writes_and_serial_updates_are_chosen_by_the_scatter():
    add = (CORPUS / "add.hlo").read_text()
    kernel = _emit(add)
    emitted = str(kernel.module)
    assert "heron_gpu.atomic_rmw" in emitted and "tensor.insert" not in emitted
    assert kernel.writes_each_element_once is False  # updates of one index combine
    unique = _emit((EDGES / "scatter_unique_writes.hlo").read_text())
    assert "heron_gpu.atomic_rmw" not in str(unique.module)
    assert unique.output_aliases == {0: 0}
    serial = _emit((EDGES / "scatter_variadic_serial.hlo").read_text())
    assert serial.launch.num_threads == 1 and serial.output_aliases == {0: 0, 1: 1}


def test_an_operand_that_is_not_a_parameter_is_refused():
    text = (
        (CORPUS / "add.hlo")
        .read_text()
        .replace(
            "ROOT %scatter = f32[10,5] scatter(\n      f32[10,5] %operand,",
            "%neg = f32[10,5] negate(%operand)\n  ROOT %scatter = f32[10,5] scatter(\n"
            "      f32[10,5] %neg,",
        )
    )
    with pytest.raises(UnsupportedError, match=r"updates negate 'neg' in place"):
        ScatterEmitter(analysed(_fusion(text)))  # when built: the spec promises it
    (spec,) = heron_emitter_specs()
    assert spec.refuses_when_built


@pytest.mark.parametrize(("element", "reduction"), [("f32", "v4.f32"), ("bf16", "noftz.v4.bf16")])
def test_a_row_scatter_add_adds_a_vector_at_once_on_sm_90_only(element, reduction):
    """XLA's scatter kernel adds a thread's four elements with one vector atomic on Hopper
    (issue 29: heron's one atomic per element took 2.5x XLA's time on the H200)."""
    (fusion,) = fusions_of(parse_module_file(EDGES / f"scatter_add_rows_{element}.hlo"))
    a100, h100, _ = compile_everywhere(ScatterEmitter, fusion)
    sm_90 = artefact_text(h100, "ptx")
    assert f"red.global.add.{reduction}" in sm_90
    assert sm_90.count("red.global") == 1 and "atom.global" not in sm_90
    sm_80 = artefact_text(a100, "ptx")
    assert "red.global.add.v" not in sm_80  # Ampere has no vector reductions
    # A bf16 add computed in f32 is the native bf16 add, not a compare-and-swap loop.
    assert "cas" not in sm_90
