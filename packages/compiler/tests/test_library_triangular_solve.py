"""HLO's triangular-solve runs as heron's library call ``__heron$triangular_solve``.

No emitter computes the op: the ``triangular-solve-rewriter`` pass makes it a
custom call (as XLA:GPU makes it cuBLAS's trsm), carrying its attributes, whose
host implementation solves exactly the op's system; a compiled program then has
a custom-call thunk where the op was and computes the solve on the interpreter.
"""

from __future__ import annotations

import itertools

import numpy as np
import pytest

from heron.compiler import Target
from heron.compiler.executable import compile_program
from heron.compiler.library_triangular_solve import rewrite_triangular_solves
from heron.hlo.custom_calls.call import CustomCall, CustomCallError
from heron.hlo.custom_calls.triangular_solve import TARGET, backend_config, host
from heron.hlo.parser import parse_module
from heron.hlo.shapes import TupleShape

MODULE = """HloModule solve
ENTRY main {{
  a = f64[2,3,3] parameter(0)
  b = f64[2,{b}] parameter(1)
  ROOT x = f64[2,{b}] triangular-solve(a, b), left_side={left}, lower={lower},
    unit_diagonal={unit}, transpose_a={transpose}
}}
"""

CASES = list(
    itertools.product(
        [True, False], [True, False], [True, False], ["NO_TRANSPOSE", "TRANSPOSE", "ADJOINT"]
    )
)


def _text(left, lower, unit, transpose) -> str:
    b = "3,2" if left else "2,3"
    flag = lambda v: "true" if v else "false"  # noqa: E731
    return MODULE.format(b=b, left=flag(left), lower=flag(lower), unit=flag(unit),
                         transpose=transpose)  # fmt: skip


def _expected(a, b, left, lower, unit, transpose):
    """The system the op means, solved densely by numpy."""
    t = np.tril(a) if lower else np.triu(a)
    if unit:
        t = t - np.diag(np.diag(t)) + np.eye(len(t))
    op = {"NO_TRANSPOSE": t, "TRANSPOSE": t.T, "ADJOINT": t.conj().T}[transpose]
    return np.linalg.solve(op, b) if left else np.linalg.solve(op.T, b.T).T


def _operands(left):
    rng = np.random.default_rng(0)
    a = rng.standard_normal((2, 3, 3)) + 4 * np.eye(3)
    b = rng.standard_normal((2, 3, 2) if left else (2, 2, 3))
    return a, b


def test_the_pass_makes_every_triangular_solve_the_library_call():
    module = parse_module(_text(True, True, False, "TRANSPOSE"))
    assert rewrite_triangular_solves(module)
    root = module.entry.root
    assert root.opcode == "custom-call" and root.attributes["custom_call_target"].text == TARGET
    assert root.attributes["backend_config"].text == backend_config(
        left_side=True, lower=True, unit_diagonal=False, transpose_a="TRANSPOSE"
    )
    assert not rewrite_triangular_solves(module)  # nothing left to rewrite


@pytest.mark.parametrize(("left", "lower", "unit", "transpose"), CASES)
def test_the_call_solves_the_op_s_system(left, lower, unit, transpose):
    a, b = _operands(left)
    config = backend_config(left_side=left, lower=lower, unit_diagonal=unit, transpose_a=transpose)
    call = CustomCall(TARGET, "x", "main", (), TupleShape(()), backend_config=config)
    x = host((a, b), call)
    for k in range(2):
        np.testing.assert_allclose(
            x[k], _expected(a[k], b[k], left, lower, unit, transpose), rtol=1e-12
        )


@pytest.mark.parametrize(("left", "lower", "unit", "transpose"), CASES[::3])
def test_a_compiled_program_solves_on_the_interpreter(left, lower, unit, transpose):
    from heron.runtime.core.executor import load_executable
    from heron.runtime.core.registry import default_backends

    module = parse_module(_text(left, lower, unit, transpose))
    program = compile_program(module, Target.preset("h100"), ("interpreter",))
    assert "custom_call" in [thunk.kind for thunk in program.artefact.program]
    device = default_backends().create_device("interpreter")
    executable = load_executable(program.artefact, device, "interpreter")
    a, b = _operands(left)
    (x,) = executable.run([a, b])
    for k in range(2):
        expected = _expected(a[k], b[k], left, lower, unit, transpose)
        np.testing.assert_allclose(x[k], expected, rtol=1e-12)


def test_a_malformed_backend_config_is_refused_by_name():
    call = CustomCall(TARGET, "x", "main", (), TupleShape(()), backend_config='{"lower": 1}')
    with pytest.raises(CustomCallError, match=r"__heron\$triangular_solve.*transpose_a"):
        host(_operands(True), call)
