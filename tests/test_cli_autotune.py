"""``heron compile --executable OUT --autotune``: its argument rules, and a clean refusal
where there is no CUDA device (the pass itself is tested in
packages/runtime-cuda/tests/test_autotune.py, on stand-ins and on a GPU)."""

from __future__ import annotations

import pytest

from heron.cli.main import main
from heron.runtime.core.driver_probe import DriverStatus

DENSE = """
HloModule dense
ENTRY main {
  x = f32[16,32]{1,0} parameter(0)
  w = f32[32,24]{1,0} parameter(1)
  ROOT d = f32[16,24]{1,0} dot(x, w), lhs_contracting_dims={1}, rhs_contracting_dims={0}
}
"""


def _heron(capsys, *argv: str) -> tuple[int, str, str]:
    code = main(list(argv))
    out, err = capsys.readouterr()
    return code, out, err


def test_autotune_without_a_cuda_device_fails_cleanly_and_writes_nothing(
    capsys, hlo, tmp_path, monkeypatch
):
    pytest.importorskip("heron.runtime.cuda.device")
    import heron.runtime.cuda.device as cuda_device

    # the same refusal on a machine with a GPU: the probe finds no driver
    monkeypatch.setattr(
        cuda_device, "probe", lambda bindings=None: DriverStatus(False, "no CUDA driver found")
    )
    out_path = tmp_path / "dense.heron"
    code, out, err = _heron(
        capsys,
        "compile",
        hlo(DENSE),
        "--target",
        "h100",
        "--executable",
        str(out_path),
        "--autotune",
    )
    assert code == 2
    assert err == (
        "heron compile: error: --autotune: autotuning needs a CUDA device: no CUDA driver found\n"
    )
    assert "Traceback" not in err and out == ""
    assert not out_path.exists()


def test_autotune_applies_to_executables_on_cuda_targets(capsys, hlo, tmp_path):
    code, _, err = _heron(capsys, "compile", hlo(DENSE), "--autotune", "-o", str(tmp_path) + "/")
    assert code == 2 and err.endswith("error: --autotune applies to --executable only\n")
    code, _, err = _heron(
        capsys,
        "compile",
        hlo(DENSE),
        "--target",
        "mi300x",
        "--executable",
        str(tmp_path / "dense.heron"),
        "--autotune",
    )
    assert code == 2
    assert "--autotune: autotuning tunes cuBLASLt calls on a CUDA device; the target" in err
    assert "is rocm" in err and not (tmp_path / "dense.heron").exists()
