"""The check allows an approximation's error as the ops after it amplify it.

``expm1(25 * log1p(x))`` (scipy's ``boxcox1p`` with lambda 25) multiplies
log1p's relative error by about ``|25 log1p(x)|``: a kernel whose log1p is one
ulp off gives an output some ten ulps off, and ``heron run --check`` refused a
correct kernel (28 of 256 elements, up to 15 ulps, where it allowed 4). The
bound is measured with the reference evaluator (:mod:`heron.harness.error_propagation`);
these tests hold it to accepting that and to still refusing an approximation
further off than its bound.
"""

from __future__ import annotations

from pathlib import Path

import attrs
import numpy as np

from heron.cli.main import main
from heron.harness.error_propagation import moved_by_ulps
from heron.harness.reference_values import value_of, value_with
from heron.harness.tolerance import ULP_BOUNDS, output_tolerance
from heron.hlo.parser import parse_module

BOXCOX = """\
HloModule boxcox

ENTRY main {
  x = f32[256] parameter(0)
  lam = f32[256] parameter(1)
  l = f32[256] log-plus-one(x)
  y = f32[256] multiply(lam, l)
  ROOT e = f32[256] exponential-minus-one(y)
}
"""
#: log1p's bound in f32 (expand-math's table, as the check reads it).
LOG1P_ULPS = ULP_BOUNDS["log-plus-one"][0]


def _case():
    module = parse_module(BOXCOX)
    computation = module.entry
    x = np.linspace(0.45, 0.55, 256).astype(np.float32)
    arguments = (x, np.full(256, 25.0, np.float32))
    root = computation.root_instruction
    tolerance = output_tolerance(
        root,
        root.shape.element_type,
        reduction=(root, computation, arguments),
        tf32=False,
    )
    return computation, arguments, tolerance


def _kernel_with_log1p_off_by(ulps: int) -> tuple[np.ndarray, np.ndarray]:
    """The output of a kernel whose log1p is ``ulps`` ulps off (and exact elsewhere),
    and the reference's."""
    computation, arguments, _ = _case()
    log1p = computation.instruction("l")
    root = computation.root_instruction
    moved = moved_by_ulps(np.asarray(value_of(computation, log1p, arguments)), ulps)
    kernel = np.asarray(value_with(computation, root, arguments, log1p, moved))
    return kernel, np.asarray(value_of(computation, root, arguments))


def test_an_error_within_log1p_s_bound_that_expm1_amplifies_is_accepted():
    _, _, tolerance = _case()
    assert tolerance.amplified is not None
    kernel, reference = _kernel_with_log1p_off_by(LOG1P_ULPS)
    assert tolerance.mismatches(kernel, reference).count == 0
    # the ulp bound alone refuses it: the amplification is what the new rule measures
    plain = attrs.evolve(tolerance, amplified=None)
    assert plain.mismatches(kernel, reference).count > 50


def test_an_approximation_further_off_than_its_bound_is_still_refused():
    _, _, tolerance = _case()
    kernel, reference = _kernel_with_log1p_off_by(6 * LOG1P_ULPS)
    assert tolerance.mismatches(kernel, reference).count > 200
    kernel, reference = _kernel_with_log1p_off_by(-6 * LOG1P_ULPS)
    assert tolerance.mismatches(kernel, reference).count > 200


def test_moving_by_ulps_steps_each_element_by_its_own_ulp():
    values = np.array([1.0, -3.0, 0.0, 1e-40, np.inf, np.nan], np.float32)
    moved = moved_by_ulps(values, 2)
    assert moved[0] == np.nextafter(np.nextafter(np.float32(1), np.float32(2)), np.float32(2))
    assert moved[1] == np.float32(-3.0) + 2 * np.spacing(np.float32(3.0))
    assert moved[2] == 2 * np.float32(1.4e-45)  # the smallest subnormal's steps
    assert moved[4] == np.inf and np.isnan(moved[5])


def _program_and_inputs(tmp_path, name: str, text: str):
    """The program written to ``name`` and the boxcox case's arguments beside it."""
    path = tmp_path / name
    path.write_text(text)
    _, arguments, _ = _case()
    inputs = tmp_path / "inputs.npz"
    np.savez(inputs, arg0=arguments[0], arg1=arguments[1])
    return path, inputs


def test_run_check_accepts_the_correct_boxcox_kernel(tmp_path, capsys):
    path, inputs = _program_and_inputs(tmp_path, "boxcox.hlo", BOXCOX)
    argv = ["run", str(path), "--check", "--backend", "interpreter", "--inputs", str(inputs)]
    assert main(argv) == 0
    assert "as the ops after an approximation amplify its error" in capsys.readouterr().out


#: The same program as two kernels: log1p's error reaches the second as an argument.
BOXCOX_TWO_KERNELS = """\
HloModule boxcox2

log1p_computation {
  p = f32[256] parameter(0)
  ROOT l = f32[256] log-plus-one(p)
}

expm1_computation {
  l = f32[256] parameter(0)
  lam = f32[256] parameter(1)
  y = f32[256] multiply(lam, l)
  ROOT e = f32[256] exponential-minus-one(y)
}

ENTRY main {
  x = f32[256] parameter(0)
  lam = f32[256] parameter(1)
  f1 = f32[256] fusion(x), kind=kLoop, calls=log1p_computation
  ROOT f2 = f32[256] fusion(f1, lam), kind=kLoop, calls=expm1_computation
}
"""


def test_an_earlier_kernel_s_error_is_amplified_by_the_one_after_it(tmp_path, monkeypatch):
    path, inputs = _program_and_inputs(tmp_path, "boxcox2.hlo", BOXCOX_TWO_KERNELS)
    argv = ["--quiet", "run", str(path), "--check", "--backend", "interpreter"]
    assert main([*argv, "--inputs", str(inputs)]) == 0
    # without the first kernel's bound moved into the second's argument, it differs
    import heron.harness.agreement as agreement

    monkeypatch.setattr(agreement, "_ulps_into", lambda operand: 0)
    assert main([*argv, "--inputs", str(inputs)]) == 1


# -- a complex power ------------------------------------------------------------------

#: ``jnp.power(z, 2.5)`` of complex128 values, as jax lowers it under x64.
COMPLEX_POWER = """\
HloModule complex_power

ENTRY main {
  z = c128[300] parameter(0)
  c = c128[] constant((2.5, 0))
  b = c128[300] broadcast(c), dimensions={}
  ROOT w = c128[300] power(z, b)
}
"""


def _complex_power_case():
    module = parse_module(COMPLEX_POWER)
    computation = module.entry
    rng = np.random.default_rng(0)
    z = rng.standard_normal(300) * 3 + 1j * rng.standard_normal(300) * 3
    arguments = (z.astype(np.complex128),)
    root = computation.root_instruction
    tolerance = output_tolerance(
        root, root.shape.element_type, reduction=(root, computation, arguments), tf32=False
    )
    return computation, arguments, tolerance


def test_run_check_accepts_a_complex_power_whose_angle_amplifies_atan2_s_error(
    tmp_path, capsys, monkeypatch
):
    """``z ** 2.5`` at ``z = -6.75 - 1.15i``: the angle ``2.5 arg z = -7.4`` carries
    atan2's error 7.4 times; the kernel was 14 ulps of ``|w|`` from the evaluator, where
    powf's bound allows 3, and a correct kernel was called DISAGREE (a helper's sweep)."""
    path = tmp_path / "power.hlo"
    path.write_text(COMPLEX_POWER)
    _, arguments, _ = _complex_power_case()
    inputs = tmp_path / "inputs.npz"
    np.savez(inputs, arg0=arguments[0])
    argv = ["--quiet", "run", str(path), "--check", "--backend", "interpreter"]
    assert main([*argv, "--inputs", str(inputs)]) == 0
    assert "as the ops after an approximation amplify its error" in capsys.readouterr().out
    # powf's bound alone, not grown by the angle, refuses the same kernel
    import heron.harness.error_propagation as error_propagation

    monkeypatch.setattr(error_propagation, "_growth", lambda *_: 1.0)
    assert main([*argv, "--inputs", str(inputs)]) == 1


def test_a_complex_power_further_off_than_its_grown_bound_is_refused():
    _, arguments, tolerance = _complex_power_case()
    reference = arguments[0].astype(np.complex128) ** 2.5
    # The largest growth here is 1 + 2 * 2.5 * pi (c arg z at most 2.5 pi), 3 ulps
    # each, doubled: about 100 ulps. A kernel off by 1e-13 relative (450-900 ulps) is
    # outside it everywhere (the norm-wise reading, 3 ulps of the largest |w|, still
    # accepts the smallest values).
    for off in (1e-13, 1e-13j):
        kernel = reference * (1 + off)
        assert not tolerance.amplified.accepts(kernel, reference).any()
        assert tolerance.mismatches(kernel, reference).count > 250
    # within the ulp bound: accepted (the growth only ever widens it)
    kernel = reference + np.abs(reference) * 2.2e-16
    assert tolerance.mismatches(kernel, reference).count == 0


def test_a_complex_output_s_amplified_error_counts_both_parts():
    """An error in the imaginary part alone is measured: the bound compares the
    modulus of the difference (float64 would have kept the real parts)."""
    _, arguments, tolerance = _complex_power_case()
    reference = arguments[0].astype(np.complex128) ** 2.5
    kernel = reference + 1j * np.abs(reference) * 1e-12
    accepted = tolerance.amplified.accepts(kernel, reference)
    assert not accepted.any()


# -- paths that meet again -------------------------------------------------------------------


def _reused(steps: int) -> str:
    """``exp(x)`` then ``steps`` times ``y = y * 0.5 + y * 0.5`` (exact in f32): 2^steps
    paths from the exp to the output, and exp's error, no more, in the output."""
    lines = [
        "  x = f32[8] parameter(0)",
        "  half = f32[] constant(0.5)",
        "  h = f32[8] broadcast(half), dimensions={}",
        "  y0 = f32[8] exponential(x)",
    ]
    for k in range(steps):
        lines += [
            f"  a{k} = f32[8] multiply(y{k}, h)",
            f"  b{k} = f32[8] multiply(y{k}, h)",
            f"  y{k + 1} = f32[8] add(a{k}, b{k})",
        ]
    lines[-1] = lines[-1].replace(f"  y{steps} =", f"  ROOT y{steps} =")
    return "HloModule reused\n\nENTRY main {\n" + "\n".join(lines) + "\n}\n"


def test_paths_that_meet_again_count_up_to_a_limit():
    """A sweep found bounds of 3 * 2^40 ulps, under which 1000 times the reference
    passed (quadax, interpax, a haliax AdamW step): paths count up to
    MAX_MERGED_PATHS where they meet, and a wrong answer is refused."""
    from heron.harness.tolerance import MAX_MERGED_PATHS, mismatches, ulp_bound

    root = parse_module(_reused(40)).entry.root_instruction
    bound = ulp_bound(root, root.shape.element_type)
    assert bound == ULP_BOUNDS["exponential"][0] * MAX_MERGED_PATHS
    reference = np.exp(np.linspace(-1, 1, 8)).astype(np.float32)
    for wrong in (reference * 1000, reference * 1e-3, reference + 1):
        assert mismatches(wrong.astype(np.float32), reference, bound).count == 8
    # a single path keeps its count, and two paths still carry the error twice
    one = parse_module(_reused(0)).entry.root_instruction
    assert ulp_bound(one, one.shape.element_type) == ULP_BOUNDS["exponential"][0]
    two = parse_module(_reused(1)).entry.root_instruction
    assert ulp_bound(two, two.shape.element_type) == 2 * ULP_BOUNDS["exponential"][0]


def test_several_values_come_from_one_evaluation(monkeypatch):
    """The check's tolerances read the values of a kernel's operands: all of them from one
    evaluation of the program (sax's last kernel reads sixty, each evaluated alone took
    30 s of a check whose one evaluation took 0.6 s), each equal to its own evaluation."""
    import heron.hlo.evaluator as evaluator
    from heron.harness.reference_values import values_of

    module = parse_module(BOXCOX)
    computation = module.entry
    x = np.linspace(0.1, 2.0, 256, dtype=np.float32)
    lam = np.full(256, 3.0, np.float32)
    wanted = [computation.instruction(name) for name in ("l", "y", "x", "e", "l")]
    alone = [np.asarray(value_of(computation, inst, [x, lam])) for inst in wanted]
    calls = []
    evaluate = evaluator.evaluate_computation
    monkeypatch.setattr(
        evaluator, "evaluate_computation", lambda *a, **k: calls.append(1) or evaluate(*a, **k)
    )
    together = values_of(computation, wanted, [x, lam])
    assert len(calls) == 1
    for one, other in zip(alone, together, strict=True):
        np.testing.assert_array_equal(one, np.asarray(other))
    assert computation.root_instruction.name == "e"  # the computation is left as it was
    assert len(computation.instructions) == 5


#: jaxtronomy's NFW lens Hessian in f32 on four points (the nineteenth sweep): one fusion
#: whose output 54 approximations reach, one of them the cancelling
#: ``log(X/2) + arccosh(1/X)/sqrt(1-X^2)``.
NFW = Path(__file__).parent / "data" / "reliability" / "nfw_hessian_cancellation.hlo"
NFW_ARGUMENTS = [
    np.float32(1.5),
    np.float32(0.4),
    np.float32(0.1),
    np.float32(0.0),
    np.asarray([-0.05128205, 1.3846154, 0.05128205, 0.05128205], np.float32),
    np.asarray([-0.05128205, -0.7692308, -0.05128205, -1.7948718], np.float32),
]


def test_more_approximations_than_max_points_are_still_propagated(tmp_path, monkeypatch):
    """Past MAX_POINTS approximations an output's propagation is measured while it stays
    within MAX_WORK element-operations: the NFW Hessian as written (the check's loop and
    call propagation, :mod:`heron.harness.unrolled`) reads 54, and its kernel, as close
    to the f64 value as XLA:CPU's, was refused by the ulp bound alone (243 ulps, 51
    allowed)."""
    from heron.harness import error_propagation as propagation

    inputs = tmp_path / "in.npz"
    np.savez(inputs, **{f"arg{k}": value for k, value in enumerate(NFW_ARGUMENTS)})
    command = ["run", str(NFW), "--backend", "interpreter", "--inputs", str(inputs), "--check"]
    assert main([*command, "--quiet"]) == 0
    # Over the work budget the ulp bound alone applies, as before, and refuses it.
    monkeypatch.setattr(propagation, "MAX_WORK", 0)
    assert main([*command, "--quiet"]) == 1
