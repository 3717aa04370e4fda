"""Fixtures of heron.report's tests: three corpus programs, each reported once per session.

The programs (``programs/<name>/module.hlo``, pre-optimization HLO as JAX
prints it) cover a single row kernel (softmax), a transpose, a row
normalisation and a GEMM (attention), and a while loop with a reduction in
its condition (while_loop_collatz).
"""

from __future__ import annotations

from pathlib import Path

import pytest

from heron.hlo.parser import parse_module_file
from heron.hlo.verifier import verify_module
from heron.report import Built, build_report
from heron.target import Target

PROGRAMS = Path(__file__).resolve().parents[3] / "programs"
REPORTED = ("softmax", "attention", "while_loop_collatz")

_built: dict[str, Built] = {}


def report_of(name: str) -> Built:
    """The page of ``programs/<name>`` for the default Target (built once per session)."""
    if name not in _built:
        path = PROGRAMS / name / "module.hlo"
        if not path.is_file():
            pytest.fail(f"{path} is missing: the program corpus is part of the repository")
        module = parse_module_file(path)
        verify_module(module)
        _built[name] = build_report(
            module, Target.resolve(None, None), source=str(path), compare_with_xla=False
        )
    return _built[name]


@pytest.fixture(params=REPORTED)
def built(request) -> Built:
    """The page of each of the three programs."""
    return report_of(request.param)


@pytest.fixture
def loop_report() -> Built:
    """The page of the program with a while loop."""
    return report_of("while_loop_collatz")
