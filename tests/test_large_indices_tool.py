"""tests/fuzz/large_indices.py, the check of kernels over 2^31 elements, kept working in CI
at small sizes: its cases parse, and its comparison finds a right kernel right and a
kernel whose sampled blocks skip the last element wrong."""

from __future__ import annotations

import sys
from pathlib import Path

import numpy as np
import pytest

FUZZ_ROOT = Path(__file__).resolve().parent / "fuzz"
if str(FUZZ_ROOT) not in sys.path:
    sys.path.insert(0, str(FUZZ_ROOT))

import large_indices  # noqa: E402

from heron.hlo.parser import parse_module  # noqa: E402
from heron.runtime.interpreter.device import InterpreterDevice  # noqa: E402
from heron.target import Target  # noqa: E402

SMALL_SUM = large_indices.Case(
    f"""HloModule m
{large_indices._ADD}
ENTRY e {{ p = u8[3,70000] parameter(0) z = u8[] constant(0)
  ROOT r = u8[3] reduce(p, z), dimensions={{1}}, to_apply=add }}""",
    ((3, 70000),),
)


@pytest.mark.parametrize("name", sorted(large_indices.CASES))
def test_each_case_is_a_module_past_two_to_the_31_elements(name):
    case = large_indices.CASES[name]
    module = parse_module(case.hlo)
    largest = max(
        inst.shape.num_elements for inst in module.entry.instructions if not inst.shape.is_tuple
    )
    assert largest > 2**31
    assert [tuple(p.shape.dims) for p in module.entry.parameters] == list(case.shapes)


def test_a_right_program_is_found_right(capsys):
    target = Target.preset("h100")
    device = InterpreterDevice(sampled_blocks=2, count_accesses=False)
    assert large_indices.run_case("small_sum", SMALL_SUM, device, target)
    assert "0 wrong" in capsys.readouterr().out


def test_a_wrong_formula_is_found_wrong(capsys):
    target = Target.preset("h100")
    device = InterpreterDevice(sampled_blocks=2, count_accesses=False)
    case = large_indices.Case(
        large_indices.CASES["elementwise"].hlo.replace(str(large_indices.N), "100000"),
        ((100000,),),
        lambda arguments, at: arguments[0][at] + np.uint8(4),  # the program adds 3
    )
    assert not large_indices.run_case("off_by_one", case, device, target)
    assert "first wrong at" in capsys.readouterr().out
