"""The ``heron`` command: parse, run, plugins; errors exit 2 with one message.

Most tests call ``heron.cli.main.main`` in-process (fast); a few run the
installed console script to prove the entry point works.
"""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import ml_dtypes
import numpy as np
import pytest

from heron.cli.main import main
from heron.hlo.npz_io import load_outputs, save_inputs

ADD = """\
HloModule add_module

ENTRY main {
  x = f32[2,3]{1,0} parameter(0)
  y = f32[2,3]{1,0} parameter(1)
  ROOT sum = f32[2,3]{1,0} add(x, y)
}
"""

TUPLE_BF16 = """\
HloModule two_outputs

ENTRY main {
  x = bf16[4] parameter(0)
  n = bf16[4] negate(x)
  ROOT t = (bf16[4], bf16[4]) tuple(x, n)
}
"""

SCALE = """\
HloModule scale

ENTRY main {
  x = f32[64] parameter(0)
  c = f32[] constant(3)
  b = f32[64] broadcast(c), dimensions={}
  ROOT m = f32[64] multiply(x, b)
}
"""


def heron(capsys, *argv: str) -> tuple[int, str, str]:
    code = main(list(argv))
    out, err = capsys.readouterr()
    return code, out, err


# -- parse -----------------------------------------------------------------------


def test_parse_prints_the_canonical_text(hlo, capsys):
    from heron.hlo.parser import parse_module
    from heron.hlo.printer import print_module

    code, out, err = heron(capsys, "parse", hlo(ADD))
    assert (code, err) == (0, "")
    assert out.rstrip("\n") == print_module(parse_module(ADD)).rstrip("\n")
    assert "add(" in out
    # Canonical means stable: parsing the output and printing it again changes nothing.
    code, again, _ = heron(capsys, "parse", hlo(out, "printed.hlo"))
    assert code == 0 and again == out


def test_parse_error_is_one_located_message_and_exit_2(hlo, capsys):
    path = hlo(
        "HloModule broken\n\nENTRY main {\n  x = f32[2] parameter(0)\n  ROOT y = f32[2] \n}\n"
    )
    code, out, err = heron(capsys, "parse", path)
    assert code == 2 and out == ""
    assert err.startswith(f"{path}:") and "error:" in err
    assert "Traceback" not in err


def test_verifier_runs(hlo, capsys):
    path = hlo(
        "HloModule bad\n\nENTRY main {\n  x = f32[2] parameter(0)\n  y = f32[3] parameter(1)\n"
        "  ROOT s = f32[2] add(x, y)\n}\n"
    )
    code, _, err = heron(capsys, "parse", path)
    assert code == 2 and "error:" in err and "Traceback" not in err


def test_missing_file_exits_2(capsys, tmp_path):
    code, out, err = heron(capsys, "parse", str(tmp_path / "nope.hlo"))
    assert code == 2 and out == ""
    assert err.strip() == f"heron parse: error: {tmp_path / 'nope.hlo'}: no such file"
    # A folder is read as an XLA dump; one without a dumped module says how to make one.
    code, _, err = heron(capsys, "run", str(tmp_path))
    assert code == 2 and "not an XLA dump folder" in err and "--xla_dump_to" in err


def test_corpus_file_parses(corpus_dir, capsys):
    code, out, err = heron(capsys, "parse", str(corpus_dir / "common" / "loop" / "broadcast.hlo"))
    assert code == 0, err
    assert "broadcast(" in out


# -- run -------------------------------------------------------------------------
# These are about the reference evaluator path and the npz files; tests/test_cli_run.py
# has the device backends (auto, interpreter, cuda, rocm) and --check.


def test_run_with_inputs_writes_outputs(hlo, capsys, tmp_path):
    x = np.arange(6, dtype=np.float32).reshape(2, 3)
    y = np.full((2, 3), 0.5, np.float32)
    inputs = tmp_path / "in.npz"
    np.savez(inputs, arg0=x, arg1=y)
    output = tmp_path / "out.npz"
    code, out, err = heron(
        capsys,
        "run",
        "--backend",
        "reference",
        hlo(ADD),
        "--inputs",
        str(inputs),
        "--output",
        str(output),
    )
    assert (code, err) == (0, "")
    with np.load(output) as data:
        assert data.files == ["out0"]
        assert np.array_equal(data["out0"], x + y)
    assert f"parameters (from {inputs}):" in out
    assert "arg0  x  f32[2,3]" in out and "arg1  y  f32[2,3]" in out
    assert "out0  f32[2,3]  min 0.5  max 5.5  mean 3  first [0.5, 1.5, 2.5, 3.5]" in out
    assert f"wrote 1 output(s) to {output}" in out


def test_run_bf16_tuple_round_trips_through_npz(hlo, capsys, tmp_path):
    x = np.array([1.0, -2.5, 0.0078125, 3.0], np.float32)  # bf16 values, stored as f32
    inputs = tmp_path / "in.npz"
    np.savez(inputs, arg0=x)
    output = tmp_path / "out.npz"
    code, _, err = heron(
        capsys,
        "run",
        "--backend",
        "reference",
        hlo(TUPLE_BF16),
        "--inputs",
        str(inputs),
        "--output",
        str(output),
    )
    assert (code, err) == (0, "")
    with np.load(output) as data:
        assert str(data["out0.hlo_type"]) == "bf16" and str(data["out1.hlo_type"]) == "bf16"
        assert data["out1"].dtype == np.float32
    out0, out1 = load_outputs(output)
    assert out0.dtype == ml_dtypes.bfloat16
    assert np.array_equal(out0.astype(np.float32), x)
    assert np.array_equal(out1.astype(np.float32), -x)


def test_run_accepts_save_inputs_files(hlo, capsys, tmp_path):
    inputs = tmp_path / "in.npz"
    save_inputs(inputs, [np.array([1, 2, 3, 4], ml_dtypes.bfloat16)])
    code, out, err = heron(
        capsys, "run", "--backend", "reference", hlo(TUPLE_BF16), "--inputs", str(inputs)
    )
    assert (code, err) == (0, "")
    assert "out1  bf16[4]  min -4  max -1" in out


def test_run_refuses_inexact_inputs(hlo, capsys, tmp_path):
    inputs = tmp_path / "in.npz"
    np.savez(inputs, arg0=np.array([1.0, 0.1, 2.0, 3.0], np.float32))
    code, out, err = heron(
        capsys, "run", "--backend", "reference", hlo(TUPLE_BF16), "--inputs", str(inputs)
    )
    assert code == 2 and out == ""
    assert "arg0 (parameter 0 'x', bf16[4])" in err
    assert "float32 value 0.1 at index (1,) is not exactly representable as bf16" in err
    assert "Traceback" not in err


def test_run_refuses_wrong_shapes_and_missing_arguments(hlo, capsys, tmp_path):
    inputs = tmp_path / "in.npz"
    np.savez(inputs, arg0=np.zeros((3, 2), np.float32), arg1=np.zeros((2, 3), np.float32))
    code, _, err = heron(capsys, "run", "--backend", "reference", hlo(ADD), "--inputs", str(inputs))
    assert code == 2 and "array has shape (3, 2), expected (2, 3)" in err
    np.savez(inputs, arg0=np.zeros((2, 3), np.float32))
    code, _, err = heron(capsys, "run", "--backend", "reference", hlo(ADD), "--inputs", str(inputs))
    assert code == 2 and "no array 'arg1'" in err


def test_random_inputs_are_deterministic_per_seed(hlo, capsys):
    path = hlo(SCALE)

    def summary(*extra):
        code, out, err = heron(capsys, "run", "--backend", "reference", path, *extra)
        assert (code, err) == (0, "")
        return [line for line in out.splitlines() if not line.startswith("evaluated in")]

    first = summary()
    assert first == summary("--seed", "0")
    assert "parameters (random, seed 0):" in first
    out_line = next(line for line in first if line.strip().startswith("out0"))
    assert out_line.strip().startswith("out0  f32[64]  min ")
    other = summary("--seed", "7")
    assert other != first and "parameters (random, seed 7):" in other


def test_random_inputs_match_the_evaluator(hlo, capsys, tmp_path):
    from heron.hlo.evaluator import random_arguments
    from heron.hlo.parser import parse_module

    output = tmp_path / "out.npz"
    code, _, err = heron(
        capsys, "run", "--backend", "reference", hlo(SCALE), "--seed", "3", "--output", str(output)
    )
    assert (code, err) == (0, "")
    (x,) = random_arguments(parse_module(SCALE), seed=3)
    (result,) = load_outputs(output)
    assert np.array_equal(result, x * np.float32(3))


def test_unknown_backend_is_refused_by_the_parser(hlo, capsys):
    with pytest.raises(SystemExit) as exit_info:
        main(["run", hlo(ADD), "--backend", "tpu"])
    assert exit_info.value.code == 2
    err = capsys.readouterr().err
    assert "invalid choice: 'tpu'" in err and "'interpreter'" in err and "'reference'" in err


def test_seed_with_inputs_is_refused(hlo, capsys, tmp_path):
    inputs = tmp_path / "in.npz"
    np.savez(inputs, arg0=np.zeros((2, 3), np.float32), arg1=np.zeros((2, 3), np.float32))
    code, _, err = heron(
        capsys, "run", "--backend", "reference", hlo(ADD), "--inputs", str(inputs), "--seed", "1"
    )
    assert code == 2 and "--seed only applies to random arguments" in err


def test_corpus_fusion_without_entry_runs(corpus_dir, capsys):
    code, out, err = heron(
        capsys,
        "run",
        "--backend",
        "reference",
        str(corpus_dir / "common" / "loop" / "acos_f64.hlo"),
    )
    assert code == 0, err
    assert "arg0  p0  f64[256]" in out
    assert "out0  f64[256]" in out


# -- plugins and the installed command ---------------------------------------------


def test_plugins_lists_the_installed_fixture(capsys):
    code, out, err = heron(capsys, "plugins")
    assert (code, err) == (0, "")
    emitters, backends = out.split("backends (entry-point group heron.backends):")
    assert "example  priority 5  from heron-example-plugin 0.1.0" in emitters
    assert "example  priority 0  from heron-example-plugin 0.1.0" in backends
    assert "available: always available" in backends


def _installed_heron() -> Path:
    script = Path(sys.executable).parent / ("heron.exe" if os.name == "nt" else "heron")
    if not script.exists():
        pytest.fail(
            f"the heron command is not installed next to {sys.executable}; run `nox -s tests`"
        )
    return script


def test_console_script(hlo):
    script = _installed_heron()
    version = subprocess.run([script, "--version"], capture_output=True, text=True, check=True)
    assert version.stdout.strip() == "heron 0.1.0"
    done = subprocess.run([script, "parse", hlo(ADD)], capture_output=True, text=True)
    assert done.returncode == 0, done.stderr
    assert "ROOT" in done.stdout
    failed = subprocess.run([script, "parse", "/no/such/file.hlo"], capture_output=True, text=True)
    assert failed.returncode == 2
    assert failed.stderr == "heron parse: error: /no/such/file.hlo: no such file\n"


def test_usage_errors_exit_2(capsys):
    with pytest.raises(SystemExit) as info:
        main(["frobnicate"])
    assert info.value.code == 2
    with pytest.raises(SystemExit) as info:
        main([])
    assert info.value.code == 2
    capsys.readouterr()
