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


def _accumulate(step: str):
    module = parse_module(ACCUMULATE.replace("STEP", step))
    arguments = [np.asarray(np.float32(0))]
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
    code = main(
        [
            "run",
            str(DATA / "levenberg_marquardt.hlo"),
            "--inputs",
            str(DATA / "levenberg_marquardt.npz"),
            "--backend",
            "interpreter",
            "--check",
        ]
    )
    out, err = capsys.readouterr()
    assert (code, err) == (0, ""), out
    assert "out1  1 of 1 elements differ (allowed: within the spread of 8 random" in out
