"""GEMM library calls on ROCm through hipBLAS (``hip.hipblas``, rocm-bindings-libraries).

The contract is :mod:`heron.runtime.core.gemm`: row-major ``lhs [batch, m, k]``,
``rhs [batch, k, n]``, ``out [batch, m, n]``. hipBLAS is column-major, and a
row-major ``X [r, c]`` is the column-major ``X^T [c, r]`` with the same bytes,
so heron computes ``out^T = rhs^T lhs^T`` by swapping the operands:
``hipblasGemmStridedBatchedEx(handle, N, N, n, m, k, alpha, rhs, n, k*n, lhs,
k, m*k, beta, out, n, m*n, batch, computeType, HIPBLAS_GEMM_DEFAULT)``.

hipBLAS's GEMM has no epilogue: a call with a bias, a residual, an activation
or a transposed operand is not offered (heron's kernel computes it). The compute type is XLA's:
``HIPBLAS_COMPUTE_32F`` for f32, f16 and bf16 inputs, ``_64F`` for f64,
``_32F`` / ``_64F`` for c64 / c128 (complex scalars), ``_32I`` for s8 (alpha
and beta on the host in that type). hipBLAS is put on
the device's stream (``hipblasSetStream``) before each call, so that calls
are ordered with the kernels and captured into graphs.

:func:`plan` computes every argument value from the call alone (what the
tests compare with the contract on a stand-in for the bindings).
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import attrs
import numpy as np

from heron.runtime.core.device import DeviceError
from heron.runtime.core.gemm import (
    LIBRARY_FEATURES,
    GemmCall,
    call_features,
    library_computes,
)
from heron.runtime.core.gpu_device import Library

__all__ = ["COMPUTE_TYPES", "DATA_TYPES", "HipBlas", "HipBlasPlan", "plan"]

#: HLO element type -> ``hipDataType`` name.
DATA_TYPES = {
    "f16": "HIP_R_16F",
    "bf16": "HIP_R_16BF",
    "f32": "HIP_R_32F",
    "f64": "HIP_R_64F",
    "c64": "HIP_C_32F",
    "c128": "HIP_C_64F",
    "s8": "HIP_R_8I",
    "s32": "HIP_R_32I",
}
#: accumulation type -> (``hipblasComputeType_t`` name, the scalars' type).
COMPUTE_TYPES = {
    "f32": ("HIPBLAS_COMPUTE_32F", "f32"),
    "f64": ("HIPBLAS_COMPUTE_64F", "f64"),
    "c64": ("HIPBLAS_COMPUTE_32F", "c64"),
    "c128": ("HIPBLAS_COMPUTE_64F", "c128"),
    "s32": ("HIPBLAS_COMPUTE_32I", "s32"),
}
_SCALARS = {
    "f32": np.float32,
    "f64": np.float64,
    "c64": np.complex64,
    "c128": np.complex128,
    "s32": np.int32,
}


@attrs.frozen
class HipBlasPlan:
    """The arguments of one ``hipblasGemmStridedBatchedEx`` (column-major, operands swapped)."""

    m: int  #: hipBLAS's m: the contract's n
    n: int  #: hipBLAS's n: the contract's m
    k: int
    a_type: str
    lda: int
    stride_a: int
    b_type: str
    ldb: int
    stride_b: int
    c_type: str
    ldc: int
    stride_c: int
    batch_count: int
    compute_type: str
    scalar_type: str
    #: the contract's argument positions of hipBLAS's A, B and C
    a_argument: int = 1
    b_argument: int = 0
    c_argument: int = 2


def expressible(call: GemmCall) -> bool:
    """Whether hipBLAS's GEMM, as :func:`plan` calls it, computes ``call``: what the GEMM
    contract says hipBLAS computes (``LIBRARY_FEATURES["hipblas"]`` of
    :mod:`heron.runtime.core.gemm`, the table the compiler matches by: alpha, no epilogue,
    no C besides the output, operands as stored). A narrowed ``compute`` (TF32) is
    computed in full f32, which is within its bounds."""
    return library_computes(HipBlas.name, call)


def plan(call: GemmCall) -> HipBlasPlan:
    """The hipBLAS arguments computing ``call`` (see the module docstring)."""
    if not expressible(call):
        raise DeviceError(f"hipBLAS cannot compute {call.describe()} (no epilogues)")
    compute, scalar = COMPUTE_TYPES[call.accumulation]
    return HipBlasPlan(
        m=call.n,
        n=call.m,
        k=call.k,
        a_type=DATA_TYPES[call.rhs_type],
        lda=call.n,
        stride_a=call.k * call.n,
        b_type=DATA_TYPES[call.lhs_type],
        ldb=call.k,
        stride_b=call.m * call.k,
        c_type=DATA_TYPES[call.out_type],
        ldc=call.n,
        stride_c=call.m * call.n,
        batch_count=call.batch,
        compute_type=compute,
        scalar_type=scalar,
    )


class HipBlas(Library):
    """hipBLAS on one device: a handle. ``bindings`` is ``hip.hipblas``, ``data_types``
    ``hip.hip.hipDataType`` (the tests pass stand-ins)."""

    name = "hipblas"

    def __init__(self, *, bindings: Any = None, data_types: Any = None) -> None:
        if bindings is None:
            try:
                from hip import hipblas as bindings
            except ImportError as exc:
                raise DeviceError(
                    f"hipBLAS needs rocm-bindings-libraries (hip-python[libraries]): {exc}"
                ) from exc
        if data_types is None:
            from hip import hip

            data_types = hip.hipDataType
        self._blas = bindings
        self._types = data_types
        self.handle = self._call("hipblasCreate")
        #: host scalars by call (alive while the library is: a captured call reads them)
        self._scalars: dict[GemmCall, tuple[np.ndarray, np.ndarray]] = {}

    def _call(self, name: str, *arguments: Any) -> Any:
        try:
            result = getattr(self._blas, name)(*arguments)
        except Exception as exc:  # the library cannot be loaded
            raise DeviceError(f"hipBLAS: {name} failed: {exc}") from exc
        status, *values = result if isinstance(result, tuple) else (result,)
        if int(status) != 0:
            raise DeviceError(f"hipBLAS: {name} failed: {getattr(status, 'name', status)}")
        return values[0] if len(values) == 1 else (tuple(values) or None)

    def offers(self, call: Any) -> bool:
        return isinstance(call, GemmCall) and expressible(call)

    def refusal(self, call: Any) -> str:
        if not isinstance(call, GemmCall):
            return f"hipBLAS computes GEMMs only, not {call!r}"
        missing = sorted(call_features(call) - LIBRARY_FEATURES[self.name])
        return f"hipBLAS's GEMM computes no {', '.join(missing)} (it has no epilogue)"

    def run(self, call: Any, addresses: Sequence[int], stream: Any) -> None:
        chosen = plan(call)
        scalars = self._scalars.get(call)
        if scalars is None:
            dtype = _SCALARS[chosen.scalar_type]
            scalars = self._scalars[call] = (
                np.array([call.scale], dtype),
                np.array([call.beta], dtype),
            )
        alpha, beta = scalars
        blas, types = self._blas, self._types
        operation = blas.hipblasOperation_t.HIPBLAS_OP_N
        self._call("hipblasSetStream", self.handle, stream)
        self._call(
            "hipblasGemmStridedBatchedEx",
            self.handle,
            operation,
            operation,
            chosen.m,
            chosen.n,
            chosen.k,
            alpha.ctypes.data,
            addresses[chosen.a_argument],
            getattr(types, chosen.a_type),
            chosen.lda,
            chosen.stride_a,
            addresses[chosen.b_argument],
            getattr(types, chosen.b_type),
            chosen.ldb,
            chosen.stride_b,
            beta.ctypes.data,
            addresses[chosen.c_argument],
            getattr(types, chosen.c_type),
            chosen.ldc,
            chosen.stride_c,
            chosen.batch_count,
            getattr(blas.hipblasComputeType_t, chosen.compute_type),
            blas.hipblasGemmAlgo_t.HIPBLAS_GEMM_DEFAULT,
        )
