"""``heron check``: exit codes, the report's lines, and that wrong kernels are caught."""

from __future__ import annotations

from pathlib import Path

import attrs
import numpy as np
import pytest

import heron.harness.check as check_module
from heron.cli.main import main

DATA = Path(__file__).parent / "data" / "check"


def _run(capsys, *argv: str) -> tuple[int, str, str]:
    code = main(["check", *argv])
    out, err = capsys.readouterr()
    return code, out, err


@pytest.fixture
def x4(corpus_dir) -> str:
    return str(corpus_dir / "common" / "loop" / "vectorize_x4.hlo")


def test_an_agreeing_kernel_exits_0_with_the_bijections_checked(capsys, x4):
    code, out, _ = _run(capsys, x4, "--seed", "3")
    assert code == 0, out
    assert out.splitlines() == [
        "vectorize_x4.hlo: fusion 'neg' (loop emitter, interpreter): 2 input sets, 1 output: OK",
        "  bijection: inputs neg:0 read once, outputs neg written once",
        "check: 1 fusion, all agree",
    ]


def test_an_unavailable_backend_says_why_and_exits_non_zero(capsys, x4):
    code, out, err = _run(capsys, x4, "--backend", "cuda")
    assert code == 2 and out == ""
    assert "heron check: error:" in err and "'cuda'" in err and "is not available: " in err


def test_an_unknown_fusion_or_file_is_an_input_error(capsys, x4, tmp_path):
    code, _, err = _run(capsys, x4, "--fusion", "nope")
    assert code == 2 and "no fusion named 'nope'" in err
    code, _, err = _run(capsys, str(tmp_path / "missing.hlo"))
    assert code == 2 and "no such file" in err


def test_a_fusion_over_max_elements_is_refused(capsys, x4):
    code, out, _ = _run(capsys, x4, "--max-elements", "1000")
    assert code == 2  # a refusal, not a disagreement (issue 13's contract)
    assert ": REFUSED" in out
    assert "too large for the interpreter: parameter 0 'input' (f32[20,40,300]) has 240000" in out


def test_a_bad_run_line_is_an_input_error(capsys, tmp_path):
    file = tmp_path / "bad.hlo"
    file.write_text("// RUN: gpu_test_correctness %s --bijection_inputs=neg:zero\n" + _NEG)
    code, _, err = _run(capsys, str(file))
    assert code == 2 and "bad.hlo:1: gpu_test_correctness" in err


_NEG = "neg {\n  %p = f32[20] parameter(0)\n  ROOT %neg = f32[20] negate(%p)\n}\n"


def test_a_run_line_naming_a_missing_hero_fails(capsys, tmp_path):
    file = tmp_path / "hero.hlo"
    file.write_text("// RUN: gpu_test_correctness %s --bijection_outputs=nothere\n" + _NEG)
    code, out, _ = _run(capsys, str(file))
    assert code == 1
    assert "RUN line names hero 'nothere', which is in no fusion ('fusion')" in out


# -- wrong kernels are reported ------------------------------------------------------------


def _corrupting(original, edit):
    """run_on_device whose outputs (and counts) pass through ``edit`` first."""

    def run(device, kernel, inputs, *, loaded=None):
        return edit(original(device, kernel, inputs, loaded=loaded))

    return run


def test_a_wrong_value_is_reported_with_output_position_and_values(capsys, monkeypatch, tmp_path):
    def flip(run):
        out = run.outputs[0].copy()
        out[13] = np.float32(42.0)
        return attrs.evolve(run, outputs=(out,))

    monkeypatch.setattr(
        check_module, "run_on_device", _corrupting(check_module.run_on_device, flip)
    )
    file = tmp_path / "neg.hlo"
    file.write_text(_NEG)
    code, out, _ = _run(capsys, str(file))
    assert code == 1
    assert "fusion 'neg' (loop emitter, interpreter): 2 input sets, 1 output: FAILED" in out
    assert "output 0 (f32[20] from negate 'neg'), edge inputs: 1 of 20 elements differ" in out
    assert "(bitwise); first at (13,): kernel 42.0 (0x42280000), reference" in out
    assert "check: 1 fusion, 1 failed: 'neg'" in out


def test_a_wrong_reference_is_reported_too(capsys, monkeypatch, x4):
    real = check_module.evaluate_computation

    def off_by_one_ulp(computation, args):
        value = np.asarray(real(computation, args)).copy()
        value.reshape(-1)[7] = np.nextafter(value.reshape(-1)[7], np.float32(np.inf))
        return value

    monkeypatch.setattr(check_module, "evaluate_computation", off_by_one_ulp)
    code, out, _ = _run(capsys, x4)
    assert code == 1
    assert "elements differ (bitwise); first at (0, 0, 7)" in out
    assert "(1 ulps; max 1)" in out or "ulps; max" in out


def _counts_edit(field: str, index: int, value: int):
    def edit(run):
        counts = run.output_counts[0]
        array = getattr(counts, field).copy()
        array[index] = value
        return attrs.evolve(run, output_counts=(attrs.evolve(counts, **{field: array}),))

    return edit


def test_an_element_never_written_is_reported(capsys, monkeypatch, tmp_path):
    edit = _counts_edit("writes", 4 * 19 + 1, 0)  # one byte of element 19
    monkeypatch.setattr(
        check_module, "run_on_device", _corrupting(check_module.run_on_device, edit)
    )
    file = tmp_path / "neg.hlo"
    file.write_text(_NEG)
    code, out, _ = _run(capsys, str(file))
    assert code == 1
    assert (
        "output 0 (f32[20] from negate 'neg'), edge inputs: 1 of 20 elements never written;" in out
    )
    assert "first at (19,)" in out
    assert out.count("never written") == 1  # the same gap in both input sets is one finding


def test_an_element_written_twice_breaks_the_loop_emitters_bijection(capsys, monkeypatch, x4):
    edit = _counts_edit("writes", slice(40, 44), 2)  # element 10
    monkeypatch.setattr(
        check_module, "run_on_device", _corrupting(check_module.run_on_device, edit)
    )
    code, out, _ = _run(capsys, x4)
    assert code == 1
    assert "1 of 240000 elements written more than once (--bijection_outputs=neg);" in out
    assert "first at (0, 0, 10), written 2 times" in out


def test_an_input_read_twice_breaks_the_input_bijection(capsys, monkeypatch, x4):
    def edit(run):
        counts = run.input_counts[0]
        reads = counts.reads.copy()
        reads[4 * 301 : 4 * 302] += 1  # element 301 = (0, 1, 1)
        return attrs.evolve(run, input_counts=(attrs.evolve(counts, reads=reads),))

    monkeypatch.setattr(
        check_module, "run_on_device", _corrupting(check_module.run_on_device, edit)
    )
    code, out, _ = _run(capsys, x4)
    assert code == 1
    assert "bijection input neg:0: parameter 0 'input' (f32[20,40,300])" in out
    assert "1 of 240000 elements not read exactly once; first at (0, 1, 1), read 2 times" in out


def test_a_sanitizer_error_is_reported(capsys, monkeypatch, x4):
    from heron.runtime.interpreter.errors import SanitizerError

    def fault(device, kernel, inputs, *, loaded=None):
        raise SanitizerError("out-of-bounds", "kernel 'fusion', thread (3, 0, 0): index 240000")

    monkeypatch.setattr(check_module, "run_on_device", fault)
    code, out, _ = _run(capsys, x4)
    assert code == 1
    assert "  edge inputs: sanitizer: out-of-bounds: kernel 'fusion', thread (3, 0, 0)" in out


def test_a_corpus_folder_is_checked_file_by_file_with_a_summary(capsys, corpus_dir, tmp_path):
    from heron.harness import CheckOptions, check_file

    folder = tmp_path / "corpus"
    (folder / "loop").mkdir(parents=True)
    names = ("vectorize_x4.hlo", "broadcast.hlo")
    for name in names:
        (folder / "loop" / name).write_text((corpus_dir / "common" / "loop" / name).read_text())
    code, out, err = _run(capsys, str(folder))
    assert (code, err) == (0, ""), out
    for name in names:  # each file's report as heron check FILE prints it, named by its path
        report = check_file(folder / "loop" / name, CheckOptions()).text()
        assert report.replace(name, f"loop/{name}", 1) in out
    assert out.endswith(
        f"checked 2 file(s) under {folder}: 2 agree, 0 disagree, 0 refused or unreadable\n"
    )
    (folder / "broken.hlo").write_text("HloModule broken\nENTRY e { oops }\n")
    code, out, _ = _run(capsys, str(folder))
    # Sorted, broken.hlo comes first: one line, its location and what is wrong.
    assert code == 2 and out.startswith(f"{folder / 'broken.hlo'}:2:16: error: expected '='")
    assert "2 agree, 0 disagree, 1 refused or unreadable" in out
    code, _, err = _run(capsys, str(folder), "--fusion", "neg")
    assert code == 2 and "is a folder" in err


def test_a_fusion_with_as_many_operands_as_the_fusion_passes_allow_runs(capsys, tmp_path):
    # 95 parameters and one output: the fusion passes' limit (96 operands plus
    # outputs). The loop emitter's call takes them all and the two indices; the
    # dialect's call used to hold 64 operands and the check failed inside MLIR.
    count = 95
    body = [f"  p{i} = f32[4,8]{{1,0}} parameter({i})" for i in range(count)]
    previous = "p0"
    for i in range(1, count):
        body.append(f"  a{i} = f32[4,8]{{1,0}} add({previous}, p{i})")
        previous = f"a{i}"
    body[-1] = "  ROOT" + body[-1][1:]
    entry = [f"  q{i} = f32[4,8]{{1,0}} parameter({i})" for i in range(count)]
    operands = ", ".join(f"q{i}" for i in range(count))
    text = "\n".join(
        ["HloModule many_operands", "", "fused {", *body, "}", "", "ENTRY main {", *entry,
         f"  ROOT f = f32[4,8]{{1,0}} fusion({operands}), kind=kLoop, calls=fused", "}", ""]
    )  # fmt: skip
    path = tmp_path / "many_operands.hlo"
    path.write_text(text)
    code, out, _ = _run(capsys, str(path))
    assert code == 0, out
    assert "check: 1 fusion, all agree" in out
