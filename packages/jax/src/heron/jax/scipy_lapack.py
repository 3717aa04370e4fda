"""The LAPACK routines jax's own kernels call, as scipy binds them, in the operand's type.

jaxlib takes its CPU LAPACK (``lapack_?geev_ffi``, ``lapack_?sytrd_ffi``, ...)
and the LAPACK behind its GPU "hybrid" host kernels (``cuhybrid_eig_*``,
``cuhybrid_geqp3``) from ``scipy.linalg.cython_lapack``; ``scipy.linalg.lapack``
binds the same library. So a routine called here with the operand's own type
(``sgeev`` for f32, not ``dgeev`` and a rounding) and the optimal workspace
computes exactly what jax computes: heron's host versions of those calls match
jax on the CPU bit for bit rather than to a tolerance. :func:`check_matrices` is the
operand check every linear-algebra target of heron-jax shares.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import numpy as np

from heron.hlo.custom_calls.call import CustomCall

__all__ = ["LETTERS", "check_dtype", "check_matrices", "routine", "workspace"]

#: LAPACK's type letter of each element type jax's solvers take.
LETTERS = {
    np.dtype(np.float32): "s",
    np.dtype(np.float64): "d",
    np.dtype(np.complex64): "c",
    np.dtype(np.complex128): "z",
}


def check_dtype(call: CustomCall, array: np.ndarray, what: str, *, real_only: bool = False) -> None:
    """Refuse, naming the call, an operand of a type the routine has no LAPACK version of."""
    allowed = [t for t in LETTERS if not (real_only and t.kind == "c")]
    if array.dtype not in allowed:
        names = ", ".join(t.name for t in allowed)
        raise call.error(f"takes {what} of {names}, not {array.dtype}{list(array.shape)}")


def routine(name: str, dtype: np.dtype, *, complex_name: str | None = None) -> Callable[..., Any]:
    """scipy's binding of LAPACK's ``?name`` for ``dtype`` (``complex_name`` for c and z
    where LAPACK names the complex routine otherwise: ``sytrd``/``hetrd``)."""
    # imported when a routine runs: loading the custom-call plugins (every compile of a
    # module with a custom call does) must not import scipy's LAPACK
    import scipy.linalg.lapack as lapack

    letter = LETTERS[np.dtype(dtype)]
    base = complex_name if complex_name is not None and letter in "cz" else name
    return getattr(lapack, letter + base)


def workspace(work: Any) -> int:
    """The optimal ``lwork`` a workspace query reported (its ``work[0]``, a ``*_lwork``
    binding's first result or the ``work`` of a call with ``lwork=-1``): what jax's
    kernels query and allocate, and a blocked routine's rounding depends on it."""
    return max(1, int(np.real(np.ravel(work)[0])))


def check_matrices(call: CustomCall, array: np.ndarray, dtype, *, square: bool) -> None:
    """Refuse, naming the call, an operand that is not a batch of (square) ``dtype`` matrices."""
    if array.dtype != dtype:
        raise call.error(f"takes {np.dtype(dtype).name} matrices, not {array.dtype}")
    if array.ndim < 2 or (square and array.shape[-1] != array.shape[-2]):
        kind = "square matrices" if square else "matrices"
        raise call.error(f"takes {kind}, not {list(array.shape)}")
