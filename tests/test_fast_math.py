"""f32 division, sqrt and rsqrt as XLA:GPU computes them (issue 29): no IEEE slow paths.

heron marks the f32 divisions of HLO ``divide``, ``logistic`` and f32 ``tanh``,
and HLO's f32 ``sqrt`` and ``rsqrt`` (``heron.emitters.fast_math``); the CUDA
lowering makes them ``div.full.f32`` (``rcp.approx.f32`` for ``1 / y``, as XLA's
NVPTX backend does), ``sqrt.approx.f32`` and ``rsqrt.approx.f32``, the
interpreter computes them correctly rounded, and the check's tolerance allows
the difference (``heron.emitters.math_accuracy.FAST_MATH``). f64 stays correctly
rounded, as XLA's does. The SASS tests need ptxas and nvdisasm
(heron-runtime-cuda[compile]); they hold math kernels within 1.2x of XLA's SASS.
"""

from __future__ import annotations

from pathlib import Path

import pytest

from heron.compiler import Target, compile_fusion, fusions_of
from heron.harness import CheckOptions, check_file
from heron.hlo import parse_module

UNARY = """
HloModule {name}
ENTRY main {{
  p = {t}[1024] parameter(0)
  ROOT r = {t}[1024] {op}(p)
}}
"""

DIVIDE = """
HloModule divide
ENTRY main {{
  p = {t}[1024] parameter(0)
  q = {t}[1024] parameter(1)
  ROOT r = {t}[1024] divide(p, q)
}}
"""


def _ptx(text: str) -> str:
    (fusion,) = fusions_of(parse_module(text))
    kernel = compile_fusion(fusion, Target.preset("h100"), "cuda")
    return next(a.data.decode() for a in kernel.artefacts if a.extension == "ptx")


@pytest.mark.parametrize(
    "text",
    [
        DIVIDE.format(t="f32"),
        UNARY.format(name="tanh", t="f32", op="tanh"),
        UNARY.format(name="tanh", t="bf16", op="tanh"),
    ],
    ids=["divide", "tanh", "tanh_bf16"],
)
def test_f32_divisions_are_div_full(text: str) -> None:
    ptx = _ptx(text)
    assert "div.full.f32" in ptx
    assert "div.rn.f32" not in ptx


@pytest.mark.parametrize("element", ["f32", "bf16"])
def test_logistic_takes_one_approximate_reciprocal(element: str) -> None:
    """XLA's logistic is ``1 / (1 + exp(-x))`` with ``rcp.approx.f32`` (its ``1 / y``
    under ``-nvptx-prec-divf32=1``); heron's overflow-free form takes that reciprocal
    once and multiplies ``e`` by it for negative ``x`` (two div.full before: SASS 105 -> 93
    for four elements, XLA's 82)."""
    ptx = _ptx(UNARY.format(name="logistic", t=element, op="logistic"))
    assert ptx.count("rcp.approx.f32") == ptx.count("ex2.approx") > 0
    assert "div.full" not in ptx and "div.rn" not in ptx


def test_f64_division_stays_correctly_rounded() -> None:
    ptx = _ptx(DIVIDE.format(t="f64"))
    assert "div.rn.f64" in ptx and "div.full" not in ptx


@pytest.mark.parametrize("op", ["sqrt", "rsqrt"])
@pytest.mark.parametrize("element", ["f32", "bf16"])
def test_f32_square_roots_are_the_approximate_instructions(op: str, element: str) -> None:
    ptx = _ptx(UNARY.format(name=op, t=element, op=op))
    assert f"{op}.approx.f32" in ptx
    assert "sqrt.rn" not in ptx and "div.rn" not in ptx


def test_f64_square_roots_stay_correctly_rounded() -> None:
    assert "sqrt.rn.f64" in _ptx(UNARY.format(name="sqrt", t="f64", op="sqrt"))
    rsqrt = _ptx(UNARY.format(name="rsqrt", t="f64", op="rsqrt"))
    assert "sqrt.rn.f64" in rsqrt and "rcp.rn.f64" in rsqrt and "approx" not in rsqrt


def test_the_gelu_kernel_has_no_slow_path_in_sass() -> None:
    """Issue 29's GELU (tanh) bf16 kernel: 348 SASS instructions with four calls into
    the IEEE division's slow path before; none now (XLA's has none either)."""
    from heron.runtime.cuda import compiler_tools
    from heron.runtime.cuda.sass_statistics import ptx_sass_statistics

    try:
        ptxas, nvdisasm = compiler_tools.find_ptxas(), compiler_tools.find_nvdisasm()
    except compiler_tools.ToolNotFoundError as exc:
        pytest.skip(str(exc))
    gelu = Path(__file__).resolve().parents[1] / "examples" / "gelu.hlo"
    ptx = _ptx(gelu.read_text())
    (sass,) = ptx_sass_statistics(ptx, ptxas, nvdisasm).values()
    assert sass.calls == 0 and sass.subroutines == ()
    assert sass.instructions <= 137  # 348 with div.rn, 211 with heron's own tanh; XLA's: 136
    assert sass.mufu["RCP"] >= 4  # one reciprocal per element of the thread's four


#: XLA:GPU's SASS instructions for an elementwise math loop fusion over f32[4M] (four
#: elements a thread), ``benchmarks/sass_vs_xla.py`` with jax-cuda13-pjrt 0.10.2 for the
#: h100 (docs/benchmarks.md, "SASS of elementwise math against XLA:GPU"): heron's kernel
#: must stay within 1.2x of it (issue 29's acceptance) and have no slow path.
XLA_SASS = {
    "tanh": 105,
    "exp": 49,
    "logistic": 82,
    "erf": 114,
    "log1p": 122,
    "expm1": 128,
    "cbrt": 79,
    "sin": 470,
    "cos": 478,
    "atan2": 313,
    "power": 387,
}


def _sass(text: str):
    from heron.runtime.cuda import compiler_tools
    from heron.runtime.cuda.sass_statistics import ptx_sass_statistics

    try:
        ptxas, nvdisasm = compiler_tools.find_ptxas(), compiler_tools.find_nvdisasm()
    except compiler_tools.ToolNotFoundError as exc:
        pytest.skip(str(exc))
    (sass,) = ptx_sass_statistics(_ptx(text), ptxas, nvdisasm).values()
    return sass


LOOP = """
HloModule {name}
fused {{
  p = {t}[4194304] parameter(0)
  ROOT r = {t}[4194304] {op}(p)
}}
ENTRY main {{
  p = {t}[4194304] parameter(0)
  ROOT f = {t}[4194304] fusion(p), kind=kLoop, calls=fused
}}
"""
#: workload -> (element type, HLO opcode), as the benchmark names them.
_OPS = {
    "tanh": ("f32", "tanh"),
    "exp": ("f32", "exponential"),
    "logistic": ("f32", "logistic"),
    "erf": ("f32", "erf"),
    "log1p": ("f32", "log-plus-one"),
    "expm1": ("f32", "exponential-minus-one"),
    "cbrt": ("f32", "cbrt"),
    "sin": ("f32", "sine"),
    "cos": ("f32", "cosine"),
    "atan2": ("f32", "atan2"),
    "power": ("f32", "power"),
}
BINARY_LOOP = """
HloModule {name}
fused {{
  p = {t}[4194304] parameter(0)
  q = {t}[4194304] parameter(1)
  ROOT r = {t}[4194304] {op}(p, q)
}}
ENTRY main {{
  p = {t}[4194304] parameter(0)
  q = {t}[4194304] parameter(1)
  ROOT f = {t}[4194304] fusion(p, q), kind=kLoop, calls=fused
}}
"""
#: The binary ops among them.
_BINARY = {"atan2", "power"}
#: Whose IEEE-division slow path XLA's kernel has too (libdevice's atan2f divides so).
_XLA_SLOW_PATH = {"atan2"}


@pytest.mark.parametrize("name", sorted(XLA_SASS))
def test_math_kernels_are_within_1_2x_of_xla_s_sass(name: str) -> None:
    element, op = _OPS[name]
    template = BINARY_LOOP if name in _BINARY else LOOP
    sass = _sass(template.format(name=name, t=element, op=op))
    if name not in _XLA_SLOW_PATH:
        assert sass.calls == 0 and sass.subroutines == ()
    assert sass.instructions <= 1.2 * XLA_SASS[name], sass.instructions


@pytest.mark.parametrize("op", ["divide", "logistic", "tanh", "sqrt", "rsqrt"])
@pytest.mark.parametrize("element", ["f32", "bf16", "f64"])
def test_the_programs_agree_with_the_evaluator(tmp_path: Path, op: str, element: str) -> None:
    text = DIVIDE.format(t=element) if op == "divide" else UNARY.format(name=op, t=element, op=op)
    path = tmp_path / f"{op}_{element}.hlo"
    path.write_text(text)
    report = check_file(path, CheckOptions(target=Target.preset("h100")))
    assert report.ok, report


def test_the_tolerance_allows_an_f32_division_two_ulps_and_an_f64_one_none() -> None:
    from heron.emitters.math_accuracy import APPROXIMATE_DIVISION, DIVISION_ULPS, FAST_MATH
    from heron.harness.tolerance import ULP_BOUNDS, ulp_bound
    from heron.hlo.element_types import ElementType

    assert DIVISION_ULPS == (2, 0) and "tanh" in APPROXIMATE_DIVISION
    assert ULP_BOUNDS["sqrt"] == FAST_MATH["sqrt"] == (2, 0)
    assert ULP_BOUNDS["rsqrt"] == (3, 1)
    for element, ulps in ((ElementType.F32, 2), (ElementType.F64, 0), (ElementType.BF16, 1)):
        module = parse_module(DIVIDE.format(t=element.value))
        root = module.entry.root_instruction
        assert ulp_bound(root, element) == ulps


@pytest.mark.parametrize("op", ["divide", "sqrt", "tanh"])
def test_rocm_keeps_every_operation_correctly_rounded(op: str) -> None:
    """XLA:GPU on ROCm links OCML with correctly rounded square roots and no unsafe
    math: heron's marks are removed there, so nothing is left for AMDGPU to approximate."""
    text = DIVIDE.format(t="f32") if op == "divide" else UNARY.format(name=op, t="f32", op=op)
    (fusion,) = fusions_of(parse_module(text))
    for target, marked in (("h100", True), ("mi300x", False)):
        kernel = compile_fusion(fusion, Target.preset(target), stop_after="expand-math")
        lines = str(kernel.module).splitlines()
        fast = [
            line
            for line in lines
            if "fastmath<arcp>" in line
            or ("afn" in line and ("llvm.sqrt" in line or "arith.divf" in line))
        ]
        assert bool(fast) is marked, target


def test_the_exponential_is_one_flushing_ex2_and_a_clamp_of_two_instructions() -> None:
    """XLA's (libdevice's) f32 exp takes 2^t from ex2.approx.ftz.f32: one MUFU.EX2; the
    non-flushing form adds a compare and two multiplies, the clamp of k as a compare and
    select chain two more (issue 29: exp was 79 SASS instructions to XLA's 49, then 59; 52
    with k and 2^k from one fma with a shifter)."""
    ptx = _ptx(UNARY.format(name="exp", t="f32", op="exponential"))
    assert "ex2.approx.ftz.f32" in ptx and "ex2.approx.f32" not in ptx
    assert "max.f32" in ptx and "min.f32" in ptx
