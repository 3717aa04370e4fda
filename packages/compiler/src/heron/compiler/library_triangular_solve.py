"""The ``triangular-solve-rewriter`` pass: HLO's ``triangular-solve`` becomes a library call.

No heron emitter computes a triangular solve (a substitution is a loop of
dependent steps, not one elementwise kernel). XLA:GPU hands it to cuBLAS's
``trsm`` through a custom call (its TriangularSolveRewriter); heron does the
same with its own target ``__heron$triangular_solve``
(:mod:`heron.hlo.custom_calls.triangular_solve`), whose host implementation
runs it today between the device's kernels. jax emits the op for
``jnp.linalg.solve`` and ``inv`` lowered for a GPU (after cuSOLVER's LU) and for
``jax.scipy.linalg.solve_triangular``.
"""

from __future__ import annotations

from heron.hlo.attributes import QuotedString
from heron.hlo.custom_calls.triangular_solve import TARGET, TRANSPOSES, backend_config
from heron.hlo.errors import UnsupportedError
from heron.hlo.ir import Instruction, Module
from heron.hlo.passes.manager import HloPass
from heron.hlo.passes.rewrite import Inserter, rewrite_each
from heron.target import Target

__all__ = ["rewrite_triangular_solves", "triangular_solve_rewriter"]


def _call(inserter: Inserter, solve: Instruction) -> Instruction:
    attributes = solve.attributes
    transpose = attributes.get("transpose_a", "NO_TRANSPOSE")
    if transpose not in TRANSPOSES:
        raise UnsupportedError(
            f"triangular-solve '{solve.name}': transpose_a={transpose} is none of"
            f" {', '.join(TRANSPOSES)}",
            solve.location,
        )
    config = backend_config(
        left_side=bool(attributes.get("left_side", False)),
        lower=bool(attributes.get("lower", False)),
        unit_diagonal=bool(attributes.get("unit_diagonal", False)),
        transpose_a=str(transpose),
    )
    return inserter.add(
        "custom-call",
        solve.shape,
        solve.operands,
        {"custom_call_target": QuotedString(TARGET), "backend_config": QuotedString(config)},
        like=solve,
    )


def rewrite_triangular_solves(module: Module) -> bool:
    """Every ``triangular-solve`` of ``module`` becomes ``__heron$triangular_solve``."""
    return rewrite_each(module, "triangular-solve", _call)


def triangular_solve_rewriter(target: Target) -> HloPass:
    """The ``triangular-solve-rewriter`` pass (the same for every target: the host runs it)."""
    del target
    return HloPass(
        "triangular-solve-rewriter",
        rewrite_triangular_solves,
        "a triangular-solve becomes heron's library call (XLA's TriangularSolveRewriter)",
    )
