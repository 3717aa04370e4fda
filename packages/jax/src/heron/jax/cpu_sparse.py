"""jax's CPU sparse call: a CSR matrix times a dense vector or matrix, on the host.

``jax.experimental.sparse.BCSR`` lowered for the CPU (heron's interpreter) makes
``A @ x`` the typed-FFI call ``cpu_csr_sparse_dense_ffi(data, indptr, indices, x)``
(``jax/experimental/sparse/_lowerings.py``, ``_csr_spmm_cpu_lowering``) where the
matrix is two-dimensional with no batch or dense dimensions, the dot canonical,
``data`` and ``x`` of one type (s32, s64, f32, f64, c64, c128) and the index
arrays of one integer type; jax lowers every other ``bcsr_dot_general`` to plain
HLO. The contract:

- ``data [nnz]``, ``indptr [rows + 1]`` (row ``r``'s entries are
  ``indptr[r]:indptr[r + 1]``), ``indices [nnz]`` (their columns), and ``x``:
  ``[cols]`` or ``[cols, n]``;
- the result ``[rows]`` or ``[rows, n]``: ``sum_j data[j] * x[indices[j]]`` over
  row ``r``'s entries, summed in entry order from zero (XLA:CPU's kernel is
  Eigen's sparse-dense product, which adds each row's products in that order),
  in the data's type (integers wrap).

Indices out of the matrix or an ``indptr`` that is not a non-decreasing run from 0
to at most ``nnz`` are refused with an error naming the call, not read out of
bounds.
"""

from __future__ import annotations

import numpy as np

from heron.hlo.custom_calls.call import CustomCall
from heron.hlo.custom_calls.hookspecs import CustomCallSpec

__all__ = ["CSR_SPARSE_DENSE", "cpu_sparse_specs", "csr_sparse_dense"]

CSR_SPARSE_DENSE = "cpu_csr_sparse_dense_ffi"

_VALUE_TYPES = tuple(
    np.dtype(t) for t in (np.int32, np.int64, np.float32, np.float64, np.complex64, np.complex128)
)


def csr_sparse_dense(operands: tuple[np.ndarray, ...], call: CustomCall) -> np.ndarray:
    """``A @ x`` for the CSR matrix ``A`` (see the module's doc)."""
    if len(operands) != 4:
        raise call.error(f"takes data, indptr, indices and x, given {len(operands)} operands")
    data, indptr, indices, x = operands
    if data.ndim != 1 or indptr.ndim != 1 or indices.ndim != 1 or x.ndim not in (1, 2):
        shapes = ", ".join(str(list(o.shape)) for o in operands)
        raise call.error(f"takes vectors data, indptr, indices and a vector or matrix x: {shapes}")
    if data.dtype not in _VALUE_TYPES or x.dtype != data.dtype:
        raise call.error(f"data {data.dtype} and x {x.dtype}: one of s32, s64, f32, f64, c64, c128")
    if indptr.dtype != indices.dtype or indptr.dtype not in (np.int32, np.int64):
        raise call.error(f"indptr {indptr.dtype} and indices {indices.dtype}: one of s32, s64")
    (result_shape,) = call.result_shapes
    rows, nnz, cols = len(indptr) - 1, len(data), x.shape[0]
    expected = (rows, *x.shape[1:])
    if tuple(result_shape.dims) != expected or len(indices) != nnz:
        raise call.error(
            f"a [{rows} x {cols}] matrix of {nnz} entries ({len(indices)} indices) times"
            f" x{list(x.shape)} is {list(expected)}, declared {list(result_shape.dims)}"
        )
    starts = indptr.astype(np.int64)
    if rows < 0 or starts[0] != 0 or np.any(np.diff(starts) < 0) or starts[-1] > nnz:
        raise call.error(f"indptr {indptr.tolist()} is no run of row starts over {nnz} entries")
    columns = indices[: starts[-1]].astype(np.int64)
    if np.any((columns < 0) | (columns >= cols)):
        raise call.error(f"an index of {indices.tolist()} is outside the matrix's {cols} columns")
    lengths = np.diff(starts)
    result = np.zeros(expected, dtype=data.dtype)
    with np.errstate(over="ignore"):
        # The t-th entry of every row at once: each row's products added in entry order.
        for t in range(int(lengths.max(initial=0))):
            having = np.nonzero(lengths > t)[0]
            entries = starts[having] + t
            scale = data[entries]
            products = (
                scale[:, None] * x[columns[entries]] if x.ndim == 2 else scale * x[columns[entries]]
            )
            result[having] = result[having] + products
    return result


def cpu_sparse_specs() -> list[CustomCallSpec]:
    """The target of this module (registered by :mod:`heron.jax.lapack`'s hook)."""
    return [
        CustomCallSpec(
            target=CSR_SPARSE_DENSE,
            host=csr_sparse_dense,
            description="jax's CPU CSR sparse-dense product (BCSR @ x), on the host",
        )
    ]
