"""Issue 13's CLI findings, each with its reproducer: the exit-status contract holds.

0 success, 1 disagreement, 2 bad or refused input (one message, ``file:line:col``
where known, no traceback), 3 an internal error (one line; the traceback only
with ``--debug``). Reproducers live in ``tests/data/reliability``; bad .npz files
are built here (docs/reliability.md, "The contract").
"""

from __future__ import annotations

import os
import zipfile
from pathlib import Path

import numpy as np
import pytest

from heron.cli.main import EXIT_INTERNAL_ERROR, main
from heron.hlo import memory_budget
from heron.hlo.memory_budget import MemoryBudgetError

DATA = Path(__file__).parent / "data" / "reliability"
GELU = Path(__file__).parent.parent / "examples" / "gelu.hlo"


def heron(capsys, *argv: str) -> tuple[int, str, str]:
    code = main([str(a) for a in argv])
    out, err = capsys.readouterr()
    return code, out, err


@pytest.fixture(autouse=True)
def clean_budget(monkeypatch):
    monkeypatch.delenv(memory_budget.ENV, raising=False)
    monkeypatch.delenv("HERON_EVALUATOR_MAX_BYTES", raising=False)
    monkeypatch.delenv("HERON_DEBUG", raising=False)
    yield
    memory_budget.set_budget(None)


def one_error(err: str) -> str:
    """The message, checked to be an error without a traceback (first line returned)."""
    assert "Traceback" not in err
    assert err.strip(), "no message"
    return err.splitlines()[0]


# -- internal errors -------------------------------------------------------------------


def _broken(args):
    raise ZeroDivisionError("division by zero")


def test_an_internal_error_exits_3_with_one_line(monkeypatch, capsys):
    monkeypatch.setattr("heron.cli.parse.run", _broken)
    code, _, err = heron(capsys, "parse", DATA / "small_negate.hlo")
    assert code == EXIT_INTERNAL_ERROR == 3
    assert err.count("\n") == 1 and "Traceback" not in err
    assert "heron parse: internal error" in err and "ZeroDivisionError: division by zero" in err
    assert "heron --debug parse" in err


@pytest.mark.parametrize("how", ["option", "environment"])
def test_debug_shows_the_traceback(monkeypatch, capsys, how):
    monkeypatch.setattr("heron.cli.parse.run", _broken)
    if how == "option":
        code, _, err = heron(capsys, "--debug", "parse", DATA / "small_negate.hlo")
    else:
        monkeypatch.setenv("HERON_DEBUG", "1")
        code, _, err = heron(capsys, "parse", DATA / "small_negate.hlo")
    assert code == 3
    assert "Traceback" in err and "_broken" in err
    assert err.rstrip().splitlines()[-1].startswith("heron parse: internal error")


def test_memory_error_is_a_refusal_not_a_disagreement(monkeypatch, capsys):
    def exhausted(args):
        raise MemoryError("Unable to allocate 2.25 TiB")

    monkeypatch.setattr("heron.cli.parse.run", exhausted)
    code, _, err = heron(capsys, "parse", DATA / "small_negate.hlo")
    assert code == 2
    assert one_error(err).startswith("heron parse: error: out of memory: Unable to allocate")


# -- invalid UTF-8 ---------------------------------------------------------------------


@pytest.mark.parametrize(
    "command",
    [["parse"], ["run", "--backend", "reference"], ["run"], ["compile"], ["check"], ["emit"]],
)
def test_invalid_utf8_is_a_located_input_error(capsys, tmp_path, command):
    code, out, err = heron(capsys, *command, DATA / "invalid_utf8.hlo", *_outdir(command, tmp_path))
    assert code == 2
    assert one_error(err).endswith(
        "invalid_utf8.hlo:4:33: error: invalid UTF-8: byte 0xff (HLO text must be UTF-8)"
    )
    assert out == ""


def _outdir(command, tmp_path):
    return ["-o", str(tmp_path) + "/"] if command == ["compile"] else []


def test_invalid_utf8_column_counts_characters(capsys):
    code, _, err = heron(capsys, "parse", DATA / "invalid_utf8_in_name.hlo")
    assert code == 2
    assert "invalid_utf8_in_name.hlo:4:4: error: invalid UTF-8: byte 0xc3" in one_error(err)
    assert err.splitlines()[2] == "     ^"


def test_a_bad_byte_anywhere_is_located_exactly(capsys, tmp_path):
    text = GELU.read_bytes()
    rng = np.random.default_rng(13)
    for case, position in enumerate(sorted(rng.choice(len(text), 25, replace=False))):
        bad = bytes([int(rng.choice([0x80, 0xBF, 0xC0, 0xF5, 0xFF]))])
        path = tmp_path / f"case{case}.hlo"
        path.write_bytes(text[:position] + bad + text[position:])
        code, out, err = heron(capsys, "parse", path)
        line = text[:position].count(b"\n") + 1
        column = len(text[text.rfind(b"\n", 0, position) + 1 : position].decode()) + 1
        assert (code, out) == (2, ""), err
        assert one_error(err) == (
            f"{path}:{line}:{column}: error: invalid UTF-8: byte 0x{bad[0]:02x}"
            " (HLO text must be UTF-8)"
        )


# -- the memory budget -----------------------------------------------------------------


@pytest.mark.parametrize("backend", ["reference", "interpreter"])
def test_random_inputs_over_the_budget_are_refused(capsys, backend):
    code, _, err = heron(
        capsys,
        "--memory-budget",
        "1G",
        "run",
        DATA / "random_inputs_too_large.hlo",
        "--backend",
        backend,
    )
    assert code == 2
    line = one_error(err)
    assert "random arguments for the 1 parameter(s) of 'main' would need 40.00 GiB" in line
    assert "memory budget of 1.00 GiB (1073741824 bytes) (--memory-budget;" in line


def test_the_options_are_accepted_after_the_command_too(capsys, monkeypatch):
    code, _, err = heron(
        capsys, "--memory-budget", "3G", "run", DATA / "random_inputs_too_large.hlo",
        "--backend", "reference", "--memory-budget", "2G",
    )  # fmt: skip
    assert code == 2 and "budget of 2.00 GiB" in err
    monkeypatch.setattr("heron.cli.parse.run", _broken)
    code, _, err = heron(capsys, "parse", DATA / "small_negate.hlo", "--debug")
    assert code == 3 and "Traceback" in err


def test_the_budget_comes_from_the_environment(capsys, monkeypatch):
    monkeypatch.setenv(memory_budget.ENV, "2G")
    code, _, err = heron(
        capsys, "run", DATA / "random_inputs_too_large.hlo", "--backend", "reference"
    )
    assert code == 2 and "budget of 2.00 GiB (2147483648 bytes) (HERON_MEMORY_BUDGET;" in err
    monkeypatch.setenv(memory_budget.ENV, "plenty")
    code, _, err = heron(capsys, "parse", DATA / "small_negate.hlo")
    assert code == 2
    assert one_error(err).startswith(
        "heron parse: error: environment variable HERON_MEMORY_BUDGET: 'plenty'"
    )


def test_an_hlo_file_over_the_budget_is_not_read(capsys):
    code, _, err = heron(capsys, "--memory-budget", "100", "parse", DATA / "small_negate.hlo")
    assert code == 2
    assert f"error: reading {DATA / 'small_negate.hlo'} would need" in one_error(err)


def test_the_interpreters_buffers_are_checked_before_allocating(capsys):
    code, out, err = heron(
        capsys,
        "--memory-budget",
        "1G",
        "run",
        DATA / "broadcast_too_large.hlo",
        "--backend",
        "interpreter",
    )
    assert code == 2
    line = one_error(err)
    # heron run allocates the executable's allocation table (the result is allocation 1).
    assert "interpreter buffer 'allocation 1' of 2400000000000 bytes" in line
    assert "over the memory budget of 1.00 GiB" in line


def test_the_reference_evaluators_results_are_checked(capsys):
    code, _, err = heron(
        capsys, "--memory-budget", "1G", "run", DATA / "broadcast_too_large.hlo",
        "--backend", "reference",
    )  # fmt: skip
    assert code == 2
    assert "broadcast_too_large.hlo:12:8: error: fusion 'f'" in err and "needs 2.18 TiB" in err


def test_the_interpreter_device_accounts_live_buffers():
    from heron.runtime.interpreter.device import BYTES_PER_BYTE, InterpreterDevice

    device = InterpreterDevice()
    memory_budget.set_budget(1000 * BYTES_PER_BYTE)
    first = device.allocate(600, "a")
    with pytest.raises(MemoryBudgetError, match="buffer 'b' of 600 bytes"):
        device.allocate(600, "b")
    device.free(first)
    device.free(first)  # twice: counted once
    assert device.live_bytes == 0
    device.allocate(600, "b")


def test_a_bad_memory_budget_is_a_usage_error(capsys):
    with pytest.raises(SystemExit) as info:
        main(["--memory-budget", "lots", "parse", str(DATA / "small_negate.hlo")])
    assert info.value.code == 2
    assert "'lots' is not a size" in capsys.readouterr().err


# -- npz inputs ------------------------------------------------------------------------


def _npz(path: Path, members: dict[str, bytes]) -> Path:
    with zipfile.ZipFile(path, "w") as archive:
        for name, data in members.items():
            archive.writestr(name, data)
    return path


@pytest.mark.parametrize(
    ("members", "message"),
    [
        ({"arg0.npy": b"not an array"}, "member 'arg0.npy' is not an .npy array"),
        ({"arg0.npy": b"\x93NUMPY\x01\x00"}, "member 'arg0.npy': bad NPY header"),
    ],
)
def test_malformed_npz_inputs_exit_2(capsys, tmp_path, members, message):
    inputs = _npz(tmp_path / "in.npz", members)
    code, _, err = heron(capsys, "run", DATA / "small_negate.hlo", "--inputs", inputs)
    assert code == 2
    line = one_error(err)
    assert f"inputs file {inputs}" in line and message in line


def test_a_pickled_npz_input_exits_2(capsys, tmp_path):
    inputs = tmp_path / "pickle.npz"
    np.savez(inputs, arg0=np.array([None, 1, 2, 3], dtype=object))
    code, _, err = heron(capsys, "run", DATA / "small_negate.hlo", "--inputs", inputs)
    assert code == 2 and "holds Python objects (a pickle)" in one_error(err)


# -- output paths ----------------------------------------------------------------------


def test_compile_onto_a_device_file_is_refused_before_compiling(capsys):
    code, out, err = heron(capsys, "compile", DATA / "small_negate.hlo", "-o", "/dev/full")
    assert code == 2 and out == ""
    assert one_error(err) == (
        "heron compile: error: -o /dev/full: not a regular file (a device, FIFO or socket);"
        " give a file name"
    )
    assert not Path("/dev/full.ptx").exists()


@pytest.mark.parametrize("command", ["compile", "run"])
def test_outputs_into_a_missing_directory_are_refused(capsys, tmp_path, command):
    target = tmp_path / "missing" / "out.npz"
    option = "-o" if command == "compile" else "--output"
    extra = ["--backend", "reference"] if command == "run" else []
    code, out, err = heron(capsys, command, DATA / "small_negate.hlo", option, target, *extra)
    assert code == 2 and out == ""
    assert f"directory {tmp_path / 'missing'} does not exist" in one_error(err)


def test_run_output_onto_a_directory_is_refused(capsys, tmp_path):
    code, out, err = heron(
        capsys, "run", DATA / "small_negate.hlo", "--backend", "reference", "--output", tmp_path
    )
    assert code == 2 and out == ""
    assert one_error(err) == f"heron run: error: --output {tmp_path}: is a directory, not a file"


@pytest.mark.skipif(not Path("/proc/self").exists(), reason="needs /proc")
def test_outputs_where_no_file_can_be_created_are_refused(capsys):
    code, out, err = heron(capsys, "compile", DATA / "small_negate.hlo", "-o", "/proc/x.ptx")
    assert code == 2 and out == ""
    assert "-o /proc/x.ptx: cannot create files in directory /proc" in one_error(err)


@pytest.mark.skipif(os.geteuid() == 0, reason="root writes into read-only directories")
def test_outputs_into_a_read_only_directory_are_refused(capsys, tmp_path):
    locked = tmp_path / "locked"
    locked.mkdir()
    locked.chmod(0o555)
    try:
        code, _, err = heron(
            capsys, "run", DATA / "small_negate.hlo", "--backend", "reference",
            "--output", locked / "out.npz",
        )  # fmt: skip
    finally:
        locked.chmod(0o755)
    assert code == 2 and "is not writable" in one_error(err)


def test_outputs_are_written_atomically(capsys, tmp_path):
    from heron.hlo.npz_io import load_outputs

    output = tmp_path / "out.npz"
    output.write_bytes(b"old")
    code, _, err = heron(
        capsys, "run", DATA / "small_negate.hlo", "--backend", "reference", "--output", output
    )
    assert (code, err) == (0, "")
    (result,) = load_outputs(output)
    assert result.shape == (4,)
    assert sorted(p.name for p in tmp_path.iterdir()) == ["out.npz"]  # no temporary left


# -- refusals are not disagreements ----------------------------------------------------


@pytest.mark.parametrize(
    "command", [["compile"], ["emit"], ["check"], ["run", "--backend", "interpreter"]]
)
def test_a_tiled_layout_is_refused_at_its_location(capsys, tmp_path, command):
    code, out, err = heron(capsys, *command, DATA / "tiled_layout.hlo", *_outdir(command, tmp_path))
    assert code == 2
    line = one_error(err)
    assert line.endswith(
        "tiled_layout.hlo:5:3: error: parameter 'p': layout {1,0:T(8,128)} has tiling;"
        f" {'heron run on a device' if command[0] == 'run' else 'heron ' + command[0]}"
        " supports only minor-to-major orders"
    )


def test_check_refusing_a_fusion_too_large_exits_2(capsys):
    code, out, _ = heron(capsys, "check", DATA / "small_negate.hlo", "--max-elements", "2")
    assert code == 2
    assert ": REFUSED" in out and "more than --max-elements 2" in out


def test_an_arch_that_is_no_gpu_arch_is_one_line(capfd, tmp_path):
    # Issue 13 saw `--arch sm_1` print six LLVM warnings before the error.
    code = main(["compile", str(DATA / "small_negate.hlo"), "--arch", "sm_1", "-o", f"{tmp_path}/"])
    out, err = capfd.readouterr()
    assert code == 2 and out == ""
    assert err.count("\n") == 1 and err.startswith("heron compile: error: unknown GPU arch 'sm_1'")


def test_heron_check_over_the_budget_is_a_refusal_not_a_disagreement(capsys):
    code, out, err = heron(capsys, "--memory-budget", "4M", "check", DATA / "check_over_budget.hlo")
    assert code == 2, (out, err)
    assert "REFUSED" in out and "memory budget of 4.00 MiB" in out


def test_heron_check_of_a_fusion_compile_refuses_exits_2_like_compile(capsys):
    """Fuzz finding generated-s1-1849: check reported FAILED (exit 1) where compile exits 2.

    Under 64-lane warps this fusion is a loop fusion with outputs of different sizes,
    which the loop emitter refuses.
    """
    hlo = Path(__file__).resolve().parent / "data" / "check" / "reduce_side_output.hlo"
    code, out, _ = heron(capsys, "check", hlo, "--target", "mi300x")
    assert code == 2 and "REFUSED" in out and "compile:" in out


# -- the interpreter's work limit --------------------------------------------------------


def test_a_launch_past_the_interpreter_work_limit_is_a_refusal(capsys, monkeypatch):
    """Fuzz finding mutation-s1-1080 (a valid reduction whose every thread loops over the
    whole input: hours on the interpreter, a timeout in the fuzzer): with a work limit
    the launch stops, and `heron check` and `heron run` refuse it (exit 2) saying so."""
    monkeypatch.setenv("HERON_INTERPRETER_MAX_WORK", "1000")
    code, out, err = heron(capsys, "check", GELU)
    assert code == 2, (out, err)
    assert "REFUSED" in out and "work limit of 1,000 (HERON_INTERPRETER_MAX_WORK)" in out
    assert "1 refused: " in out and "failed" not in out.splitlines()[-1]
    code, out, err = heron(capsys, "run", GELU, "--backend", "interpreter")
    assert code == 2, (out, err)
    assert "work limit" in one_error(err)
    monkeypatch.delenv("HERON_INTERPRETER_MAX_WORK")
    code, out, err = heron(capsys, "check", GELU)
    assert code == 0, (out, err)
