"""Findings of the fuzzer (tests/fuzz), each with its reproducer: the regression tests.

Each test runs heron in a subprocess (a finding may abort the process) and
asserts the contract: exit 0, 1 or 2, no traceback. An open finding is added
here as a strict xfail (``strict=True``: the day the bug is fixed the test
passes, the xfail fails, and whoever fixed it removes the marker, keeping the
test as the regression test).
"""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

REPRODUCERS = Path(__file__).resolve().parent / "fuzz" / "reproducers"


def _heron(*args: str) -> subprocess.CompletedProcess:
    code = "import sys; from heron.cli.main import main; sys.exit(main(sys.argv[1:]))"
    return subprocess.run(
        [sys.executable, "-c", code, *args], capture_output=True, text=True, timeout=300
    )


def test_rocm_s4_reduce_then_add_compiles_or_is_refused(tmp_path: Path) -> None:
    """Fixed fuzz finding generated-s1-97 (SIGABRT in LLVM's AMDGPU instruction selection,
    "Invalid truncate node, src < dst!"): LLVM's vectorizers made `<N x i4>` vectors of a
    scalar s4 reduction loop; the ROCm backend now optimises without them when they
    appear (tests/test_rocm_subbyte_codegen.py has the variants)."""
    hlo = REPRODUCERS / "rocm_s4_reduce_then_add_sigabrt.hlo"
    result = _heron("compile", str(hlo), "--target", "mi300x", "-o", f"{tmp_path}/")
    assert result.returncode in (0, 2), (result.returncode, result.stderr[-2000:])
    assert "Traceback" not in result.stderr


def test_check_stays_near_the_memory_budget(corpus_dir: Path) -> None:
    """Fixed fuzz finding mutation-s1-585: `heron --memory-budget 256M check` of this
    corpus file reached about 2 GiB of RSS (both input sets and the generator's
    temporaries for two 92 MB bf16 inputs) before the interpreter refused a buffer.
    A check now reserves what it will hold before making any of it."""
    hlo = corpus_dir / "gpu" / "transpose" / "multiple_roots_one_shmem_transpose.hlo"
    # The child reports its own high-water mark (VmHWM): ru_maxrss survives execve,
    # so measured from here it would include this pytest worker's own peak.
    code = (
        "import sys\nfrom heron.cli.main import main\ntry:\n    code = main(sys.argv[1:])\n"
        "finally:\n    hwm = [l for l in open('/proc/self/status') if l.startswith('VmHWM')]\n"
        "    sys.stderr.write('\\n' + hwm[0])\nsys.exit(code)"
    )
    argv = [sys.executable, "-c", code, "--memory-budget", "256M", "check", str(hlo)]
    result = subprocess.run(argv, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True)
    assert result.returncode in (0, 1, 2), result.stderr[-2000:]
    peak_mib = int(result.stderr.strip().splitlines()[-1].split()[1]) // 1024
    # The budget plus heron's libraries (about 300 MiB) and some slack.
    assert peak_mib < 256 + 1024, f"peak RSS {peak_mib} MiB under a 256 MiB budget"


def test_a_transpose_with_a_zero_size_dimension_compiles(tmp_path: Path) -> None:
    """Fixed fuzz finding mutation-s1-687 (ZeroDivisionError in the packed-tile rule):
    a transpose of nothing is never a tiled hero, so it gets the empty loop kernel."""
    hlo = REPRODUCERS / "transpose_zero_size_dim_zerodivision.hlo"
    result = _heron("compile", str(hlo), "--target", "h100", "-o", f"{tmp_path}/")
    assert result.returncode == 0, (result.returncode, result.stderr[-2000:])
    result = _heron("check", str(hlo))
    assert result.returncode == 0, (result.returncode, result.stdout, result.stderr[-2000:])


def test_an_npy_header_with_unbalanced_braces_is_refused() -> None:
    """Fixed fuzz finding npz-s1-671 (tokenize.TokenError from numpy's header parser)."""
    result = _heron(
        "run",
        str(REPRODUCERS / "npz_target.hlo"),
        "--backend",
        "reference",
        "--inputs",
        str(REPRODUCERS / "npz_header_unbalanced_braces.npz"),
    )
    assert result.returncode == 2, (result.returncode, result.stderr[-2000:])
    assert len(result.stderr.strip().splitlines()) == 1, result.stderr
    assert "member 'arg0.npy': bad NPY header" in result.stderr


def test_run_check_agrees_on_a_valid_corpus_reduction(corpus_dir: Path) -> None:
    """Fixed fuzz notes mutation-s1-300, -639, -729, -768: `heron run --check` exited 1
    (36 ulps) on a valid f32 column reduction that `heron check` passes; both now make
    one tolerance decision (heron.harness.tolerance.output_tolerance)."""
    hlo = corpus_dir / "gpu" / "reduce_column" / "vectorize_x2_f32.hlo"
    result = _heron("run", str(hlo), "--backend", "interpreter", "--seed", "0", "--check")
    assert result.returncode == 0, result.stdout[-2000:] if result.stdout else result.stderr


def test_rocm_packed_store_of_a_known_zero_compiles(tmp_path: Path) -> None:
    """Fixed fuzz finding generated-s1-3058 (SIGABRT in AMDGPU instruction selection:
    an idempotent byte atomic); tests/test_rocm_subbyte_codegen.py has the unit tests."""
    hlo = REPRODUCERS / "rocm_s4_idempotent_atomic_sigabrt.hlo"
    for target in ("mi300x", "h100"):
        result = _heron("compile", str(hlo), "--target", target, "-o", f"{tmp_path}/{target}/")
        assert result.returncode == 0, (target, result.returncode, result.stderr[-2000:])
    result = _heron("check", str(hlo), "--target", "mi300x")
    assert result.returncode == 0, (result.returncode, result.stdout[-2000:])


def test_a_gather_with_a_missing_operand_is_refused_with_its_location() -> None:
    """Fixed fuzz findings mutation-s1-2202, -3195 (IndexError in shape inference, exit 3):
    gather takes exactly two operands; an opcode mutated into gather had one or none."""
    hlo = REPRODUCERS / "gather_one_operand.hlo"
    result = _heron("parse", str(hlo))
    assert result.returncode == 2, (result.returncode, result.stderr[-2000:])
    assert "(gather): expects 2 operands, has 1" in result.stderr
    assert result.stderr.startswith(f"{hlo}:")


def test_a_scatter_with_a_zero_size_window_is_checked(corpus_dir: Path, tmp_path: Path) -> None:
    """Fixed fuzz finding mutation-s1-2652 (ZeroDivisionError in heron check's scatter
    inputs, exit 3): every size 8 of permuted_sorted_indices made 0, so the update
    window has size 0 and the index slots were divided by it."""
    source = (corpus_dir / "gpu" / "scatter" / "permuted_sorted_indices.hlo").read_text()
    hlo = tmp_path / "zero_window.hlo"
    hlo.write_text(source.replace("8", "0"))
    result = _heron("check", str(hlo))
    assert result.returncode in (0, 2), (result.returncode, result.stdout[-2000:])
    assert "internal error" not in result.stderr, result.stderr


def test_rocm_f16_floor_compiles(tmp_path: Path) -> None:
    """Fixed fuzz finding generated-s1-6949 (SIGABRT in AMDGPU instruction selection:
    an f16 fcopysign with an f32 sign, folded from floor's signed-zero fix-up)."""
    hlo = REPRODUCERS / "rocm_f16_floor_copysign_sigabrt.hlo"
    result = _heron("compile", str(hlo), "--target", "mi300x", "-o", f"{tmp_path}/")
    assert result.returncode == 0, (result.returncode, result.stderr[-2000:])
    result = _heron("check", str(hlo), "--target", "mi300x")
    assert result.returncode == 0, (result.returncode, result.stdout[-2000:])


def test_sine_of_large_arguments_agrees() -> None:
    """Fixed fuzz note mutation-s1-3189: sin/cos of large f32 (and bf16) arguments were
    wrong (Cody-Waite reduction only); they take a Payne-Hanek reduction from 2^20 on.
    f64 still has no such path (docs/reliability.md, the notes of the run)."""
    result = _heron("check", str(REPRODUCERS / "sine_bf16_large_arguments.hlo"))
    assert result.returncode == 0, result.stdout[-2000:]


def test_a_scatter_adding_in_its_own_order_is_checked_within_the_reassociation_bounds() -> None:
    """Fixed fuzz finding mutation-s20261203-222: `heron run --check` compared a float
    scatter-add bitwise, though its kernel adds the updates that meet at an element in
    the order they arrive (here a loop launch striding its threads over two million
    update elements; on a GPU, atomics): the same 703-ulp difference from the
    reference's update order is now within the reassociation bounds."""
    hlo = REPRODUCERS / "scatter_add_many_updates_strided.hlo"
    result = _heron("run", str(hlo), "--backend", "interpreter", "--seed", "0", "--check")
    assert result.returncode == 0, (result.stdout[-2000:], result.stderr[-2000:])
    assert "(allowed: reassociation bounds)" in result.stdout
