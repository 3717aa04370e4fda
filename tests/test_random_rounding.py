"""Outputs that rounding decides: the check's random roundings of the reference.

A helper's sweep of optimistix and jaxopt optimizers found ``heron run --check``
calling five correct programs wrong: their loops stop when a residual falls under
a tolerance, the residual at the last trip is rounding noise, and heron (like
XLA:CPU) ran one or two trips more than the reference evaluator, its iteration
counter compared exactly. :mod:`heron.harness.random_rounding` evaluates the
reference again with each op rounded up or down at random; where that changes the
program's decisions, an output is accepted within the spread it shows.
"""

from __future__ import annotations

from pathlib import Path

import ml_dtypes
import numpy as np
import pytest

from heron.cli.main import main
from heron.harness.agreement import compare, output_tolerances
from heron.harness.random_rounding import RandomRounding, RandomRoundings, _neighbour
from heron.hlo.evaluator import evaluate_module, flatten_literal
from heron.hlo.parser import parse_module

DATA = Path(__file__).parent / "data" / "rounding"


def _checked(name: str, capsys) -> str:
    """``heron run --check`` on ``DATA/name.hlo`` with its inputs: what it printed, once it
    agreed (exit 0, nothing on stderr)."""
    hlo, inputs = DATA / f"{name}.hlo", DATA / f"{name}.npz"
    code = main(["run", str(hlo), "--inputs", str(inputs), "--backend", "interpreter", "--check"])
    out, err = capsys.readouterr()
    assert (code, err) == (0, ""), out
    return out


#: Add ``STEP`` to a total until it reaches 1, counting the trips. 0.1 is not exact in
#: f32: ten sums reach 1.0000001 rounded to nearest, 0.99999994 with some roundings.
ACCUMULATE = """\
HloModule accumulate_to_one

condition {
  state = (s32[], f32[]) parameter(0)
  total = f32[] get-tuple-element(state), index=1
  one = f32[] constant(1)
  ROOT below = pred[] compare(total, one), direction=LT
}

body {
  state = (s32[], f32[]) parameter(0)
  trips = s32[] get-tuple-element(state), index=0
  total = f32[] get-tuple-element(state), index=1
  step = f32[] constant(STEP)
  one = s32[] constant(1)
  next_trips = s32[] add(trips, one)
  next_total = f32[] add(total, step)
  ROOT next = (s32[], f32[]) tuple(next_trips, next_total)
}

ENTRY main {
  zero = s32[] constant(0)
  start = f32[] parameter(0)
  initial = (s32[], f32[]) tuple(zero, start)
  loop = (s32[], f32[]) while(initial), condition=condition, body=body
  trips = s32[] get-tuple-element(loop), index=0
  total = f32[] get-tuple-element(loop), index=1
  ROOT out = (s32[], f32[]) tuple(trips, total)
}
"""


def _accumulate(step: str, dtype=np.float32):
    """The accumulating loop in ``dtype`` (f32 or f64): its outputs' tolerances and values."""
    text = ACCUMULATE.replace("STEP", step)
    module = parse_module(text if dtype == np.float32 else text.replace("f32", "f64"))
    arguments = [np.asarray(dtype(0))]
    tolerances = output_tolerances(module, {}, arguments, None, tf32=False, written=module)
    reference = flatten_literal(evaluate_module(module, arguments))
    return tolerances, reference


def test_a_loop_that_rounding_stops_accepts_the_other_trip_count():
    (trips_tolerance, total_tolerance), (trips, total) = _accumulate("0.1")
    assert int(trips) == 10 and float(total) == pytest.approx(1.0000001)
    one_more = compare(np.asarray(11, np.int32), trips, trips_tolerance)
    assert one_more.agrees, one_more.summary
    assert "random roundings" in one_more.summary
    assert compare(np.asarray(np.float32(1.0999999)), total, total_tolerance).agrees
    for wrong in (14, 7, -10):
        assert not compare(np.asarray(wrong, np.int32), trips, trips_tolerance).agrees
    assert not compare(np.asarray(np.float32(1.5)), total, total_tolerance).agrees


def test_a_loop_that_no_rounding_changes_keeps_its_exact_count():
    (trips_tolerance, _), (trips, _) = _accumulate("0.25")  # every sum exact
    assert int(trips) == 4
    result = compare(np.asarray(5, np.int32), trips, trips_tolerance)
    assert not result.agrees
    assert "random roundings" not in result.summary


def test_a_counted_loop_is_not_decided_by_rounding():
    text = ACCUMULATE.replace("STEP", "0.1").replace(
        """  total = f32[] get-tuple-element(state), index=1
  one = f32[] constant(1)
  ROOT below = pred[] compare(total, one), direction=LT""",
        """  trips = s32[] get-tuple-element(state), index=0
  ten = s32[] constant(10)
  ROOT below = pred[] compare(trips, ten), direction=LT""",
    )
    module = parse_module(text)
    arguments = [np.asarray(np.float32(0))]
    spread = RandomRoundings(module, arguments).spread()
    assert spread is not None and not spread.decided_by_rounding
    trips_tolerance, _ = output_tolerances(module, {}, arguments, None, tf32=False, written=module)
    assert not compare(np.asarray(11, np.int32), np.asarray(10, np.int32), trips_tolerance).agrees


@pytest.mark.parametrize("dtype", [np.float32, np.float16, ml_dtypes.bfloat16])
def test_neighbours_are_the_next_values_of_the_type(dtype):
    values = np.asarray([1.0, -1.0, 0.0, -0.0, 3.5], dtype)
    up = _neighbour(values, np.ones(values.shape, np.bool_))
    down = _neighbour(values, np.zeros(values.shape, np.bool_))
    for value, above, below in zip(values, up, down, strict=True):
        wide = float(value)
        assert float(above) > wide and float(below) < wide
        # nothing of the type lies between: the halfway points round back to value
        assert dtype(wide + (float(above) - wide) / 4) == value
        assert dtype(wide + (float(below) - wide) / 4) == value


def test_random_rounding_moves_inexact_results_by_one_step_and_keeps_exact_ones():
    module = parse_module(
        """\
HloModule sums

ENTRY main {
  a = f32[1000] parameter(0)
  b = f32[1000] parameter(1)
  ROOT sum = f32[1000] add(a, b)
}
"""
    )
    generator = np.random.default_rng(0)
    a = generator.standard_normal(1000).astype(np.float32)
    b = generator.standard_normal(1000).astype(np.float32)
    nearest = a + b
    rounded = evaluate_module(module, [a, b], hook=RandomRounding(7, frozenset()))
    exact = a.astype(np.float64) + b.astype(np.float64)
    moved = rounded != nearest
    assert 0 < np.count_nonzero(moved) < 1000
    steps = np.abs(rounded.view(np.int32).astype(np.int64) - nearest.view(np.int32))
    assert steps.max() == 1
    # the other rounding lies on the exact value's side
    assert np.all(np.sign(rounded[moved] - nearest[moved]) == np.sign(exact - nearest)[moved])
    integers = np.arange(1000, dtype=np.float32)
    same = evaluate_module(module, [integers, integers], hook=RandomRounding(7, frozenset()))
    np.testing.assert_array_equal(same, 2 * integers)


def test_heron_run_check_accepts_a_levenberg_marquardt_fit_one_trip_longer(capsys):
    """jaxopt's LevenbergMarquardt (maxiter 50, tol 1e-6) fitting a p0 exp(-p1 x) + p2:
    the reference stops after 4 trips, heron's kernels (and XLA:CPU) after 5."""
    out = _checked("levenberg_marquardt", capsys)
    assert "out1  1 of 1 elements differ (allowed: within the spread of 8 random" in out


#: Two sums of the same 500 values in two orders, compared (sweep 8): equal in exact
#: arithmetic, so which rounds larger is up to each compiler's summation order.
TIED_SUMS = """\
HloModule tied_sums

add {
  a = f32[] parameter(0)
  b = f32[] parameter(1)
  ROOT s = f32[] add(a, b)
}

ENTRY main {
  x = f32[32,500] parameter(0)
  zero = f32[] constant(0)
  forward = f32[32] reduce(x, zero), dimensions={1}, to_apply=add
  reversed = f32[32,500] reverse(x), dimensions={1}
  backward = f32[32] reduce(reversed, zero), dimensions={1}, to_apply=add
  greater = pred[32] compare(forward, backward), direction=GT
  ROOT out = s32[32] convert(greater)
}
"""


def test_a_comparison_of_tied_sums_accepts_either_answer_where_an_order_flips_it():
    module = parse_module(TIED_SUMS)
    x = np.random.default_rng(4242).standard_normal((32, 500)).astype(np.float32)
    x[:4] = np.round(x[:4] * 4)  # rows of small integers: exact sums in every order
    (tolerance,) = output_tolerances(module, {}, [x], None, tf32=False, written=module)
    (reference,) = flatten_literal(evaluate_module(module, [x]))
    spread = RandomRoundings(module, [x]).spread()
    assert spread is not None and spread.decided_by_rounding
    # the sums in other orders flip some rows (never an exact one)
    other_orders = np.stack([run[0] for run in spread.outputs])
    flipped = (other_orders != reference).any(axis=0)
    assert 0 < np.count_nonzero(flipped) and not flipped[:4].any()
    either = np.where(flipped, 1 - reference, reference).astype(np.int32)
    result = compare(either, reference, tolerance)
    assert result.agrees, result.summary
    assert "random roundings" in result.summary
    # a row whose sums every order makes equal keeps its answer
    wrong = reference.copy()
    wrong[0] ^= 1
    assert not compare(wrong, reference, tolerance).agrees


def test_a_comparison_of_sums_every_order_makes_exactly_is_not_decided_by_rounding():
    module = parse_module(TIED_SUMS)
    x = np.random.default_rng(1).integers(-8, 8, (32, 500)).astype(np.float32)
    spread = RandomRoundings(module, [x]).spread()
    assert spread is not None and not spread.decided_by_rounding


def test_heron_run_check_accepts_a_kernel_summing_tied_sums_in_its_own_order(capsys):
    out = _checked("tied_sums_compared", capsys)
    assert "random roundings of the reference, which decide" in out


#: An argsort of 32 sums: rows 0-15 hold the same 500 values in other orders (their
#: sums tie in exact arithmetic), rows 16-31 those values plus 1, 2, ... 16 each.
TIED_SORT = """\
HloModule tied_sort

add {
  a = f32[] parameter(0)
  b = f32[] parameter(1)
  ROOT s = f32[] add(a, b)
}

less {
  a = f32[] parameter(0)
  b = f32[] parameter(1)
  i = s32[] parameter(2)
  j = s32[] parameter(3)
  ROOT lt = pred[] compare(a, b), direction=LT
}

ENTRY main {
  x = f32[32,500] parameter(0)
  zero = f32[] constant(0)
  sums = f32[32] reduce(x, zero), dimensions={1}, to_apply=add
  rows = s32[32] iota(), iota_dimension=0
  sorted = (f32[32], s32[32]) sort(sums, rows), dimensions={0}, is_stable=true, to_apply=less
  ROOT order = s32[32] get-tuple-element(sorted), index=1
}
"""


def _tied_rows() -> np.ndarray:
    random = np.random.default_rng(7)
    values = random.standard_normal(500).astype(np.float32)
    rows = [random.permutation(values) for _ in range(16)]
    rows += [random.permutation(values + np.float32(k / 500)) for k in range(1, 17)]
    return np.stack(rows)


def test_an_argsort_of_tied_sums_accepts_any_order_of_the_ties_rounding_decides():
    """The fuzzer's seed 92010: the evaluator sorts by keys without evaluating the
    comparator's comparison, so only the sort's own order can show the decision."""
    module = parse_module(TIED_SORT)
    x = _tied_rows()
    (tolerance,) = output_tolerances(module, {}, [x], None, tf32=False, written=module)
    (reference,) = flatten_literal(evaluate_module(module, [x]))
    spread = RandomRoundings(module, [x]).spread()
    assert spread is not None and spread.decided_by_rounding
    assert sorted(reference[:16]) == list(range(16))
    assert list(reference[16:]) == list(range(16, 32))
    # kernels summing each row in other orders: a loop from either end, a tree, halves
    for sums in (
        np.cumsum(x, axis=1, dtype=np.float32)[:, -1],
        np.cumsum(x[:, ::-1], axis=1, dtype=np.float32)[:, -1],
        x.reshape(32, 125, 4).sum(axis=2).sum(axis=1),
        x[:, :250].sum(axis=1) + x[:, 250:].sum(axis=1),
    ):
        other_order = np.argsort(sums, kind="stable").astype(np.int32)
        assert (other_order != reference).any()
        result = compare(other_order, reference, tolerance)
        assert result.agrees, result.summary
        assert "random roundings" in result.summary
    # rows whose sums no rounding brings together keep their places
    wrong = reference.copy()
    wrong[[20, 21]] = wrong[[21, 20]]
    assert not compare(wrong, reference, tolerance).agrees


def test_an_argsort_of_sums_no_rounding_brings_together_is_not_decided_by_rounding():
    module = parse_module(TIED_SORT)
    x = _tied_rows() + np.arange(32, dtype=np.float32)[:, None]
    spread = RandomRoundings(module, [x]).spread()
    assert spread is not None and not spread.decided_by_rounding


def test_heron_run_check_accepts_an_argsort_of_cumulative_sums_that_tie(capsys):
    """jax_chains seed 92010: a softmax's rows through an einsum and a cumsum tie in
    their last column; heron's kernels and the reference sort those 64 keys otherwise."""
    out = _checked("argsort_of_tied_cumsums", capsys)
    assert "random roundings of the reference, which decide" in out


def test_a_float64_loop_that_rounding_stops_accepts_the_other_trip_count():
    """Float64 had no random rounding: a float64 program's decisions were all exact."""
    (trips_tolerance, _), (trips, total) = _accumulate("0.1", np.float64)
    assert int(trips) == 11 and float(total) == pytest.approx(1.1)  # 0.1 ten times: 1 - 1e-16
    one_less = compare(np.asarray(10, np.int32), trips, trips_tolerance)
    assert one_less.agrees, one_less.summary
    assert "random roundings" in one_less.summary
    for wrong in (14, 7):
        assert not compare(np.asarray(wrong, np.int32), trips, trips_tolerance).agrees
    (trips_tolerance, _), (trips, _) = _accumulate("0.25", np.float64)  # every sum exact
    assert not compare(np.asarray(int(trips) + 1, np.int32), trips, trips_tolerance).agrees


@pytest.mark.parametrize("opcode", ["add", "subtract", "multiply", "divide", "sqrt"])
def test_float64_random_rounding_steps_to_the_exact_results_side(opcode):
    """No wider float holds a float64 result: the side is an error-free transformation's
    (checked here with exact rationals)."""
    from fractions import Fraction

    unary = opcode == "sqrt"
    operands = "a" if unary else "a, b"
    module = parse_module(
        f"""\
HloModule f64_{opcode}

ENTRY main {{
  a = f64[400] parameter(0)
  b = f64[400] parameter(1)
  ROOT r = f64[400] {opcode}({operands})
}}
"""
    )
    generator = np.random.default_rng(3)
    a = generator.standard_normal(400) * 10.0 ** generator.integers(-5, 6, 400)
    b = generator.standard_normal(400) * 10.0 ** generator.integers(-5, 6, 400)
    if unary:
        a = np.abs(a)
    nearest = evaluate_module(module, [a, b])
    rounded = evaluate_module(module, [a, b], hook=RandomRounding(11, frozenset()))
    moved = np.flatnonzero(rounded != nearest)
    assert 50 < moved.size < 350
    for k in moved:
        assert rounded[k] == np.nextafter(nearest[k], rounded[k])  # one step
        x, y, q = Fraction(float(a[k])), Fraction(float(b[k])), Fraction(float(nearest[k]))
        if unary:  # sqrt(x) > q exactly when x > q^2
            above = x > q * q
        else:
            exact = {"add": x + y, "subtract": x - y, "multiply": x * y}.get(opcode)
            exact = x / y if exact is None else exact
            above = exact > q
        assert (rounded[k] > nearest[k]) == above
    integers = np.arange(1.0, 401.0)
    squares = integers * integers
    same = evaluate_module(
        module, [squares, integers], hook=RandomRounding(11, frozenset())
    )  # every result exact: sqrt of a square, sums, products and quotients of integers
    if opcode != "divide":
        np.testing.assert_array_equal(same, evaluate_module(module, [squares, integers]))


def test_heron_run_check_accepts_an_optimistix_dogleg_solve_in_float64(capsys):
    """optimistix 0.1.0's Dogleg least squares in float64 (jax_enable_x64) fitting
    a exp(-b t) + c (the tenth sweep): heron's kernels stop after 13 steps, XLA:CPU after
    11, the reference evaluator after 7 (64 random roundings: 7 to 32); no float64 op was
    rounded at random, so the check called the step count wrong."""
    out = _checked("optimistix_dogleg_f64", capsys)
    assert "out1  1 of 1 elements differ (allowed: within the spread of" in out


#: One Lamb step (keras.optimizers.Lamb's formulas, as the thirteenth sweep's Dense ->
#: BatchNorm training step takes two) on a bias before a batch mean is subtracted,
#: ``lamb_bias_before_batch_mean``, from jax.jit(step).lower(...) of
#:
#:     def loss(w, b, x, t):
#:         h = x @ w + b
#:         h = h - h.mean(0)  # BatchNorm's centring: blind to b
#:         return jnp.mean((h - t) ** 2)
#:
#:     def lamb(p, g, lr=1e-2, b1=0.9, b2=0.999, eps=1e-6):
#:         m, v = (1 - b1) * g, (1 - b2) * g * g
#:         u = (m / (1 - b1)) / (jnp.sqrt(v / (1 - b2)) + eps)
#:         return p - lr * jnp.sqrt(jnp.sum(p * p)) / jnp.sqrt(jnp.sum(u * u)) * u
#:
#:     def step(w, b, x, t):
#:         gw, gb = jax.grad(loss, argnums=(0, 1))(w, b, x, t)
#:         return lamb(w, gw), lamb(b, gb)
#:
#: on w f32[12,8], b f32[8], x f32[6,12], t f32[6,8] (numpy's RandomState(0)). The
#: bias's gradient is exactly 0 in exact arithmetic, so in f32 it is the rounding noise of
#: a sum that cancels; Lamb normalises it into a step of full size whose direction only
#: the noise sets.
LAMB = "lamb_bias_before_batch_mean"


def _lamb_run(monkeypatch, capsys, spoil=None) -> tuple[int, str]:
    """``heron run --check`` of :data:`LAMB`, its kernels' outputs first given to
    ``spoil`` (a wrong answer, made on purpose): the exit status and the check's lines."""
    import heron.cli.run as run_command

    if spoil is not None:
        original = run_command._run_on_device

        def spoiled(*args, **kwargs):
            leaves, ran = original(*args, **kwargs)
            return spoil([leaf.copy() for leaf in leaves]), ran

        monkeypatch.setattr(run_command, "_run_on_device", spoiled)
    hlo, inputs = DATA / f"{LAMB}.hlo", DATA / f"{LAMB}.npz"
    code = main(["run", str(hlo), "--inputs", str(inputs), "--backend", "interpreter", "--check"])
    out, err = capsys.readouterr()
    assert err == "", err
    return code, out.split("check against the reference evaluator")[1]


def test_heron_run_check_accepts_a_lamb_step_on_noise_a_batch_mean_leaves(monkeypatch, capsys):
    """The thirteenth sweep: the kernels' bias is 0.0033 from the reference's on steps of
    0.003 (the random roundings spread over 0.004), where no decision changes and the
    error propagation moves the square roots and divisions after the sum only. Which
    rule accepts it depends on the kernels: since the cost model follows XLA's for
    small kernels (session 53) the batch's sums run in kernels whose own order the
    reassociation bounds cover; before, only the reference's random roundings did."""
    code, check = _lamb_run(monkeypatch, capsys)
    assert code == 0, check
    bias = next(line for line in check.splitlines() if line.startswith("  out1"))
    assert (
        "random roundings of the reference, which sum in other orders" in bias
        or "reassociation bounds" in bias
    ), bias


def _far_bias(leaves: list) -> list:
    leaves[1][2] += np.float32(0.05)  # a dozen times the bias's spread under rounding
    return leaves


def _weight_off_by_3_percent(leaves: list) -> list:
    leaves[0][5] *= np.float32(1.03)
    return leaves


@pytest.mark.parametrize(
    ("spoil", "output"), [(_far_bias, "out1"), (_weight_off_by_3_percent, "out0")]
)
def test_a_wrong_answer_to_the_lamb_step_is_still_refused(monkeypatch, capsys, spoil, output):
    code, check = _lamb_run(monkeypatch, capsys, spoil)
    assert code == 1, check
    line = next(line for line in check.splitlines() if line.startswith(f"  {output} "))
    assert "outside the tolerance" in line, check
    assert "DISAGREE" in check


#: x * 0.1 + x * x with no sum: exact ops, compared bitwise.
ELEMENTWISE = """\
HloModule elementwise

ENTRY main {
  x = f32[8] parameter(0)
  tenth = f32[] constant(0.1)
  tenths = f32[8] broadcast(tenth), dimensions={}
  scaled = f32[8] multiply(x, tenths)
  squared = f32[8] multiply(x, x)
  ROOT out = f32[8] add(scaled, squared)
}
"""


def test_the_spread_of_values_is_only_for_outputs_a_reordered_sum_reaches():
    """An output no sum in the kernels' order reaches keeps its exact comparison: random
    rounding moves every inexact op, and heron's kernels round them as the reference."""
    module = parse_module(ELEMENTWISE)
    arguments = [np.linspace(-1, 1, 8, dtype=np.float32)]
    (tolerance,) = output_tolerances(module, {}, arguments, None, tf32=False, written=module)
    (reference,) = flatten_literal(evaluate_module(module, arguments))
    assert tolerance.rounding is None
    one_ulp = np.nextafter(reference, np.float32(np.inf))
    assert not compare(one_ulp, reference, tolerance).agrees


def test_a_nan_that_rounding_decides_is_accepted_and_said_so():
    """sqrt(1.05 - total) after the accumulating loop: a number after the reference's ten
    trips, NaN after the eleven that some roundings take. A kernel's NaN there is
    accepted (as XLA:CPU's or any correct compiler's could be), and the report says so
    rather than leaving "max |difference| inf" beside "agree" (the fifteenth sweep's
    jax-galsim gradient read as a wrong answer let through)."""
    text = ACCUMULATE.replace("STEP", "0.1").replace(
        "  ROOT out = (s32[], f32[]) tuple(trips, total)",
        """  limit = f32[] constant(1.05)
  room = f32[] subtract(limit, total)
  root = f32[] sqrt(room)
  ROOT out = (s32[], f32[]) tuple(trips, root)""",
    )
    module = parse_module(text)
    arguments = [np.asarray(np.float32(0))]
    _, tolerance = output_tolerances(module, {}, arguments, None, tf32=False, written=module)
    _, reference = flatten_literal(evaluate_module(module, arguments))
    assert np.isfinite(reference)
    result = compare(np.asarray(np.float32("nan")), reference, tolerance)
    assert result.agrees, result.summary
    assert "1 of 1 NaN where the reference has a number, first at ()" in result.summary
    assert "random roundings of the reference give there" in result.summary
    # a NaN no rounding gives is refused: the same loop with exact steps
    exact = parse_module(text.replace("0.1", "0.25"))
    _, exact_tolerance = output_tolerances(exact, {}, arguments, None, tf32=False, written=exact)
    _, exact_reference = flatten_literal(evaluate_module(exact, arguments))
    refused = compare(np.asarray(np.float32("nan")), exact_reference, exact_tolerance)
    assert not refused.agrees
    assert "NaN against a number" in refused.summary
