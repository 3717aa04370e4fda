"""Float maximum and minimum as XLA:GPU computes them: ``llvm.maximum``/``llvm.minimum``.

HLO's ``maximum``/``minimum`` of floats give NaN when either operand is one and
order -0 below +0 (IEEE 754-2019 maximum/minimum). heron emits them as the LLVM
intrinsics, which NVPTX makes one ``max.NaN``/``min.NaN`` on sm_80 and later, as
XLA:GPU's kernels have them; written out as compares and selects they were ten
instructions each, which LLVM's InstCombine walked again along a reduction's
chain of them (a max reduction's kernel spent 22 ms in the O3 pipeline, now 2).
The interpreter computes the intrinsics as the evaluator does; the values are
checked against it, NaN, infinities and signed zeros included.
"""

from __future__ import annotations

import numpy as np
import pytest

from heron.compiler import Target, compile_fusion, fusions_of
from heron.compiler.program_run import run_program
from heron.hlo import parse_module
from heron.hlo.evaluator import evaluate_module
from heron.runtime.core.registry import load_backends

H100 = Target.preset("h100")

BINARY = """
HloModule {op}
ENTRY main {{
  p = {t}[8] parameter(0)
  q = {t}[8] parameter(1)
  ROOT r = {t}[8] {op}(p, q)
}}
"""

MAX_ROWS = """
HloModule max_rows
max_r {
  a = f32[] parameter(0)
  b = f32[] parameter(1)
  ROOT m = f32[] maximum(a, b)
}
ENTRY main {
  p = f32[16,512] parameter(0)
  ninf = f32[] constant(-inf)
  ROOT r = f32[16] reduce(p, ninf), dimensions={1}, to_apply=max_r
}
"""


def _ptx(text: str) -> str:
    (fusion,) = fusions_of(parse_module(text))
    kernel = compile_fusion(fusion, H100, "cuda")
    return next(a.data.decode() for a in kernel.artefacts if a.extension == "ptx")


@pytest.mark.parametrize(("op", "instruction"), [("maximum", "max"), ("minimum", "min")])
@pytest.mark.parametrize("dtype", ["f32", "f16", "bf16"])
def test_one_nan_propagating_instruction_on_sm_90(op: str, instruction: str, dtype: str) -> None:
    ptx = _ptx(BINARY.format(op=op, t=dtype))
    assert f"{instruction}.NaN.{dtype}" in ptx, ptx
    assert "selp" not in ptx


def test_a_max_reduction_has_no_select_chain() -> None:
    ptx = _ptx(MAX_ROWS)
    assert "max.NaN.f32" in ptx
    assert "selp.f32" not in ptx


@pytest.mark.parametrize("op", ["maximum", "minimum"])
@pytest.mark.parametrize("dtype", ["f32", "f64", "f16", "bf16"])
def test_nan_infinities_and_signed_zeros_agree_with_the_evaluator(op: str, dtype: str) -> None:
    numpy_type = {"f32": np.float32, "f64": np.float64, "f16": np.float16}.get(dtype)
    if numpy_type is None:
        import ml_dtypes

        numpy_type = ml_dtypes.bfloat16
    lhs = np.array([np.nan, 1.0, -0.0, 0.0, np.inf, -np.inf, np.nan, 2.0], dtype=numpy_type)
    rhs = np.array([1.0, np.nan, 0.0, -0.0, -np.inf, 3.0, np.nan, -2.0], dtype=numpy_type)
    module = parse_module(BINARY.format(op=op, t=dtype))
    device = load_backends().create_device("interpreter")
    run = run_program(module, [lhs, rhs], device, "interpreter", target=H100)
    got = np.asarray(run.outputs[0]).astype(np.float64)
    expected = np.asarray(evaluate_module(module, [lhs, rhs])).astype(np.float64)
    assert np.array_equal(np.isnan(got), np.isnan(expected))
    finite = ~np.isnan(expected)
    assert np.array_equal(got[finite], expected[finite])
    assert np.array_equal(np.signbit(got[finite]), np.signbit(expected[finite]))
    zeros = {"maximum": (0.0, 0.0), "minimum": (-0.0, -0.0)}[op]
    assert [np.signbit(got[2]), np.signbit(got[3])] == [np.signbit(z) for z in zeros]
