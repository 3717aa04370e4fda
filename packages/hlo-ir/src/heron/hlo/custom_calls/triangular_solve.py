"""``__heron$triangular_solve``: HLO's ``triangular-solve``, as a host custom call.

XLA:GPU hands a ``triangular-solve`` to cuBLAS's ``trsm`` (its
TriangularSolveRewriter makes it the custom call ``__cublas$triangularSolve``);
no heron emitter computes one, so the compiler's ``triangular-solve-rewriter``
makes it this call, which runs on the host until a device implementation
exists. jax emits the op for ``jnp.linalg.solve`` and ``inv`` lowered for a GPU,
and for ``jax.scipy.linalg.solve_triangular`` there.

The call has the instruction's operands ``a`` (a batch of square matrices) and
``b``, its result shape, and the op's attributes as JSON in ``backend_config``:
``{"left_side": true, "lower": true, "unit_diagonal": false, "transpose_a":
"NO_TRANSPOSE"}`` (``TRANSPOSE``, ``ADJOINT``). It solves ``op(a) x = b``
(``left_side``) or ``x op(a) = b``, reading only a's ``lower`` (or upper)
triangle and taking its diagonal as ones where ``unit_diagonal``: exactly the
op's semantics. :func:`solve` is substitution in the operand's precision
(narrower floats in f32, rounded back), also what :mod:`heron.jax.lapack`'s
``lapack_?trsm_ffi`` runs.
"""

from __future__ import annotations

import json

import numpy as np

from heron.hlo.custom_calls.call import CustomCall
from heron.hlo.custom_calls.hookspecs import CustomCallSpec, hookimpl

__all__ = ["TARGET", "TRANSPOSES", "backend_config", "host", "solve", "triangular_solve"]

TARGET = "__heron$triangular_solve"
#: HLO's transpose_a -> the BLAS letter ``solve`` takes.
TRANSPOSES = {"NO_TRANSPOSE": "N", "TRANSPOSE": "T", "ADJOINT": "C"}


def backend_config(*, left_side: bool, lower: bool, unit_diagonal: bool, transpose_a: str) -> str:
    """The call's ``backend_config``: the op's attributes, as JSON."""
    return json.dumps(
        {
            "left_side": left_side,
            "lower": lower,
            "unit_diagonal": unit_diagonal,
            "transpose_a": transpose_a,
        },
        sort_keys=True,
    )


def solve(
    a: np.ndarray, b: np.ndarray, *, left: bool, lower: bool, trans: str, unit: bool
) -> np.ndarray:
    """One ``?trsm`` with alpha 1: X with ``op(A) X = B`` (left) or ``X op(A) = B``;
    ``trans`` is ``N``, ``T`` or ``C``; only A's ``lower`` (or upper) triangle is read."""
    t = np.tril(a) if lower else np.triu(a)
    if unit:
        np.fill_diagonal(t, 1)
    if trans == "T":
        t, lower = t.T, not lower
    elif trans == "C":
        t, lower = t.conj().T, not lower
    if not left:  # X T = B  <=>  T^T X^T = B^T
        return solve(t.T, b.T, left=True, lower=not lower, trans="N", unit=False).T
    x = np.array(b, copy=True)
    n = t.shape[0]
    rows = range(n) if lower else range(n - 1, -1, -1)
    with np.errstate(divide="ignore", invalid="ignore"):  # singular: inf and NaN, as trsm
        for i in rows:
            done = slice(0, i) if lower else slice(i + 1, n)
            x[i] = (x[i] - t[i, done] @ x[done]) / t[i, i]
    return x


def _attributes(call: CustomCall) -> dict[str, object]:
    try:
        config = json.loads(call.backend_config)
    except json.JSONDecodeError as error:
        raise call.error(f"backend_config is not JSON: {error}") from None
    flags = ("left_side", "lower", "unit_diagonal")
    if (
        not isinstance(config, dict)
        or any(not isinstance(config.get(flag), bool) for flag in flags)
        or config.get("transpose_a") not in TRANSPOSES
    ):
        raise call.error(
            f"backend_config {call.backend_config!r} is not {{left_side, lower, unit_diagonal:"
            f" true or false, transpose_a: one of {', '.join(TRANSPOSES)}}}"
        )
    return config


def triangular_solve(
    a: np.ndarray,
    b: np.ndarray,
    *,
    left_side: bool,
    lower: bool,
    unit_diagonal: bool,
    transpose_a: str,
) -> np.ndarray:
    """HLO's ``triangular-solve`` of ``a`` and ``b`` with these attributes, batched over
    their leading dimensions: the op's one meaning, which the reference evaluator and
    this call's host implementation both compute. Raises ValueError for operands the op
    does not take."""
    if a.dtype != b.dtype or a.dtype.kind not in "fcV" or a.ndim < 2 or a.ndim != b.ndim:
        raise ValueError(f"takes a and b of one float type, not {a.dtype} and {b.dtype}")
    size = b.shape[-2] if left_side else b.shape[-1]
    if a.shape[-1] != a.shape[-2] or a.shape[-1] != size or a.shape[:-2] != b.shape[:-2]:
        raise ValueError(f"a {list(a.shape)} does not fit b {list(b.shape)}")
    if transpose_a not in TRANSPOSES:
        raise ValueError(f"transpose_a={transpose_a} is none of {', '.join(TRANSPOSES)}")
    # f16, bf16 (ml_dtypes, kind 'V') are solved in f32 and rounded back
    work = a.dtype if a.dtype.kind == "c" or a.dtype.itemsize >= 4 else np.dtype(np.float32)
    x = np.empty(b.shape, work)
    for index in np.ndindex(*b.shape[:-2]):
        x[index] = solve(
            a[index].astype(work),
            b[index].astype(work),
            left=left_side,
            lower=lower,
            trans=TRANSPOSES[transpose_a],
            unit=unit_diagonal,
        )
    return x.astype(b.dtype)


def host(operands: tuple[np.ndarray, ...], call: CustomCall) -> np.ndarray:
    """The call's host implementation (the module docstring): :func:`triangular_solve`."""
    a, b = operands
    config = _attributes(call)
    try:
        return triangular_solve(
            a,
            b,
            left_side=bool(config["left_side"]),
            lower=bool(config["lower"]),
            unit_diagonal=bool(config["unit_diagonal"]),
            transpose_a=str(config["transpose_a"]),
        )
    except ValueError as error:
        raise call.error(str(error)) from None


@hookimpl
def heron_custom_call_specs() -> list[CustomCallSpec]:
    return [
        CustomCallSpec(
            target=TARGET,
            host=host,
            description="HLO's triangular-solve, which cuBLAS's trsm computes (heron's own"
            " custom call)",
        )
    ]
