"""Acceptance: ``heron check`` (as a library call) agrees on every corpus file, every hero.

Also the hand-written edge cases of tests/data/check (odd sizes, a layout
change, sub-byte types, 64-bit integers, several outputs, RUN-line bijection
flags), the refusal of a fusion too large for the host, and 64-bit index
math in a kernel whose buffer exceeds 2**31 elements (compiled, not run).
"""

from __future__ import annotations

import re
from pathlib import Path

import pytest

from heron.compiler import Target, compile_fusion, fusions_of
from heron.harness import CheckOptions, check_file, check_fusions
from heron.harness.corpus import check_corpus_file
from heron.hlo import parse_module

DATA = Path(__file__).parent / "data" / "check"
HUGE = "broadcast_constant_block_dim_limit.hlo"


def test_corpus_file_agrees(corpus_file):
    """Every corpus file, every hero: the interpreter agrees with the reference evaluator."""
    report, note = check_corpus_file(corpus_file)
    if note.startswith("refused at full size"):
        # The host's memory budget (a share of the memory available when the process
        # started) cannot hold this check, and the fusion has no small copy: a limit of
        # this machine, said by the check, not a disagreement.
        pytest.skip(f"{corpus_file.name}: {note}: {report.text()}")
    assert report.ok, report.text()
    assert report.fusions and all(f.input_sets == 2 for f in report.fusions)
    if corpus_file.name == HUGE:  # 1.2e12 elements: refused at full size, checked shrunk
        assert "shrunk copy" in note
        full = check_file(corpus_file)
        assert [f.kind for f in full.fusions[0].findings] == ["refused"]
        assert "1236950581248 elements, more than --max-elements" in full.text()
    else:
        assert note == ""


@pytest.mark.parametrize("name", sorted(p.name for p in DATA.glob("*.hlo")))
def test_hand_written_edge_case_agrees(name):
    report = check_file(DATA / name)
    assert report.ok, report.text()
    assert report.text().endswith("all agree")


def test_the_data_files_cover_the_edge_cases():
    names = {p.name for p in DATA.glob("*.hlo")}
    assert {"odd_size_f32.hlo", "sub_byte_s4.hlo", "iota_compare_64.hlo"} <= names
    assert {"multi_output.hlo", "bijection_flags.hlo", "f4e2m1fn_convert.hlo"} <= names


def test_bijection_flags_are_verified_and_reported():
    text = check_file(DATA / "bijection_flags.hlo").text()
    assert "inputs sub:0 read once, inputs sub:1 read once" in text
    assert "input abs:0 not measured (comes from subtract 'sub'" in text
    assert "outputs sub written once, outputs abs written once" in text


def test_a_bare_reduce_bijection_covers_its_inputs_not_its_init_values(tmp_path):
    """XLA's reduction emitters read a reduce's init value once per thread (they give
    it no thread-to-input indexing): a scalar init parameter read by every thread is
    no failure of a bare ``--bijection_inputs=HERO`` (XLA corpus reduce_row/side_output:
    "read 1,024 times instead of once"), and naming an init value is a RUN-line error."""
    name = "reduce_init_parameter_bare_bijection.hlo"
    text = check_file(DATA / name).text()
    assert "inputs total:0 read once" in text and "total:1" not in text
    explicit = tmp_path / "explicit_init.hlo"
    explicit.write_text(
        (DATA / name)
        .read_text()
        .replace("--bijection_inputs=total", "--bijection_inputs=total:0,1")
    )
    report = check_file(explicit)
    assert not report.ok
    assert (
        "--bijection_inputs=total:1: operand 1 of 'total' (reduce) is an init value, read once"
        " per thread, not once per element (the operands read element for element: 0)"
    ) in report.text()


def _lowered(text: str) -> str:
    (fusion,) = fusions_of(parse_module(text, source="huge index"))
    report = check_fusions([fusion], "huge index", CheckOptions())
    assert "too large for the interpreter" in report.text()  # refused, not attempted
    return str(compile_fusion(fusion, Target.preset("h100"), stop_after="lower-tensors").module)


def test_kernels_over_2_to_the_32_elements_index_with_i64():
    """5e9 elements cannot run on the host; the element index must be 64-bit (``index``)."""
    text = _lowered(
        "wide {\n  %p = s8[5,1000000000] parameter(0)\n  ROOT %n = s8[5,1000000000] negate(%p)\n}\n"
    )
    assert "memref<5000000000xi8>" in text
    # The block's offset (block id times elements per block) is formed in index, not i32.
    assert re.search(r"arith\.muli %block_id_x, %\w+ : index", text), text
    assert not re.search(r"index_castui %block_id_x : index to i32", text), text


def test_kernels_between_2_to_the_31_and_32_use_unsigned_i32_casts():
    """3e9 elements: i32 index math is exact only if read back as unsigned (index_castui)."""
    text = _lowered(
        "wide {\n  %p = f16[3,1000000000] parameter(0)\n"
        "  ROOT %n = f16[3,1000000000] negate(%p)\n}\n"
    )
    assert "memref<3000000000xf16>" in text
    casts = re.findall(r"arith\.(index_cast\w*) %\w+ : i32 to index", text)
    assert casts and set(casts) == {"index_castui"}, casts


def test_a_refused_fusion_with_several_outputs_is_said_not_shrinkable(tmp_path):
    """Over the host's memory budget, a fusion of elementwise ops is checked on a shrunk
    copy; one with several outputs (a root tuple) has none, and the corpus check says so
    instead of failing inside the shrinking (a CI machine short of memory found it)."""
    from heron.hlo import memory_budget

    path = tmp_path / "two_outputs.hlo"
    path.write_text(
        "HloModule m\n\nfusion {\n  p0 = f32[64,64] parameter(0)\n"
        "  a = f32[64,64] negate(p0)\n  b = f32[64,64] add(p0, p0)\n"
        "  ROOT t = (f32[64,64], f32[64,64]) tuple(a, b)\n}\n"
    )
    memory_budget.set_budget(10_000)  # less than the check's two input sets and results
    try:
        report, note = check_corpus_file(path)
    finally:
        memory_budget.set_budget(None)
    assert not report.ok and report.fusions[0].findings[0].kind == "refused"
    assert note == "refused at full size, and cannot shrink 'fusion': it has several outputs ('t')"
