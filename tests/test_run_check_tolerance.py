"""``heron run --check`` and ``heron check`` decide agreement with one tolerance.

Both ask :func:`heron.harness.tolerance.output_tolerance`; these tests hold
them to it on corpus reductions that ``run --check``'s former 4-ulp tolerance
rejected, on the fuzzer's bf16 sums (generated-s1-454, -1669: valid sums in
another order that the former 3e-2 bound for 16-bit types rejected), and
check that the reassociation bound still catches a wrong sum (a dropped
element, a plainly wrong value) for f32 and bf16.
"""

from __future__ import annotations

from pathlib import Path

import ml_dtypes
import numpy as np
import pytest
from heron_test_support.hlo_modules import GEMM_FUSION, JAX_ARGMAX_REDUCER, SCATTER_KINDS

import heron.cli.run as run_command
from heron.cli.main import main
from heron.harness import CheckOptions, check_file
from heron.harness.tolerance import (
    ErrorBounds,
    OutputTolerance,
    output_tolerance,
    summation_bound,
)
from heron.hlo.evaluator import evaluate_computation
from heron.hlo.parser import parse_module

BF16 = ml_dtypes.bfloat16

#: generated-s1-454: a bf16 sum of a transposed bf16[4,128] to a scalar.
CASE_454 = """\
HloModule generated

add_bf16 {
  a = bf16[] parameter(0)
  b = bf16[] parameter(1)
  ROOT sum = bf16[] add(a, b)
}

fused_computation {
  p0 = bf16[4,128]{1,0} parameter(0)
  transpose.1 = bf16[128,4]{1,0} transpose(p0), dimensions={1,0}
  zero.2 = bf16[]{} constant(0)
  ROOT reduce.3 = bf16[]{} reduce(transpose.1, zero.2), dimensions={0,1}, to_apply=add_bf16
}

ENTRY main {
  p0 = bf16[4,128]{1,0} parameter(0)
  ROOT fusion = bf16[]{} fusion(p0), kind=kInput, calls=fused_computation
}
"""

#: generated-s1-1669: u32 -> bf16, a column sum of 129, converted to f16 then f64.
CASE_1669 = """\
HloModule generated

add_bf16 {
  a = bf16[] parameter(0)
  b = bf16[] parameter(1)
  ROOT sum = bf16[] add(a, b)
}

fused_computation {
  p0 = u32[129,64,2]{2,1,0} parameter(0)
  convert.1 = bf16[129,64,2]{2,1,0} convert(p0)
  zero.2 = bf16[]{} constant(0)
  reduce.3 = bf16[64,2]{1,0} reduce(convert.1, zero.2), dimensions={0}, to_apply=add_bf16
  convert.4 = f16[64,2]{1,0} convert(reduce.3)
  ROOT convert.5 = f64[64,2]{1,0} convert(convert.4)
}

ENTRY main {
  p0 = u32[129,64,2]{2,1,0} parameter(0)
  ROOT fusion = f64[64,2]{1,0} fusion(p0), kind=kInput, calls=fused_computation
}
"""


def _sum_module(element: str, n: int) -> str:
    return f"""\
HloModule sum

add {{
  a = {element}[] parameter(0)
  b = {element}[] parameter(1)
  ROOT sum = {element}[] add(a, b)
}}

fused_computation {{
  p0 = {element}[{n}]{{0}} parameter(0)
  zero = {element}[] constant(0)
  ROOT reduce = {element}[] reduce(p0, zero), dimensions={{0}}, to_apply=add
}}

ENTRY main {{
  p0 = {element}[{n}]{{0}} parameter(0)
  ROOT fusion = {element}[] fusion(p0), kind=kInput, calls=fused_computation
}}
"""


def heron(capsys, *argv: str) -> tuple[int, str, str]:
    code = main(list(argv))
    out, err = capsys.readouterr()
    return code, out, err


def _write(tmp_path: Path, name: str, text: str) -> str:
    path = tmp_path / name
    path.write_text(text)
    return str(path)


# -- the two commands agree ---------------------------------------------------------------


@pytest.mark.parametrize(
    "relative",
    [
        "gpu/reduce_column/vectorize_x2_f32.hlo",
        "gpu/reduce_column_small/f32_8_v2.hlo",
        "gpu/reduce_row/variadic_f32.hlo",
        "gpu/reduce_multirow/f16_v4.hlo",
    ],
)
def test_run_check_agrees_on_valid_corpus_reductions(corpus_dir: Path, capsys, relative):
    path = str(corpus_dir / relative)
    assert check_file(path).ok
    code, out, err = heron(
        capsys, "run", path, "--backend", "interpreter", "--seed", "0", "--check"
    )
    assert (code, err) == (0, ""), out
    assert "(allowed: reassociation bounds)" in out
    assert "agree: every output within the tolerance" in out


@pytest.mark.parametrize("text", [CASE_454, CASE_1669], ids=["s1-454", "s1-1669"])
def test_the_fuzzers_bf16_sums_agree_in_both_commands(tmp_path, capsys, text):
    path = _write(tmp_path, "case.hlo", text)
    report = check_file(path, CheckOptions(seed=0))
    assert report.ok, report.text()
    for seed in ("0", "1", "2"):
        code, out, _ = heron(
            capsys, "run", path, "--backend", "interpreter", "--seed", seed, "--check"
        )
        assert code == 0, out


def test_run_check_decides_as_check_does_for_a_single_fusion():
    module = parse_module(CASE_1669)
    argument = np.random.default_rng(0).integers(0, 8, (129, 64, 2)).astype(np.uint32)
    (tolerance,) = run_command.output_tolerances(
        module, {"fusion": True}, [argument], None, tf32=True
    )
    computation = module.entry.root_instruction.called("calls")
    source = computation.root_instruction
    direct = output_tolerance(
        source,
        source.shape.element_type,
        ErrorBounds(),
        reordering=True,
        reduction=(source, computation, [argument]),
        tf32=True,
    )
    assert (tolerance.ulps, tolerance.reordered) == (direct.ulps, direct.reordered) == (0, True)
    assert np.array_equal(tolerance.bounds.per_element, direct.bounds.per_element)
    # A loop kernel (each element written once) is compared bitwise, by both.
    (loop,) = run_command.output_tolerances(module, {"fusion": False}, [argument], None, tf32=True)
    assert loop == OutputTolerance() and not loop.reordered


def test_run_check_uses_the_run_lines_bounds(tmp_path):
    text = "// RUN: gpu_test_correctness %s --abs_error_bound=0.5\n" + _sum_module("f32", 8)
    bounds = run_command._run_line_bounds(_write(tmp_path, "bounded.hlo", text))
    assert bounds == ErrorBounds(absolute=0.5)
    assert run_command._run_line_bounds(_write(tmp_path, "plain.hlo", _sum_module("f32", 8))) == (
        ErrorBounds()
    )


def test_run_check_reports_a_wrong_output_and_exits_1(corpus_dir, capsys, monkeypatch):
    original = run_command._run_on_device

    def off_by_one(*args, **kwargs):
        leaves, ran = original(*args, **kwargs)
        wrong = leaves[0].copy()
        wrong[3] += 1.0  # far beyond the reordering of a sum of moderate values
        return [wrong, *leaves[1:]], ran

    monkeypatch.setattr(run_command, "_run_on_device", off_by_one)
    path = str(corpus_dir / "gpu/reduce_column/vectorize_x2_f32.hlo")
    code, out, _ = heron(capsys, "run", path, "--backend", "interpreter", "--seed", "0", "--check")
    assert code == 1, out
    check = out.split("check against the reference evaluator")[1]
    line = next(x for x in check.splitlines() if x.startswith("  out0"))
    allowed = (
        "(allowed: reassociation bounds, within the spread of 8 random roundings of the"
        " reference, which sum in other orders); 1 of 64 outside the tolerance, first at (3,):"
    )
    assert allowed in line
    assert "where the reference has" in line and "ulps)" in line
    assert "DISAGREE" in out


# -- the reassociation bound ----------------------------------------------------------------


def _pairwise(values: np.ndarray, dtype) -> float:
    """A tree sum, every partial sum rounded to ``dtype`` (another valid order)."""
    level = [dtype(v) for v in values]
    while len(level) > 1:
        pairs = [dtype(float(a) + float(b)) for a, b in zip(level[::2], level[1::2], strict=False)]
        level = pairs + ([level[-1]] if len(level) % 2 else [])
    return float(level[0])


def _tolerance_and_reference(element: str, x: np.ndarray) -> tuple[OutputTolerance, np.ndarray]:
    module = parse_module(_sum_module(element, x.size))
    computation = module.entry.root_instruction.called("calls")
    source = computation.root_instruction
    tolerance = output_tolerance(
        source,
        source.shape.element_type,
        ErrorBounds(),
        reordering=True,
        reduction=(source, computation, [x]),
        tf32=True,
    )
    return tolerance, np.asarray(evaluate_computation(computation, [x]))


@pytest.mark.parametrize(
    ("element", "dtype", "n"),
    [("f32", np.float32, 512), ("bf16", BF16, 8), ("f16", np.float16, 16)],
)
def test_the_bound_accepts_another_order_and_catches_a_wrong_sum(element, dtype, n):
    rng = np.random.default_rng(7)
    x = rng.uniform(0.5, 1.0, n).astype(dtype)  # one-signed: a dropped element shows
    tolerance, reference = _tolerance_and_reference(element, x)
    assert tolerance.reordered

    def accepted(value: float) -> bool:
        return tolerance.mismatches(np.asarray(value, dtype), reference).count == 0

    assert accepted(_pairwise(x, dtype))
    assert accepted(float(reference))
    largest = int(np.argmax(x.astype(np.float64)))
    dropped = _pairwise(np.delete(x, largest), dtype)
    assert not accepted(dropped)
    assert not accepted(2 * float(reference))
    assert not accepted(-float(reference))


def test_the_bound_scales_with_the_elements_and_their_magnitudes():
    x = np.full(8, 0.75, BF16)
    module = parse_module(_sum_module("bf16", 8))
    computation = module.entry.root_instruction.called("calls")
    source = computation.root_instruction
    bound = summation_bound(source, computation, [x])
    assert bound.shape == (1,) and bound[0] == pytest.approx((7 + 3) * 2.0**-8 * 6.0)
    doubled = summation_bound(source, computation, [x * BF16(2)])
    assert doubled[0] == pytest.approx(2 * bound[0])


def test_a_max_reduction_gets_no_summation_bound():
    text = _sum_module("f32", 8).replace(
        "ROOT sum = f32[] add(a, b)", "ROOT sum = f32[] maximum(a, b)"
    )
    module = parse_module(text)
    computation = module.entry.root_instruction.called("calls")
    source = computation.root_instruction
    assert summation_bound(source, computation, [np.ones(8, np.float32)]) is None


def test_the_summation_bound_follows_negates_and_each_convert(tmp_path: Path) -> None:
    """Fuzz sample finding generated-s20261124-199: an f16 sum of 128, negated, converted
    to f64 and negated again, 3 f16 ulps from the reference: two valid summation orders,
    refused because the bound stopped at the negate."""
    hlo = tmp_path / "negated_sum.hlo"
    hlo.write_text(NEGATED_F16_SUM)
    for argv in (["check", str(hlo)], ["run", str(hlo), "--backend", "interpreter", "--check"]):
        for seed in ("0", "1", "2"):
            code = main([*argv, "--seed", seed])
            assert code == 0, (argv, seed)


NEGATED_F16_SUM = """HloModule negated_sum

add_f16 {
  a = f16[] parameter(0)
  b = f16[] parameter(1)
  ROOT sum = f16[] add(a, b)
}

fused_computation {
  p0 = f16[32,4]{1,0} parameter(0)
  zero = f16[] constant(0)
  reduce = f16[] reduce(p0, zero), dimensions={0,1}, to_apply=add_f16
  negate = f16[] negate(reduce)
  convert = f64[] convert(negate)
  ROOT negate.1 = f64[] negate(convert)
}

ENTRY main {
  p0 = f16[32,4]{1,0} parameter(0)
  ROOT fusion = f64[] fusion(p0), kind=kInput, calls=fused_computation
}
"""


def test_an_approximation_counts_once_per_path_to_the_output() -> None:
    """Fuzz finding generated-s1-1099: exp(x) * exp(x) was 3 ulps from the reference
    under a 2-ulp bound: exp's error reaches the product through both operands."""
    from heron.harness.tolerance import approximations_reaching, ulp_bound

    module = parse_module(
        """HloModule paths
ENTRY e {
  p = f32[4] parameter(0)
  e = f32[4] exponential(p)
  t = f32[4] tanh(e)
  square = f32[4] multiply(e, e)
  ROOT sum = f32[4] add(square, t)
}"""
    )
    root = module.entry.root_instruction
    square = root.operands[0]
    assert approximations_reaching(square) == {"exponential": 2}
    assert ulp_bound(square, square.shape.element_type) == 2 * 3  # f32 exp: 3 ulps
    assert approximations_reaching(root) == {"exponential": 3, "tanh": 1}
    assert ulp_bound(root, root.shape.element_type) == 3 * 3 + 7  # f32 tanh: 7 ulps


GEMM_PROGRAMS = ("batched_matmul", "mlp_relu", "conv1d", "scan_rnn")


def _gemm_kernel_and_tolerance():
    from heron.compiler import Target, compile_fusion, fusions_of

    (fusion,) = fusions_of(parse_module(GEMM_FUSION))
    kernel = compile_fusion(fusion, Target.preset("h100"), "interpreter", stop_after="emitted")
    root = fusion.called("calls").root_instruction
    tolerance = output_tolerance(
        root, root.shape.element_type, reordering=kernel.sums_in_its_own_order, tf32=False
    )
    return kernel, tolerance


def test_a_gemm_kernel_and_its_output_agree_that_it_sums_in_its_own_order():
    """The GEMM kernel writes each element once, yet sums the dot's products in its tiles'
    order: the kernel says so, and its output gets the reassociation bounds."""
    kernel, tolerance = _gemm_kernel_and_tolerance()
    assert kernel.emitter == "gemm" and kernel.writes_each_element_once
    assert kernel.sums_in_its_own_order and tolerance.reordered


def test_the_kernel_and_the_tolerance_ask_one_rule(monkeypatch):
    """Both answers are heron.compiler.summation_order's: with no order-free opcode
    neither the GEMM kernel nor its output's tolerance counts the dot as reordered
    (a second rule in either would keep its yes)."""
    import heron.compiler.summation_order as summation_order

    monkeypatch.setattr(summation_order, "ORDER_FREE_OPCODES", frozenset())
    kernel, tolerance = _gemm_kernel_and_tolerance()
    assert not kernel.sums_in_its_own_order and not tolerance.reordered


def test_an_output_a_dot_reaches_gets_the_reassociation_bounds_whatever_its_emitter():
    module = parse_module(
        """
HloModule dots

ENTRY main {
  a = f32[4,8] parameter(0)
  b = f32[8,2] parameter(1)
  d = f32[4,2] dot(a, b), lhs_contracting_dims={1}, rhs_contracting_dims={0}
  ROOT n = f32[4,2] negate(d)
}
"""
    )
    root = module.entry.root_instruction
    element = root.shape.element_type
    # Not a reduction emitter (reordering=False): the dot alone orders the sums; on a
    # device without TF32 that is all, on one with TF32 (an f32 dot at default
    # precision: XLA:GPU's choice) the operands' rounding is allowed too: 8 u sqrt(k).
    exact = output_tolerance(root, element, reordering=False, tf32=False)
    assert exact.reordered and exact.bounds.relative == pytest.approx(1e-4)
    tolerance = output_tolerance(root, element, reordering=False, tf32=True)
    assert tolerance.reordered
    assert (
        tolerance.bounds.relative == tolerance.bounds.absolute == pytest.approx(8 * 2**-11 * 8**0.5)
    )
    # Without the dot the same negate is compared bitwise.
    plain = output_tolerance(root.operands[0].operands[0], element, reordering=False, tf32=True)
    assert not plain.reordered and plain.ulps == 0


def test_a_float_scatter_that_adds_in_arrival_order_gets_the_reassociation_bounds():
    """Updates that meet at an element are added in the order they arrive (atomics; a
    strided loop): fuzz finding mutation-s20261203-222. Only where the kernel says it
    may sum in its own order, only for float sums and products: integer sums are exact
    in any order, an overwrite is no rounding, unique indices never meet, and a
    variadic scatter is serial."""
    entry = parse_module(SCATTER_KINDS).entry
    by_name = {inst.name: inst for inst in entry.instructions}

    def tolerance(name: str, reordering: bool = True) -> OutputTolerance:
        source = by_name[name]
        element = next(iter(source.shape.leaves())).element_type
        return output_tolerance(source, element, reordering=reordering, tf32=False)

    reordered = tolerance("sum")
    assert reordered.reordered and reordered.bounds.relative == pytest.approx(1e-4)
    assert not tolerance("sum", reordering=False).reordered  # a serial kernel: in order
    for name in ("int_sum", "last", "unique", "pair"):
        plain = tolerance(name)
        assert not plain.reordered and plain.ulps == 0, name


#: The relative bound of GEMM_FUSION's f32 dot (k = 16) with and without TF32.
TF32_BOUND = 8 * 2**-11 * 16**0.5
F32_BOUND = 1e-4


def test_output_tolerance_has_no_default_for_tf32():
    """Whether f32 dots multiply in TF32 is the Target's fact: every caller passes it."""
    import inspect

    from heron.harness.agreement import output_tolerances
    from heron.harness.tolerance import narrowed_product_tolerance

    for function in (output_tolerance, output_tolerances, narrowed_product_tolerance):
        assert inspect.signature(function).parameters["tf32"].default is inspect.Parameter.empty


def _targets():
    from heron.target import Target

    with_tf32, without = Target.preset("h100"), Target.resolve("h100", "sm_75")
    assert with_tf32.tf32 and not without.tf32
    return with_tf32, without


def test_check_takes_tf32_from_the_target(tmp_path, monkeypatch):
    """heron check of one f32 dot fusion: TF32's looser bound for a Target with TF32,
    the tighter f32 one for a Target without (an sm_75 H100: no TF32 tensor cores)."""
    import heron.harness.check as check_module

    seen: list[OutputTolerance] = []

    def recording(*args, **kwargs):
        seen.append(output_tolerance(*args, **kwargs))
        return seen[-1]

    monkeypatch.setattr(check_module, "output_tolerance", recording)
    path = _write(tmp_path, "gemm.hlo", GEMM_FUSION)
    relative = {}
    for target in _targets():
        seen.clear()
        report = check_file(path, CheckOptions(target=target))
        assert report.ok, report.text()
        assert seen and all(t.reordered for t in seen)
        relative[target.tf32] = sorted({t.bounds.relative for t in seen})
    assert relative[True] == pytest.approx([TF32_BOUND])
    assert relative[False] == pytest.approx([F32_BOUND])


def test_run_check_takes_tf32_from_the_target(tmp_path, capsys, monkeypatch):
    """heron run --check of the same module, for each Target: the tolerances it applies."""
    seen: list[list[OutputTolerance]] = []
    original = run_command.output_tolerances

    def recording(*args, **kwargs):
        seen.append(original(*args, **kwargs))
        return seen[-1]

    monkeypatch.setattr(run_command, "output_tolerances", recording)
    path = _write(tmp_path, "gemm.hlo", GEMM_FUSION)
    relative = {}
    for target in _targets():
        seen.clear()
        arch = ["--arch", target.arch] if not target.tf32 else []
        code, out, _ = heron(
            capsys, "run", path, "--backend", "interpreter", "--target", "h100", *arch, "--check"
        )
        assert code == 0, out
        ((tolerance,),) = seen
        assert tolerance.reordered
        relative[target.tf32] = tolerance.bounds.relative
    assert relative == {True: pytest.approx(TF32_BOUND), False: pytest.approx(F32_BOUND)}


@pytest.mark.parametrize(
    ("attribute", "relative"),
    [
        ("operand_precision={highest,highest}", 1e-4),
        ("operand_precision={default,highest}", 1e-4),
        ("operand_precision={high,high}", 8 * 2**-11 * 8**0.5),
        ("algorithm=dot_tf32_tf32_f32", 8 * 2**-11 * 8**0.5),
        ("algorithm=dot_bf16_bf16_f32", 8 * 2**-8 * 8**0.5),
        ("algorithm=dot_bf16_bf16_f32_x6", 1e-4),
    ],
)
def test_a_dots_precision_decides_what_its_operands_rounding_may_cost(attribute, relative):
    # heron.hlo.dot_precision's table, as XLA:GPU's GetBlasComputationType has it
    module = parse_module(
        f"""
HloModule dots
ENTRY main {{
  a = f32[4,8] parameter(0)
  b = f32[8,2] parameter(1)
  ROOT d = f32[4,2] dot(a, b), lhs_contracting_dims={{1}}, rhs_contracting_dims={{0}}, {attribute}
}}
"""
    )
    root = module.entry.root_instruction
    tolerance = output_tolerance(root, root.shape.element_type, reordering=False, tf32=True)
    assert tolerance.bounds.relative == pytest.approx(relative)


@pytest.mark.parametrize("name", GEMM_PROGRAMS)
def test_run_check_agrees_on_the_gemm_programs(name, capsys):
    # The GEMM emitter sums k in its tiles' order: --check compared these bitwise
    # before and failed them (scan_rnn: a dot inside a while loop).
    path = Path(__file__).resolve().parent.parent / "programs" / name / "module.hlo"
    assert main(["--quiet", "run", str(path), "--check"]) == 0
    assert "agree: every output within the tolerance" in capsys.readouterr().out


# -- complex sums (issue 26) ----------------------------------------------------------------


#: A c64 column sum as the column-reduction emitter computes it (each thread sums a strided
#: part of a column, then the warps' partial sums are combined): not the reference's order.
def _complex_column_sum(rows: int, columns: int) -> str:
    return f"""\
add_c64 {{
  a = c64[] parameter(0)
  b = c64[] parameter(1)
  ROOT s = c64[] add(a, b)
}}

column_sum {{
  p0 = c64[{rows},{columns}] parameter(0)
  zero = c64[] constant((0, 0))
  ROOT sum = c64[{columns}] reduce(p0, zero), dimensions={{0}}, to_apply=add_c64
}}
"""


COMPLEX_COLUMN_SUM = _complex_column_sum(96, 48)


def test_a_complex_column_sum_agrees_within_the_bounds_of_its_two_float_sums(tmp_path):
    """A c64 column reduction was compared bitwise: its parts are summed in the
    kernel's order, and on edge inputs that order decides where a part
    overflows to inf+nanj or nan+nanj (vectorize_x1_c64 of XLA's corpus)."""
    report = check_file(_write(tmp_path, "complex_column_sum.hlo", COMPLEX_COLUMN_SUM))
    assert report.ok, report.text()
    assert "compared on moderate inputs only" in report.text()


def _complex_sum_tolerance(x: np.ndarray) -> tuple[OutputTolerance, np.ndarray]:
    module = parse_module(_complex_column_sum(*x.shape))
    computation = module.entry.root_instruction.called("calls")
    source = computation.root_instruction
    tolerance = output_tolerance(
        source,
        source.shape.element_type,
        ErrorBounds(),
        reordering=True,
        reduction=(source, computation, [x]),
        tf32=True,
    )
    return tolerance, np.asarray(evaluate_computation(computation, [x]))


def test_a_complex_sum_is_bounded_part_by_part():
    rng = np.random.default_rng(3)
    n = 256
    x = np.empty((n, 2), np.complex64)
    x.real = rng.uniform(0.5, 1.0, (n, 2))  # one-signed parts: a dropped element shows
    x.imag = rng.uniform(0.5, 1.0, (n, 2)) * np.float32(1e-3)  # much smaller than the real
    tolerance, reference = _complex_sum_tolerance(x)
    assert tolerance.reordered
    bound = tolerance.bounds.per_element
    assert np.iscomplexobj(bound) and np.all(bound.imag < bound.real)

    def accepted(value: np.ndarray) -> bool:
        return tolerance.mismatches(value.astype(np.complex64), reference).count == 0

    other_order = np.array(
        [
            complex(_pairwise(x[::-1, k].real, np.float32), _pairwise(x[::-1, k].imag, np.float32))
            for k in range(2)
        ]
    )
    assert accepted(other_order)
    # Each part is judged by its own bounds: an imaginary part 1e-3 off is refused,
    # though 1e-3 is within 1e-4 of the complex magnitude (and the real part's bound).
    off = reference.copy()
    off.imag += np.float32(1e-3)
    assert 1e-3 < min(1e-4 * np.abs(reference).min(), bound.real.min())
    assert not accepted(off)
    dropped = reference.copy()
    dropped.imag -= x[int(np.argmax(x[:, 0].imag)), 0].imag
    assert not accepted(dropped)
    assert not accepted(np.conj(reference))


def test_kernel_and_reference_add_complex_numbers_part_by_part():
    """Where the c64 sum's kernel and reference differ on edge inputs (``inf+nanj``
    against ``nan+nanj``), neither is wrong: each computes exactly the two f32 sums of
    the parts, in its own order (the reference's pairwise tree overflows a part to
    -inf before adding +inf where the kernel does not), as complex addition is
    componentwise. So the edge inputs are compared for coverage only, as for f32."""
    from heron.compiler import Target, compile_fusion, fusions_of
    from heron.compiler.device_kernels import run_on_device
    from heron.harness.inputs import edge_array
    from heron.runtime.interpreter import InterpreterDevice

    def kernel_and_reference(text: str, x: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        (fusion,) = fusions_of(parse_module(text))
        kernel = compile_fusion(fusion, Target.preset("h100"), "interpreter")
        (out,) = run_on_device(InterpreterDevice(), kernel, [x]).outputs
        return out, np.asarray(evaluate_computation(fusion.called("calls"), [x]))

    def bits(values: np.ndarray) -> np.ndarray:
        return np.ascontiguousarray(values, np.float32).view(np.uint32)

    complex_text = _complex_column_sum(96, 48)
    float_text = complex_text.replace("c64", "f32").replace("constant((0, 0))", "constant(0)")
    shape = parse_module(complex_text).entry.parameters[0].array_shape
    x = edge_array(shape, np.random.default_rng(0))
    kernel, reference = kernel_and_reference(complex_text, x)
    assert not np.array_equal(bits(kernel.real), bits(reference.real))  # orders differ
    for part in ("real", "imag"):
        values = np.ascontiguousarray(getattr(x, part))
        float_kernel, float_reference = kernel_and_reference(float_text, values)
        assert np.array_equal(bits(getattr(kernel, part)), bits(float_kernel))
        assert np.array_equal(bits(getattr(reference, part)), bits(float_reference))


# -- cumulative sums the compiler regroups ---------------------------------------------------

#: jnp.cumsum of bf16[200] as jax writes it: the reduce-window inside a call.
BF16_CUMSUM = """\
HloModule jit_cumsum

add {
  a = bf16[] parameter(0)
  b = bf16[] parameter(1)
  ROOT sum = bf16[] add(a, b)
}

cumsum {
  x = bf16[200]{0} parameter(0)
  zero = bf16[] constant(0)
  ROOT scan = bf16[200]{0} reduce-window(x, zero), window={size=200 pad=199_0}, to_apply=add
}

ENTRY main {
  a = bf16[200]{0} parameter(0)
  ROOT call = bf16[200]{0} call(a), to_apply=cumsum
}
"""


def test_a_bf16_cumsum_in_blocks_agrees_within_its_prefixes_summation_bound(tmp_path, capsys):
    """The blocks' order is not the reference's sequential one: with partial sums near
    1 and sum|x| near 20, 19 of 200 elements differed by up to 8 ulps, more than the
    fixed 3e-2 allows; heron's values were XLA:CPU's bit for bit (a library sweep)."""
    from heron.hlo.npz_io import save_inputs

    path = _write(tmp_path, "cumsum.hlo", BF16_CUMSUM)
    inputs = str(tmp_path / "inputs.npz")
    save_inputs(inputs, [np.random.RandomState(1).randn(200).astype(BF16)])
    code, out, err = heron(
        capsys, "run", path, "--inputs", inputs, "--backend", "interpreter", "--check"
    )
    assert (code, err) == (0, ""), out
    assert "agree: every output within the tolerance" in out


def test_a_cumsum_s_bound_grows_with_its_prefix_and_is_none_for_other_outputs():
    from heron.harness.agreement import written_scan_bounds

    x = np.ones(200, BF16)
    (bound,) = written_scan_bounds(parse_module(BF16_CUMSUM), [x])
    k = np.arange(200)
    # 2 (n - 1) u sum|x| over the prefix and the initial value: n = k + 2 terms
    np.testing.assert_allclose(bound, 2 * (k + 1) * 2.0**-8 * (k + 1))
    reversed_scan = BF16_CUMSUM.replace("pad=199_0", "pad=0_199")
    (bound,) = written_scan_bounds(parse_module(reversed_scan), [x])
    np.testing.assert_allclose(bound, (2 * (k + 1) * 2.0**-8 * (k + 1))[::-1])
    windowed = BF16_CUMSUM.replace("size=200 pad=199_0", "size=3 pad=2_0")
    assert written_scan_bounds(parse_module(windowed), [x]) == [None]


def test_an_f32_cumsum_that_sums_an_element_twice_is_still_refused():
    from heron.harness.agreement import compare, written_scan_bounds

    text = BF16_CUMSUM.replace("bf16", "f32")
    x = np.random.RandomState(2).randn(200).astype(np.float32)
    (expected,) = [np.asarray(evaluate_computation(parse_module(text).entry, [x]))]
    (bound,) = written_scan_bounds(parse_module(text), [x])
    tolerance = OutputTolerance(
        bounds=ErrorBounds(absolute=1e-4, relative=1e-4, per_element=bound), reordered=True
    )
    reordered = np.cumsum(x[::-1].astype(np.float64))[::-1]  # a valid other order
    valid = (reordered[0] - reordered + x).astype(np.float32)
    assert compare(valid, expected, tolerance).agrees
    wrong = expected.copy()
    wrong[100:] += x[100]  # x[100] summed twice
    assert not compare(wrong, expected, tolerance).agrees


# -- complex products ----------------------------------------------------------------------

COMPLEX_PRODUCTS = """\
HloModule complex_products

times {
  a = c64[] parameter(0)
  b = c64[] parameter(1)
  ROOT p = c64[] multiply(a, b)
}

ENTRY main {
  a = c64[512] parameter(0)
  b = c64[512] parameter(1)
  product = c64[512] multiply(a, b)
  rows = c64[128,4] reshape(b)
  one = c64[] constant((1, 0))
  row_products = c64[128] reduce(rows, one), dimensions={1}, to_apply=times
  real_part = f32[128] real(row_products)
  ROOT out = (c64[512], f32[128]) tuple(product, real_part)
}
"""


def test_complex_products_agree_though_kernels_round_them_in_f32(tmp_path, capsys):
    """A kernel computes (ac - bd) + (ad + bc)i in f32, the evaluator rounds the complex128
    product once: a plain c64 multiply of random values 'differed' in 2,407 of 4,096
    elements (a part that cancels is hundreds of its own ulps off), and jnp.prod of
    complex64 rows was compared bitwise (a library sweep)."""
    path = _write(tmp_path, "products.hlo", COMPLEX_PRODUCTS)
    code, out, err = heron(capsys, "run", path, "--backend", "interpreter", "--check")
    assert (code, err) == (0, ""), out
    assert "4 ulps of the element or of the output's largest magnitude" in out


def test_a_complex_product_s_bound_counts_each_multiply_a_reduce_applies():
    from heron.harness.tolerance import ulp_bound

    entry = parse_module(COMPLEX_PRODUCTS).entry
    product, real_part = entry.root_instruction.operands
    assert ulp_bound(product, product.shape.element_type) == 4
    assert ulp_bound(real_part, real_part.shape.element_type) == 4 * 3  # rows of 4
    real_product = parse_module(
        _sum_module("f32", 8).replace("add(", "multiply(")
    ).entry.root_instruction
    assert ulp_bound(real_product, real_product.shape.element_type) == 0  # exact in f32


def test_a_wrong_complex_product_is_still_refused():
    from heron.harness.agreement import compare

    rng = np.random.default_rng(5)
    a = (rng.standard_normal(64) + 1j * rng.standard_normal(64)).astype(np.complex64)
    b = (rng.standard_normal(64) + 1j * rng.standard_normal(64)).astype(np.complex64)
    expected = (a.astype(np.complex128) * b).astype(np.complex64)
    tolerance = OutputTolerance(ulps=4)
    f32 = (a.real * b.real - a.imag * b.imag) + 1j * (a.real * b.imag + a.imag * b.real)
    assert compare(f32.astype(np.complex64), expected, tolerance).agrees
    conjugated = (a * np.conj(b)).astype(np.complex64)  # a plainly wrong product
    assert not compare(conjugated, expected, tolerance).agrees


def test_the_tolerance_is_labelled_and_counted_in_words():
    # issue 31: `--check` printed "(1 ulps)" with nothing saying it was the tolerance
    from heron.harness.tolerance import OutputTolerance

    largest = "of the element or of the output's largest magnitude"
    assert OutputTolerance(1).describe() == f"1 ulp {largest}"
    reordered = OutputTolerance(2, reordered=True)
    assert reordered.describe() == f"2 ulps {largest}, reassociation bounds"
    assert OutputTolerance().describe() == "bitwise"


def test_the_check_reads_expand_math_s_accuracy_table_the_docstring_states():
    # issue 32: the ulp table was copied by hand into the harness; now there is one
    # (heron.emitters.math_accuracy), the harness reads it and expand_math's docstring
    # says what it holds.
    import re

    from heron.emitters.math_accuracy import ACCURACY
    from heron.emitters.pipeline import expand_math
    from heron.harness.tolerance import ULP_BOUNDS

    lines = expand_math.__doc__.splitlines()
    rules = [k for k, line in enumerate(lines) if line.startswith("==============  =")]
    rows: dict[str, tuple[int, int]] = {}
    continued: tuple[int, int] | None = None  # a name cell ending in "," goes on below
    for line in lines[rules[1] + 1 : rules[2]]:  # the rows, between the header and the end
        cells = re.split(r"\s{2,}", line.strip())
        if not line.startswith(" ") and cells[0]:
            names = [n.strip() for n in cells[0].split(",") if n.strip()]
            numbers = [re.match(r"(\d+)", c) for c in cells[1:3]]
            if len(cells) >= 3 and all(numbers):
                bounds = tuple(int(m.group(1)) for m in numbers)
            elif continued is not None:
                bounds = continued
            else:
                continue
            rows.update(dict.fromkeys(names, bounds))
            continued = bounds if cells[0].endswith(",") else None
    documented = {name: rows[name] for name in ACCURACY if name in rows}
    assert documented == {n: b for n, b in ACCURACY.items() if n in rows}
    assert set(ACCURACY) <= set(rows)  # powf too, now that f64 powf has a plain bound
    assert ULP_BOUNDS["exponential"] == ACCURACY["exp"] and ULP_BOUNDS["logistic"] == (6, 3)
    assert ULP_BOUNDS["power"] == ACCURACY["powf"] == (4, 2)


#: jnp.argmax(x, axis=1) as jax writes it: the reducer keeps its first operand when that
#: is a NaN (``x > y or x != x``), so over two NaNs the combination order decides.
ARGMAX_ROWS = f"""\
HloModule argmax_rows, entry_computation_layout={{(f32[4,1000]{{1,0}})->s32[4]{{0}}}}

{JAX_ARGMAX_REDUCER}
ENTRY main {{
  x = f32[4,1000]{{1,0}} parameter(0)
  iota = s32[4,1000]{{1,0}} iota(), iota_dimension=1
  lowest = f32[] constant(-inf)
  zero = s32[] constant(0)
  r = (f32[4], s32[4]) reduce(x, iota, lowest, zero), dimensions={{1}}, to_apply=argmax_reducer
  ROOT argmax = s32[4]{{0}} get-tuple-element(r), index=1
}}
"""


def _argmax_rows_input() -> np.ndarray:
    """Rows with NaNs every third element from 2 (the first NaN is index 2), one NaN,
    none, and every element a NaN."""
    x = np.random.default_rng(7).standard_normal((4, 1000)).astype(np.float32)
    x[0, 2::3] = np.nan
    x[1, 500] = np.nan
    x[3, :] = np.nan
    return x


def test_an_argmax_over_several_nans_may_name_any_of_them(tmp_path, capsys):
    """The kernel combines each thread's strided elements and then the threads', so
    its index of a row with several NaNs is another NaN's than the evaluator's first
    (as XLA:GPU's): ``run --check`` accepts it, and says so."""
    module, inputs = tmp_path / "argmax.hlo", tmp_path / "x.npz"
    module.write_text(ARGMAX_ROWS)
    np.savez(inputs, arg0=_argmax_rows_input())
    argv = ["run", str(module), "--backend", "interpreter", "--inputs", str(inputs)]
    assert main([*argv, "--check", "--output", str(tmp_path / "out.npz")]) == 0
    out = capsys.readouterr().out
    assert "allowed: any NaN's index where a row has several" in out
    kernel = np.load(tmp_path / "out.npz")["out0"]
    assert kernel[0] != 2 and kernel[0] % 3 == 2  # another NaN of row 0 than the first
    assert kernel[1] == 500 and kernel[2] == np.nanargmax(_argmax_rows_input()[2])


def test_check_accepts_an_argmax_s_nan_ties_on_its_edge_inputs(tmp_path):
    """``heron check`` draws edge inputs with NaNs in the columns of a column argmax
    (jnp.argmax(x, axis=1) of f32[33,32,32]): the tolerance's NaN ties must be read
    from them too (they were not, and 17 of 1,056 indices "differed", each another
    NaN of its column than the evaluator's first)."""
    text = (
        f"HloModule argmax_columns\n\n{JAX_ARGMAX_REDUCER}\n"
        "fused {\n"
        "  x = f32[33,32,32]{2,1,0} parameter(0)\n"
        "  iota = s32[33,32,32]{2,1,0} iota(), iota_dimension=1\n"
        "  lowest = f32[] constant(-inf)\n"
        "  zero = s32[] constant(0)\n"
        "  ROOT r = (f32[33,32]{1,0}, s32[33,32]{1,0}) reduce(x, iota, lowest, zero),"
        " dimensions={1}, to_apply=argmax_reducer\n"
        "}\n\n"
        "ENTRY main {\n"
        "  x = f32[33,32,32]{2,1,0} parameter(0)\n"
        "  ROOT f = (f32[33,32]{1,0}, s32[33,32]{1,0}) fusion(x), kind=kInput, calls=fused\n"
        "}\n"
    )
    path = tmp_path / "argmax_columns.hlo"
    path.write_text(text)
    report = check_file(path)
    assert [f.emitter for f in report.fusions] == ["reduce_column_small"], report.text()
    assert report.ok, report.text()


#: The same argmax with a reducer that orders two NaNs by their index (the lower wins):
#: commutative, so every combination order gives the first NaN's index.
ARGMAX_ROWS_NANS_ORDERED = ARGMAX_ROWS.replace(
    "  pick_a = pred[] or(gt, a_nan)\n",
    "  b_nan = pred[] compare(b, b), direction=NE\n"
    "  a_first = pred[] compare(i, j), direction=LT\n"
    "  both_nan = pred[] and(a_nan, b_nan)\n"
    "  a_nan_wins = pred[] select(both_nan, a_first, a_nan)\n"
    "  pick_a = pred[] or(gt, a_nan_wins)\n",
)


def _argmax_tolerance(text: str = ARGMAX_ROWS):
    module = parse_module(text)
    root = module.entry.root_instruction
    return output_tolerance(
        root,
        root.shape.element_type,
        reduction=(root, module.entry, [_argmax_rows_input()]),
        tf32=False,
    )


def test_a_nan_tie_accepts_another_nan_s_index_and_nothing_else():
    tolerance = _argmax_tolerance()
    assert tolerance.ties is not None
    reference = np.array([2, 500, 7, 0], np.int32)
    reference[2] = np.nanargmax(_argmax_rows_input()[2])
    assert tolerance.mismatches(reference, reference).count == 0
    another_nan = reference.copy()
    another_nan[0], another_nan[3] = 998, 999
    assert tolerance.mismatches(another_nan, reference).count == 0
    a_number = reference.copy()
    a_number[0] = 3  # row 0's element 3 is a number
    assert list(tolerance.mismatches(a_number, reference).indices) == [0]
    one_nan = reference.copy()
    one_nan[1] = 501  # row 1 has one NaN: its index is the only answer
    assert list(tolerance.mismatches(one_nan, reference).indices) == [1]
    outside = reference.copy()
    outside[3] = 1000  # no such index in the row
    assert list(tolerance.mismatches(outside, reference).indices) == [3]


def test_a_reducer_that_orders_its_nans_keeps_the_exact_comparison():
    """Two NaNs are ordered by index in this reducer (commutative): every order gives
    the first NaN's index, and another is a miscompile."""
    assert ARGMAX_ROWS_NANS_ORDERED != ARGMAX_ROWS
    tolerance = _argmax_tolerance(ARGMAX_ROWS_NANS_ORDERED)
    assert tolerance.ties is None
    assert tolerance.describe() == "bitwise"


@pytest.mark.parametrize("dtype", [np.float16, np.float32, np.float64])
def test_the_norm_wise_bound_at_the_type_s_largest_value_is_finite(dtype):
    """An approximation's error is measured against the output's largest finite
    magnitude; where that is the type's largest value, its ulp is the gap below it
    (the spacing above overflows, and an infinite scale accepted any difference, an
    infinity where the reference is finite among them)."""
    largest = np.finfo(dtype).max
    reference = np.array([largest, 1.0, 2.0], dtype)
    kernel = np.array([largest, 1.0, np.inf], dtype)  # an overflow where there is none
    found = OutputTolerance(ulps=2).mismatches(kernel, reference)
    assert list(found.indices) == [2]
    gap = float(largest) - float(np.nextafter(largest, dtype(0)))
    near = np.array([largest, 1.0 + gap, 2.0], dtype)  # within 2 ulps of the largest
    assert OutputTolerance(ulps=2).mismatches(near, reference).count == 0


# -- complex functions: their values' magnitude, and XLA's special values ------------------

#: Complex functions of one c64 parameter, each an output (and expm1's real part).
COMPLEX_OPS = ["exponential-minus-one", "tanh", "tan", "exponential", "log", "log-plus-one"]
COMPLEX_OPS += ["sine", "cosine", "rsqrt", "logistic"]


def _complex_functions_module(n: int) -> str:
    names = [op.replace("-", "_") for op in COMPLEX_OPS]
    body = [f"  {name} = c64[{n}] {op}(z)" for name, op in zip(names, COMPLEX_OPS)]
    body.append(f"  expm1_real = f32[{n}] real(exponential_minus_one)")
    names.append("expm1_real")
    shapes = ", ".join([f"c64[{n}]"] * len(COMPLEX_OPS) + [f"f32[{n}]"])
    lines = "\n".join(body)
    return (
        f"HloModule complex_functions\n\nENTRY main {{\n  z = c64[{n}] parameter(0)\n{lines}\n"
        f"  ROOT out = ({shapes}) tuple({', '.join(names)})\n}}\n"
    )


def _complex_functions(tmp_path: Path, z: np.ndarray) -> tuple[str, str]:
    path = _write(tmp_path, "functions.hlo", _complex_functions_module(z.size))
    inputs = tmp_path / "z.npz"
    np.savez(inputs, arg0=z)
    return path, str(inputs)


def test_expm1_of_1_plus_i_agrees_though_its_real_part_cancels(tmp_path, capsys):
    """A sweep found ``expm1(1 + i)`` alone in an output called wrong: its real part,
    expm1(1) cos(1) + (cos(1) - 1) = 0.93 - 0.46, keeps the terms' rounding errors, 5 ulps
    of 0.47 where the bound is 2. A complex op's error is bounded by its value's
    magnitude: the complex output within 2 ulps of |w| (1.5 ulps here), its real part
    through the error propagation of the complex point."""
    path, inputs = _complex_functions(tmp_path, np.array([1 + 1j], np.complex64))
    code, out, err = heron(
        capsys, "run", path, "--inputs", inputs, "--backend", "interpreter", "--check"
    )
    assert (code, err) == (0, ""), out
    assert "max 5 ulp" in out  # the real part is that far off, and accepted


def test_complex_functions_agree_at_infinities_nan_and_overflow(tmp_path, capsys):
    """At infinities, NaN and values whose exponentials overflow f32, heron's kernels give
    XLA's formulas' values (``tanh(0 + inf i)`` is ``nan + nan i``, ``expm1(inf + 0i)``
    ``inf + 0i``) where the evaluator gave C99's: heron run --check called them wrong."""
    parts = [0.0, -0.0, 1.0, -2.5, 50.0, 100.0, 3e38, np.inf, -np.inf, np.nan]
    z = np.array([complex(a, b) for a in parts for b in parts], np.complex64)
    path, inputs = _complex_functions(tmp_path, z)
    code, out, err = heron(
        capsys, "run", path, "--inputs", inputs, "--backend", "interpreter", "--check"
    )
    assert (code, err) == (0, ""), out


def test_a_complex_value_off_by_more_than_its_bound_of_its_magnitude_is_refused():
    from heron.harness.agreement import compare

    reference = np.array([0.46869394 + 2.2873552j], np.complex64)
    gap = float(np.spacing(np.float32(abs(complex(reference[0])))))  # an ulp of |w|
    tolerance = OutputTolerance(ulps=2)
    for off, agrees in ((2 * gap, True), (3 * gap, False)):
        for part in (1, 1j):
            kernel = (reference.astype(np.complex128) + part * off).astype(np.complex64)
            assert compare(kernel, reference, tolerance).agrees is agrees, (off / gap, part)


COMPLEX_MAGNITUDES = """\
HloModule complex_magnitudes

ENTRY main {
  re = f32[4096] parameter(0)
  im = f32[4096] parameter(1)
  z = c64[4096] complex(re, im)
  ROOT magnitude = f32[4096] abs(z)
}
"""


def test_complex_magnitudes_agree_though_kernels_compute_them_with_a_quotient(tmp_path, capsys):
    """``jnp.abs`` of c64 values was compared bitwise: kernels (and XLA:CPU, bit for bit)
    compute ``max * sqrt(1 + (min / max)^2)``, 1-2 ulps from the correctly rounded hypot
    in a third of random elements (a helper's sweep, through jnp.linalg.eigvals)."""
    rng = np.random.default_rng(0)
    inputs = tmp_path / "parts.npz"
    parts = rng.standard_normal((2, 4096)).astype(np.float32)
    np.savez(inputs, arg0=parts[0], arg1=parts[1])
    path = _write(tmp_path, "magnitudes.hlo", COMPLEX_MAGNITUDES)
    code, out, err = heron(
        capsys, "run", path, "--inputs", str(inputs), "--backend", "interpreter", "--check"
    )
    assert (code, err) == (0, ""), out
    assert "max 2 ulp" in out and "4 ulps" in out


def test_a_complex_magnitude_off_by_more_than_its_bound_is_refused():
    from heron.harness.agreement import compare

    source = parse_module(COMPLEX_MAGNITUDES).entry.root_instruction
    tolerance = output_tolerance(source, source.shape.element_type, tf32=False)
    assert tolerance.ulps == 4
    reference = np.array([1.8150647878646851], np.float32)
    for ulps, agrees in ((4, True), (5, False)):
        kernel = reference.view(np.uint32) + np.uint32(ulps)
        assert compare(kernel.view(np.float32), reference, tolerance).agrees is agrees


#: ``(jnp.sum(u), jnp.mean(u), jnp.sum(u) * 0.5)`` as jax lowers it: CSE makes one reduce,
#: and the divide and the multiply a loop kernel after it.
SUM_MEAN_HALF = """\
HloModule sum_mean_half

add {
  a = f32[] parameter(0)
  b = f32[] parameter(1)
  ROOT s = f32[] add(a, b)
}

ENTRY main {
  u = f32[300]{0} parameter(0)
  zero = f32[] constant(0)
  sum = f32[] reduce(u, zero), dimensions={0}, to_apply=add
  sum.1 = f32[] reduce(u, zero), dimensions={0}, to_apply=add
  count = f32[] constant(300)
  mean = f32[] divide(sum.1, count)
  sum.2 = f32[] reduce(u, zero), dimensions={0}, to_apply=add
  half = f32[] constant(0.5)
  halved = f32[] multiply(sum.2, half)
  ROOT out = (f32[], f32[], f32[]) tuple(sum, mean, halved)
}
"""


def _cancelling_values() -> np.ndarray:
    """300 values of about 1e4 whose exact sum is 0.37 (a helper's sweep)."""
    u = (np.random.default_rng(0).standard_normal(300) * 1e4).astype(np.float32)
    u[-1] = np.float32(-u[:-1].astype(np.float64).sum() + 0.37)
    return u


def test_a_sum_scaled_in_a_later_kernel_keeps_its_summation_bound(tmp_path, capsys):
    # The compiled sum is 0.375, the reference's 0.367: 0.0039 apart after the multiply,
    # 40 times the fixed reassociation bound; sum|u| is 2.4e6, and 300 additions in
    # any two orders may differ by 0.14 there.
    path = _write(tmp_path, "sum_mean_half.hlo", SUM_MEAN_HALF)
    inputs = tmp_path / "u.npz"
    np.savez(inputs, arg0=_cancelling_values())
    code, out, err = heron(
        capsys, "run", path, "--backend", "interpreter", "--inputs", str(inputs), "--check"
    )
    assert (code, err) == (0, ""), out


def test_the_written_sum_s_bound_scales_with_its_factor_and_refuses_more():
    from heron.harness.agreement import WrittenSum
    from heron.hlo.evaluator import evaluate_module

    module = parse_module(SUM_MEAN_HALF)
    u = _cancelling_values()
    sums = [WrittenSum(module.entry, o, [u]) for o in module.entry.root_instruction.operands]
    reference = evaluate_module(module, [u])
    scale = (1.0, 1 / 300, 0.5)
    bound = 2.4e6 * 300 * 2.0**-24  # sum|u| times the additions' roundings, about 0.043
    for written, value, factor in zip(sums, reference, scale, strict=True):
        near = np.asarray(value + np.float32(0.5 * bound * factor), np.float32)
        far = np.asarray(value + np.float32(50 * bound * factor), np.float32)
        assert written.accepts(near, value).all()
        assert not written.accepts(far, value).any()


#: jax.ops.segment_sum of bf16[32] into one segment (a helper's sweep of jraph-style
#: segment sums): ``--deterministic`` sums it by a segmented scan in a tree order, the
#: reference in update order.
SEGMENT_SUM_BF16 = """\
HloModule segment_sum

add {
  a = bf16[] parameter(0)
  b = bf16[] parameter(1)
  ROOT s = bf16[] add(a, b)
}

ENTRY main {
  zero = bf16[1]{0} constant({0})
  segments = s32[32]{0} parameter(1)
  indices = s32[32,1]{1,0} reshape(segments)
  y = bf16[32]{0} parameter(0)
  ROOT sums = bf16[1]{0} scatter(zero, indices, y), update_window_dims={},
    inserted_window_dims={0}, scatter_dims_to_operand_dims={0}, index_vector_dim=1,
    to_apply=add
}
"""


def _cancelling_bf16_segments() -> tuple[np.ndarray, np.ndarray]:
    """32 bf16 values whose sum, -0.97, is a twentieth of the sum of their magnitudes."""
    y = np.random.default_rng(1).standard_normal(32).astype(BF16)
    return y, np.zeros(32, np.int32)


def test_a_deterministic_segment_sum_agrees_within_its_summation_bound(tmp_path, capsys):
    # The sorted scatter's scan gives -1.0, the reference's update order -0.96875 (the
    # exact sum -0.9725): 3% apart, past the fixed 16-bit bound; within
    # (m - 1 + log2 m) u sum|x| = 38 * 2^-8 * 21.3 of the m = 33 terms that meet there.
    path = _write(tmp_path, "segment_sum.hlo", SEGMENT_SUM_BF16)
    y, segments = _cancelling_bf16_segments()
    inputs = tmp_path / "in.npz"
    np.savez(inputs, arg0=y.astype(np.float32), arg1=segments)
    code, out, err = heron(
        capsys,
        "run",
        path,
        "--backend",
        "interpreter",
        "--deterministic",
        "--inputs",
        str(inputs),
        "--check",
    )
    assert (code, err) == (0, ""), out


def test_a_summing_scatter_s_bound_counts_the_updates_that_meet_and_refuses_more():
    from heron.harness.agreement import WrittenSum
    from heron.hlo.evaluator import evaluate_module

    module = parse_module(SEGMENT_SUM_BF16)
    y, segments = _cancelling_bf16_segments()
    source = module.entry.root_instruction
    bound = summation_bound(source, module.entry, [y, segments])
    magnitudes = np.abs(y.astype(np.float64)).sum()
    terms = 33  # the operand's zero and 32 updates
    steps = terms - 1 + np.ceil(np.log2(terms))
    assert np.allclose(bound, steps * 2.0**-8 * magnitudes)  # u of bf16: 2^-8
    reference = np.asarray(evaluate_module(module, [y, segments]))
    written = WrittenSum(module.entry, source, [y, segments])
    near = (reference.astype(np.float64) + 0.5 * bound).astype(BF16)
    far = (reference.astype(np.float64) + 3 * bound).astype(BF16)
    assert written.accepts(near, reference).all()
    assert not written.accepts(far, reference).any()


def test_a_kernel_adding_in_arrival_order_is_judged_by_the_same_bound():
    """``heron check`` of a scatter kernel whose updates meet (atomics, or the
    interpreter's strided loop): the fixed bounds and, per element, the summation bound."""
    from heron.hlo.element_types import ElementType

    module = parse_module(SEGMENT_SUM_BF16)
    y, segments = _cancelling_bf16_segments()
    scatter = module.entry.root_instruction
    tolerance = output_tolerance(
        scatter,
        ElementType.BF16,
        None,
        reordering=True,
        reduction=(scatter, module.entry, [y, segments]),
        tf32=False,
    )
    assert tolerance.reordered
    expected = summation_bound(scatter, module.entry, [y, segments])
    assert np.array_equal(tolerance.bounds.per_element, expected)


DOT_ROW_BY_COLUMN = """\
HloModule dot_cancel

ENTRY main {
  a = f32[1,256]{1,0} parameter(0)
  b = f32[256,1]{1,0} parameter(1)
  ROOT d = f32[1,1]{1,0} dot(a, b), lhs_contracting_dims={1}, rhs_contracting_dims={0}
}
"""


def test_a_dot_that_cancels_is_judged_by_its_products_summation_bound():
    # 256 products of about 600 summing to 0.0127: two summation orders of f32 differ
    # by 0.001 there, ten times the fixed bound (1e-4); sum|a_k b_k| bounds it per
    # element (a helper's sweep: an f16 dot with f32 accumulation, K = 256).
    from heron.harness.agreement import WrittenSum, compare
    from heron.hlo.evaluator import evaluate_module

    module = parse_module(DOT_ROW_BY_COLUMN)
    generator = np.random.default_rng(3)
    a = (generator.standard_normal((1, 256)) * 30).astype(np.float32)
    b = (generator.standard_normal((256, 1)) * 30).astype(np.float32)
    b[-1, 0] = np.float32(-(a[0, :-1].astype(np.float64) @ b[:-1, 0]) / a[0, -1])
    (reference,) = [evaluate_module(module, [a, b])]
    written = WrittenSum(module.entry, module.entry.root_instruction, [a, b])
    magnitude = float(np.abs(a[0]).astype(np.float64) @ np.abs(b[:, 0]))
    unit = 2.0**-24
    assert written.accepts(reference + np.float32(256 * unit * magnitude), reference).all()
    assert not written.accepts(reference + np.float32(2000 * unit * magnitude), reference).any()
    (tolerance,) = run_command.output_tolerances(
        module, {"d": True}, [a, b], None, tf32=False, written=module
    )
    sequential = np.float32(0)
    for x, y in zip(a[0], b[:, 0], strict=True):  # one valid order, the GEMM thread's
        sequential = np.float32(sequential + np.float32(x * y))
    assert compare(np.full((1, 1), sequential, np.float32), reference, tolerance).agrees


# -- complex128 products and signs (sweep 9) ---------------------------------------------------
COMPLEX128 = Path(__file__).parent / "data" / "complex128"


@pytest.mark.parametrize("name", ["multiply", "sign", "power_special_values"])
def test_heron_run_check_agrees_on_complex_arithmetic(name: str):
    """A c128 product (LLVM may fuse a part into an fma: 27 of 64 random products 1-5
    ulps from numpy's) and a c128 sign (MLIR's magnitude formula, 2 ulps from the exact
    ``hypot``) were compared bitwise; complex power at inf, NaN and 1 gave NaN in the
    kernels and the evaluator where XLA gives inf, 0 and 1 (a helper's sweep 9; each
    refused on the old code)."""
    import subprocess
    import sys

    program = COMPLEX128 / f"{name}.hlo"
    done = subprocess.run(
        [sys.executable, "-m", "heron.cli.main", "run", str(program)]
        + ["--inputs", str(program.with_suffix(".npz")), "--backend", "interpreter", "--check"],
        capture_output=True,
        text=True,
        check=False,
    )
    assert done.returncode == 0, done.stdout + done.stderr
    assert "agree: every output within the tolerance" in done.stdout


def test_the_tolerances_own_evaluations_are_timed_where_noticeable(capsys):
    """The random roundings evaluate the reference again (58 s of a jax-galsim gradient's
    check, where the evaluation the report named took 0.38 s): their time is printed
    once it is a second or more."""
    from heron.cli.run import _print_tolerance_time

    _print_tolerance_time(0.2)
    assert capsys.readouterr().out == ""
    _print_tolerance_time(58.4)
    assert "the tolerance's own evaluations of the reference: 58.40 s" in capsys.readouterr().out


def test_outputs_equal_to_the_reference_need_no_tolerance(tmp_path, capsys, monkeypatch):
    """Deciding a tolerance evaluates the reference again (random roundings, unrolled
    loops, the module as written): 118 s of a jaxns check whose 82 outputs were all
    identical. Where every output agrees bitwise none is decided; where one differs,
    its own is."""
    decided: list[list[bool]] = []
    output_tolerances = run_command.output_tolerances

    def recording(*args, **kwargs):
        decided.append(kwargs["needed"])
        return output_tolerances(*args, **kwargs)

    monkeypatch.setattr(run_command, "output_tolerances", recording)
    exact = tmp_path / "exact.hlo"
    exact.write_text(
        """HloModule exact

ENTRY main {
  x = f32[64]{0} parameter(0)
  y = f32[64]{0} parameter(1)
  ROOT s = f32[64]{0} add(x, y)
}
"""
    )
    assert main(["run", str(exact), "--backend", "interpreter", "--check", "--quiet"]) == 0
    assert "(allowed: bitwise)" in capsys.readouterr().out
    assert decided == []
    inexact = tmp_path / "inexact.hlo"
    inexact.write_text(CASE_454)
    main(["run", str(inexact), "--backend", "interpreter", "--check", "--quiet"])
    assert decided == [[True]]


def test_only_the_outputs_that_differ_get_a_tolerance() -> None:
    from heron.harness.agreement import bitwise_agreements, output_tolerances
    from heron.harness.tolerance import ErrorBounds

    module = parse_module(CASE_454)
    x = np.linspace(-3, 3, 512, dtype=np.float32).astype(BF16).reshape(4, 128)
    needed = [False]
    (tolerance,) = output_tolerances(module, {}, [x], ErrorBounds(), tf32=False, needed=needed)
    assert tolerance == OutputTolerance()  # bitwise: nothing evaluated for it
    same = np.ones(3, np.float32)
    assert bitwise_agreements([same, same + 1], [same, same]) == [True, False]
