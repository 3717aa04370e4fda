"""GEMM library calls on CUDA through cuBLASLt (nvmath-python's ``nvmath.bindings.cublasLt``).

The contract is :mod:`heron.runtime.core.gemm`: row-major ``lhs [batch, m, k]``
(or ``[batch, k, m]``, read transposed), ``rhs [batch, k, n]`` (or
``[batch, n, k]``), ``out [batch, m, n]``, alpha, a C matrix with beta, a bias
over ``n`` and a RELU or GELU. cuBLASLt's matrices are column-major, and a
row-major ``X [r, c]`` is the column-major ``X^T [c, r]`` with the same
bytes, so heron asks for ``out^T = rhs^T lhs^T``: cuBLASLt's A is ``rhs``
(stored ``n x k``, leading dimension ``n``, op N; or, read transposed, stored
``k x n`` with ``k``, op T), its B is ``lhs`` (``k x m`` with ``k``, op N;
or ``m x k`` with ``m``, op T), its D is ``out`` (``n x m``, ``n``) and its C
the contract's ``c`` (else ``out``) in D's layout; every matrix of a batch
``rows * cols`` elements after the previous (``STRIDED_BATCH_OFFSET``,
``BATCH_COUNT``). cuBLASLt's bias epilogue adds a vector over D's rows, which
are ``out``'s columns: exactly the contract's bias over ``n``.

- Compute and scale types are XLA's (``GetBlasComputationType``):
  ``CUBLAS_COMPUTE_32F`` with f32 scales for f32, f16 and bf16 inputs,
  ``CUBLAS_COMPUTE_32F_FAST_TF32`` where the call's ``compute`` is ``tf32``
  (an f32 dot at default precision on sm_80+: :mod:`heron.hlo.dot_precision`),
  ``_FAST_16BF`` for ``bf16``, ``CUBLAS_COMPUTE_64F`` for f64,
  ``CUBLAS_COMPUTE_32F`` / ``_64F`` with complex scales for c64 / c128
  (``CUDA_C_32F`` / ``CUDA_C_64F`` matrices; the row-major swap below needs
  no conjugation),
  ``CUBLAS_COMPUTE_32I`` with s32 scales for s8 (which cuBLASLt runs only for
  layouts its IMMA kernels take: where the heuristic finds no algorithm,
  :meth:`CublasLt.offers` says no and heron's kernel runs).
- Epilogues: ``DEFAULT``, ``BIAS``, ``RELU``, ``RELU_BIAS``, ``GELU``,
  ``GELU_BIAS``, and with the contract's ``aux`` ``GELU_AUX`` /
  ``GELU_AUX_BIAS`` (the bias and aux pointers set on the descriptor before
  each call: the executor's views may move); ``BIAS_DATA_TYPE`` is the output
  type. The aux matrix (the GELU's argument, of the output type) is laid out
  as D: ``EPILOGUE_AUX_LD`` is D's leading dimension ``n``, and
  ``EPILOGUE_AUX_BATCH_STRIDE`` ``m * n`` with a batch. cuBLASLt wants that
  leading dimension (and batch stride) divisible by 8 (``cublasLtMatmulDescAttributes_t``,
  ``EPILOGUE_AUX_LD``): a call whose ``n`` is not is not offered
  (:func:`broken_rule` says why, heron-run prints it) and heron's kernel runs.
- Algorithms: once per call shape, when the executable is loaded (``offers``),
  never during a graph capture, ``cublasLtMatmulAlgoGetHeuristic`` (a
  preference of at most the workspace's bytes) is asked for up to
  :data:`HEURISTIC_CANDIDATES` algorithms, best first; each candidate is its
  ``cublasLtMatmulAlgo_t`` (:data:`ALGORITHM_BYTES` opaque bytes,
  :meth:`CublasLt.candidates`). A call runs the heuristic's first, unless it
  carries a tuning result (``GemmCall.tuning``, stored in the artefact by the
  autotuning pass, :mod:`~.autotune`) made for this library, this device
  (name and compute capability) and this cuBLASLt version
  (``cublasLtGetVersion``), whose algorithm ``cublasLtMatmulAlgoCheck`` accepts
  for the call's descriptors with at most the workspace's bytes: then that
  one. :meth:`CublasLt.algorithm` says which ran and why (the executor's
  ``LibraryChoice.algorithm``): ``heuristic's first of 8 candidates (tuned on
  another device: ...)``. The workspace is one device allocation made when the
  library is opened.

:func:`plan` computes every argument value from the call alone (what the
tests compare with the contract on a stand-in for the bindings).

- fp8 (XLA's ``__cublas$lt$matmul$f8``): ``CUDA_R_8F_E4M3`` / ``_E5M2``
  operands, ``CUBLAS_COMPUTE_32F``, the scales as device pointers set before
  each call: ``A_SCALE_POINTER`` is the contract's ``b_scale`` and
  ``B_SCALE_POINTER`` its ``a_scale`` (cuBLASLt's A is heron's rhs),
  ``D_SCALE_POINTER`` its ``d_scale`` (a scale the call does not have is left
  unset: cuBLASLt's default, 1); ``FAST_ACCUM`` where the call says
  ``fast_accum`` (as XLA sets it); with an fp8 D, C is described as bf16
  (cuBLASLt's fp8 type table: a 16-bit C beside an fp8 D; beta is 0, C is not
  read). cuBLASLt's fp8 kernels read A transposed and B not ("TN": heron's
  ``rhs [n, k]``, ``lhs [m, k]``, which the compiler arranges,
  :mod:`heron.compiler.library_gemm_fp8`) with m, n and k multiples of 16
  (XLA pads to that): :func:`broken_rule` refuses other calls, and heron's
  kernel runs.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import Any

import attrs
import numpy as np

from heron.runtime.core.device import DeviceError
from heron.runtime.core.gemm import FP8_TYPES, GEMM, GemmCall, GemmTuning
from heron.runtime.core.gpu_device import Library

__all__ = [
    "ALGORITHM_BYTES",
    "HEURISTIC_CANDIDATES",
    "COMPUTE_TYPES",
    "DATA_TYPES",
    "EPILOGUES",
    "WORKSPACE_BYTES",
    "ALWAYS_RUN_TYPES",
    "CublasLt",
    "always_runs",
    "broken_rule",
    "LtMatrix",
    "LtPlan",
    "plan",
]

#: HLO element type -> ``cudaDataType_t`` name (nvmath's ``CudaDataType``).
DATA_TYPES = {
    "f16": "CUDA_R_16F",
    "bf16": "CUDA_R_16BF",
    "f32": "CUDA_R_32F",
    "f64": "CUDA_R_64F",
    "c64": "CUDA_C_32F",
    "c128": "CUDA_C_64F",
    "s8": "CUDA_R_8I",
    "s32": "CUDA_R_32I",
    "f8e4m3fn": "CUDA_R_8F_E4M3",
    "f8e5m2": "CUDA_R_8F_E5M2",
}
#: (accumulation type, the call's ``compute``) -> (``cublasComputeType_t`` name, scale
#: type): XLA's choice.
COMPUTE_TYPES = {
    ("f32", ""): ("COMPUTE_32F", "f32"),
    ("f32", "tf32"): ("COMPUTE_32F_FAST_TF32", "f32"),
    ("f32", "bf16"): ("COMPUTE_32F_FAST_16BF", "f32"),
    ("f64", ""): ("COMPUTE_64F", "f64"),
    ("c64", ""): ("COMPUTE_32F", "c64"),
    ("c128", ""): ("COMPUTE_64F", "c128"),
    ("s32", ""): ("COMPUTE_32I", "s32"),
}
#: (bias, activation) -> ``cublasLtEpilogue_t`` name.
EPILOGUES = {
    (False, "none"): "DEFAULT",
    (True, "none"): "BIAS",
    (False, "relu"): "RELU",
    (True, "relu"): "RELU_BIAS",
    (False, "gelu"): "GELU",
    (True, "gelu"): "GELU_BIAS",
}
#: bias -> the ``cublasLtEpilogue_t`` name of a GELU that also writes its argument (aux).
AUX_EPILOGUES = {False: "GELU_AUX", True: "GELU_AUX_BIAS"}
#: What an aux matrix's leading dimension and batch stride must be a multiple of (elements).
AUX_ALIGNMENT = 8
#: What an fp8 GEMM's m, n and k must be multiples of (XLA pads its fp8 operands to it).
FP8_MULTIPLE = 16
#: The workspace cuBLASLt may use (XLA gives cuBLASLt 32 MiB on Hopper, 4 MiB before).
WORKSPACE_BYTES = 32 * 2**20
#: How many algorithms the heuristic is asked for per call shape: the first runs
#: untuned, all are what the autotuning pass times (XLA's GEMM autotuner asks
#: cuBLASLt's heuristic for several too; more rarely adds a faster one and costs
#: tuning time).
HEURISTIC_CANDIDATES = 8
#: ``sizeof(cublasLtMatmulAlgo_t)``: an algorithm is 8 opaque 64-bit words.
ALGORITHM_BYTES = 64
#: The library's name in a tuning result (``GemmTuning.library``).
LIBRARY_NAME = "cublasLt"


@attrs.frozen
class LtMatrix:
    """One ``cublasLtMatrixLayout_t``: column-major ``rows x cols``, leading dimension ``ld``."""

    role: str  #: which of the contract's arguments it is (``rhs``, ``lhs``, ``out``)
    data_type: str  #: a ``cudaDataType_t`` name
    rows: int
    cols: int
    ld: int
    batch_count: int
    batch_stride: int  #: elements from one matrix of the batch to the next


@attrs.frozen
class LtPlan:
    """Every argument value of one cuBLASLt matmul for a call (see the module docstring)."""

    compute_type: str
    scale_type: str  #: the HLO element type of alpha and beta
    transa: str
    transb: str
    epilogue: str
    bias_data_type: str | None
    a: LtMatrix
    b: LtMatrix
    c: LtMatrix
    d: LtMatrix
    #: argument position in the contract's order -> the matmul operand it is
    a_argument: int
    b_argument: int
    bias_argument: int | None
    c_argument: int
    out_argument: int
    #: the aux matrix (laid out as ``d``) and its argument, with a ``GELU_AUX`` epilogue
    aux: LtMatrix | None = None
    aux_argument: int | None = None
    #: fp8: the arguments holding cuBLASLt's A, B and D scales (None: 1)
    a_scale_argument: int | None = None
    b_scale_argument: int | None = None
    d_scale_argument: int | None = None
    #: fp8: ``FAST_ACCUM`` (the contract's ``fast_accum``)
    fast_accum: bool = False


def _stored(role: str, kind: str, rows: int, cols: int, batch: int, transposed: bool) -> LtMatrix:
    """The column-major matrix cuBLASLt reads as ``rows x cols`` after its op: stored so
    (op N), or stored ``cols x rows`` and read transposed (op T)."""
    if transposed:
        rows, cols = cols, rows
    return LtMatrix(role, DATA_TYPES[kind], rows, cols, rows, batch, rows * cols)


def plan(call: GemmCall) -> LtPlan:
    """The cuBLASLt arguments computing ``call`` (row-major through column-major, swapped)."""
    if call.operation != GEMM:
        raise DeviceError(f"cuBLASLt: no library call {call.operation!r}")
    compute, scale = COMPUTE_TYPES[(call.accumulation, call.compute)]
    a = _stored("rhs", call.rhs_type, call.n, call.k, call.batch, call.rhs_transposed)
    b = _stored("lhs", call.lhs_type, call.k, call.m, call.batch, call.lhs_transposed)
    d = _stored("out", call.out_type, call.n, call.m, call.batch, False)
    c = attrs.evolve(d, role="c") if call.residual else d
    if call.out_type in FP8_TYPES:  # a 16-bit C beside an fp8 D (never read: beta 0)
        c = attrs.evolve(c, role="c", data_type=DATA_TYPES["bf16"])
    epilogue = AUX_EPILOGUES[call.bias] if call.aux else EPILOGUES[(call.bias, call.activation)]
    return LtPlan(
        compute_type=compute,
        scale_type=scale,
        transa="CUBLAS_OP_T" if call.rhs_transposed else "CUBLAS_OP_N",
        transb="CUBLAS_OP_T" if call.lhs_transposed else "CUBLAS_OP_N",
        epilogue=epilogue,
        bias_data_type=DATA_TYPES[call.out_type] if call.bias else None,
        a=a,
        b=b,
        c=c,
        d=d,
        a_argument=call.argument("rhs"),
        b_argument=call.argument("lhs"),
        bias_argument=call.argument("bias"),
        c_argument=call.argument("c" if call.residual else "out"),
        out_argument=call.argument("out"),
        aux=attrs.evolve(d, role="aux") if call.aux else None,
        aux_argument=call.argument("aux"),
        a_scale_argument=call.argument("b_scale"),
        b_scale_argument=call.argument("a_scale"),
        d_scale_argument=call.argument("d_scale"),
        fast_accum=call.fast_accum,
    )


def broken_rule(call: GemmCall) -> str:
    """Which of cuBLASLt's rules ``call`` breaks ("" when none): the aux matrix's leading
    dimension (and batch stride), ``n`` in heron's swapped layout, must be a multiple of
    :data:`AUX_ALIGNMENT`."""
    if call.aux and call.n % AUX_ALIGNMENT:
        return (
            f"cuBLASLt's GELU_AUX needs the aux leading dimension (n = {call.n}) divisible by"
            f" {AUX_ALIGNMENT}"
        )
    if call.lhs_type in FP8_TYPES:
        if call.lhs_transposed or not call.rhs_transposed:
            return "cuBLASLt's fp8 GEMM reads lhs [m, k] and rhs [n, k] only (TN)"
        if any(size % FP8_MULTIPLE for size in (call.m, call.n, call.k)):
            return (
                f"cuBLASLt's fp8 GEMM needs m, n and k multiples of {FP8_MULTIPLE}"
                f" (m {call.m}, n {call.n}, k {call.k})"
            )
    return ""


#: Operand types whose GEMMs cuBLASLt runs in every layout, shape and alignment the
#: contract allows, with or without a bias, ReLU or GELU (its non-tensor-core kernels
#: take what its tensor-core ones refuse); complex GEMMs with their alpha and C matrix
#: (the contract gives them no other epilogue), as XLA:GPU leaves every complex dot to
#: cuBLAS. Not s8 (IMMA kernels only, for some layouts), fp8 (TN, multiples of 16,
#: device-dependent). ``test_cublaslt_on_a_real_gpu`` checks the promise on a GPU.
ALWAYS_RUN_TYPES = ("f16", "bf16", "f32", "f64", "c64", "c128")


def always_runs(call: Any) -> bool:
    """Whether cuBLASLt runs ``call`` on every CUDA device heron compiles for, so that a
    compile need not keep heron's kernel beside it (the backend's
    ``library_always_runs``): real GEMMs with XLA's usual epilogues, complex ones, no aux
    output (its leading-dimension rule) and no rule broken. Calls it may refuse
    keep their fallback kernel."""
    return (
        isinstance(call, GemmCall)
        and call.lhs_type in ALWAYS_RUN_TYPES
        and call.rhs_type == call.lhs_type
        and not call.aux
        and not broken_rule(call)
    )


_OPERATIONS = {"CUBLAS_OP_N": 0, "CUBLAS_OP_T": 1}
_SCALE_DTYPES = {
    "f32": np.float32,
    "f64": np.float64,
    "c64": np.complex64,
    "c128": np.complex128,
    "s32": np.int32,
}


class _Prepared:
    """One call shape's descriptors, the heuristic's candidates and the host scalars (kept
    for the library's life, shared by the call's tuned and untuned forms)."""

    def __init__(
        self, plan: LtPlan, desc: int, layouts: dict[str, int], candidates: tuple[bytes, ...]
    ) -> None:
        self.plan = plan
        self.desc = desc
        self.layouts = layouts
        self.candidates = candidates  # each a cublasLtMatmulAlgo_t, the heuristic's best first
        self.alpha = np.zeros(1, _SCALE_DTYPES[plan.scale_type])
        self.beta = np.zeros(1, _SCALE_DTYPES[plan.scale_type])


@attrs.frozen
class _Chosen:
    """The algorithm one call runs (its bytes, where ``cublasLtMatmul`` reads them) and why."""

    prepared: _Prepared
    algorithm: np.ndarray  # ALGORITHM_BYTES uint8
    note: str
    refused: str = ""  #: why the call's tuning result is not used ("" where none is refused)


class CublasLt(Library):
    """cuBLASLt on one device: a handle, a workspace, and the calls prepared so far.

    ``bindings`` is ``nvmath.bindings.cublasLt``, ``data_types`` nvmath's
    ``CudaDataType``, ``compute_types`` ``nvmath.bindings.cublas.ComputeType``
    (the tests pass stand-ins); ``allocate(nbytes)`` gives the workspace's
    device address.
    """

    name = "cublasLt"

    def __init__(
        self,
        allocate: Callable[[int], int],
        *,
        bindings: Any = None,
        data_types: Any = None,
        compute_types: Any = None,
        workspace_bytes: int = WORKSPACE_BYTES,
        device_name: str = "",
        compute_capability: tuple[int, int] = (0, 0),
    ) -> None:
        """``device_name`` and ``compute_capability`` say which GPU the library runs on:
        a tuning result made on another is not used (and results tuned here say so)."""
        if bindings is None or data_types is None or compute_types is None:
            try:
                import nvmath
                from nvmath.bindings import cublas, cublasLt
            except ImportError as exc:
                raise DeviceError(
                    f"cuBLASLt needs nvmath-python (a dependency of heron-runtime-cuda): {exc}"
                ) from exc
            bindings = cublasLt if bindings is None else bindings
            data_types = nvmath.CudaDataType if data_types is None else data_types
            compute_types = cublas.ComputeType if compute_types is None else compute_types
        self._lt = bindings
        self._types = data_types
        self._compute = compute_types
        self.handle = self._call("create")
        self.workspace_bytes = workspace_bytes
        self.workspace = allocate(workspace_bytes)
        self.device_name = device_name
        self.compute_capability = "{}.{}".format(*compute_capability)
        #: ``cublasLtGetVersion()`` (major * 10000 + minor * 100 + patch).
        self.version = int(self._call("get_version"))
        #: untuned call -> its descriptors and candidates (None: the heuristic found none)
        self._prepared: dict[GemmCall, _Prepared | None] = {}
        self._chosen: dict[GemmCall, _Chosen | None] = {}

    def _call(self, name: str, *arguments: Any) -> Any:
        try:
            return getattr(self._lt, name)(*arguments)
        except Exception as exc:  # nvmath raises cuBLASLtError (or fails to load the library)
            raise DeviceError(f"cuBLASLt: cublasLt {name} failed: {exc}") from exc

    def _set(self, setter: str, dtype_of: str, handle: int, attribute: Any, value: int) -> None:
        """``setter(handle, attribute, &value, sizeof value)`` in the attribute's own type."""
        buffer = np.array([value], dtype=getattr(self._lt, dtype_of)(attribute))
        self._call(setter, handle, attribute, buffer.ctypes.data, buffer.nbytes)

    def _layout(self, matrix: LtMatrix) -> int:
        lt = self._lt
        layout = self._call(
            "matrix_layout_create",
            int(getattr(self._types, matrix.data_type)),
            matrix.rows,
            matrix.cols,
            matrix.ld,
        )
        dtype_of = "get_matrix_layout_attribute_dtype"
        attribute = lt.MatrixLayoutAttribute
        self._set("matrix_layout_set_attribute", dtype_of, layout, attribute.ORDER, lt.Order.COL)
        if matrix.batch_count > 1:
            set_ = "matrix_layout_set_attribute"
            self._set(set_, dtype_of, layout, attribute.BATCH_COUNT, matrix.batch_count)
            self._set(set_, dtype_of, layout, attribute.STRIDED_BATCH_OFFSET, matrix.batch_stride)
        return layout

    def prepare(self, call: GemmCall) -> _Prepared | None:
        """The descriptors and the heuristic's candidates for ``call``'s shape (its untuned
        form), or None where the heuristic finds none."""
        call = call.untuned
        if call in self._prepared:
            return self._prepared[call]
        lt = self._lt
        chosen = plan(call)
        compute = int(getattr(self._compute, chosen.compute_type))
        scale = int(getattr(self._types, DATA_TYPES[chosen.scale_type]))
        desc = self._call("matmul_desc_create", compute, scale)
        attribute, dtype_of = lt.MatmulDescAttribute, "get_matmul_desc_attribute_dtype"
        set_ = "matmul_desc_set_attribute"
        self._set(set_, dtype_of, desc, attribute.TRANSA, _OPERATIONS[chosen.transa])
        self._set(set_, dtype_of, desc, attribute.TRANSB, _OPERATIONS[chosen.transb])
        self._set(set_, dtype_of, desc, attribute.EPILOGUE, getattr(lt.Epilogue, chosen.epilogue))
        if chosen.bias_data_type is not None:
            bias_type = int(getattr(self._types, chosen.bias_data_type))
            self._set(set_, dtype_of, desc, attribute.BIAS_DATA_TYPE, bias_type)
        if chosen.fast_accum:
            self._set(set_, dtype_of, desc, attribute.FAST_ACCUM, 1)
        if chosen.aux is not None:
            self._set(set_, dtype_of, desc, attribute.EPILOGUE_AUX_LD, chosen.aux.ld)
            if chosen.aux.batch_count > 1:
                stride = chosen.aux.batch_stride
                self._set(set_, dtype_of, desc, attribute.EPILOGUE_AUX_BATCH_STRIDE, stride)
        layouts = {role: self._layout(getattr(chosen, role)) for role in ("a", "b", "c", "d")}
        preference = self._call("matmul_preference_create")
        self._set(
            "matmul_preference_set_attribute",
            "get_matmul_preference_attribute_dtype",
            preference,
            lt.MatmulPreferenceAttribute.MAX_WORKSPACE_BYTES,
            self.workspace_bytes,
        )
        heuristic = np.zeros(HEURISTIC_CANDIDATES, lt.matmul_heuristic_result_dtype)
        found = np.zeros(1, np.int32)
        self._call(
            "matmul_algo_get_heuristic",
            self.handle,
            desc,
            layouts["a"],
            layouts["b"],
            layouts["c"],
            layouts["d"],
            preference,
            HEURISTIC_CANDIDATES,
            heuristic.ctypes.data,
            found.ctypes.data,
        )
        self._call("matmul_preference_destroy", preference)
        candidates = _candidates(heuristic[: int(found[0])])
        if not candidates:
            for layout in layouts.values():
                self._call("matrix_layout_destroy", layout)
            self._call("matmul_desc_destroy", desc)
            self._prepared[call] = None
            return None
        prepared = _Prepared(chosen, desc, layouts, candidates)
        prepared.alpha[0] = call.scale
        prepared.beta[0] = call.beta
        self._prepared[call] = prepared
        return prepared

    def choose(self, call: GemmCall) -> _Chosen | None:
        """The algorithm ``call`` runs and why (see the module docstring), or None where the
        heuristic finds none; decided once per call."""
        if call in self._chosen:
            return self._chosen[call]
        prepared = self.prepare(call)
        chosen = None
        if prepared is not None:
            count = len(prepared.candidates)
            algorithm = prepared.candidates[0]
            note = f"heuristic's first of {count} candidate{'s' * (count != 1)}"
            why = ""
            if call.tuning is not None:
                why = self.foreign(call.tuning) or self._rejection(prepared, call.tuning)
                if why:
                    note = f"{note} ({why})"
                else:
                    algorithm = call.tuning.algorithm_bytes
                    note = (
                        f"tuned algorithm (fastest of {call.tuning.candidates} on this device,"
                        f" {call.tuning.seconds * 1e6:.1f} us)"
                    )
            chosen = _Chosen(prepared, np.frombuffer(algorithm, np.uint8).copy(), note, why)
        self._chosen[call] = chosen
        return chosen

    def tuning_refusal(self, call: GemmCall) -> str:
        """Why ``call``'s tuning result is not what runs ("" where it is, or where the call
        has none): another device or version, ``cublasLtMatmulAlgoCheck``'s refusal, or no
        algorithm at all."""
        chosen = self.choose(call)
        if chosen is None:
            return "cuBLASLt's heuristic found no algorithm for it on this device"
        return chosen.refused

    def foreign(self, tuning: GemmTuning) -> str:
        """Why a tuning result was not made for this library, device and version ("" when
        it was): an algorithm descriptor means nothing elsewhere."""
        if tuning.library != LIBRARY_NAME:
            return f"tuned for {tuning.library}, not {LIBRARY_NAME}"
        here = (self.device_name, self.compute_capability)
        if (tuning.device, tuning.compute_capability) != here:
            return (
                f"tuned on another device ({tuning.device}, compute capability"
                f" {tuning.compute_capability}; this is {here[0] or 'unnamed'}, {here[1]})"
            )
        if tuning.version != self.version:
            return f"tuned with another cuBLASLt version ({tuning.version}; this is {self.version})"
        if len(tuning.algorithm_bytes) != ALGORITHM_BYTES:
            return (
                f"the tuned algorithm is {len(tuning.algorithm_bytes)} bytes; a"
                f" cublasLtMatmulAlgo_t is {ALGORITHM_BYTES}"
            )
        return ""

    def _rejection(self, prepared: _Prepared, tuning: GemmTuning) -> str:
        """Why ``cublasLtMatmulAlgoCheck`` refuses the tuned algorithm for the prepared
        descriptors, or needs more workspace than heron gives ("" when it takes it)."""
        algorithm = np.frombuffer(tuning.algorithm_bytes, np.uint8).copy()
        result = np.zeros(1, self._lt.matmul_heuristic_result_dtype)
        layouts = prepared.layouts
        try:
            self._lt.matmul_algo_check(
                self.handle,
                prepared.desc,
                layouts["a"],
                layouts["b"],
                layouts["c"],
                layouts["d"],
                algorithm.ctypes.data,
                result.ctypes.data,
            )
        except Exception as exc:  # nvmath's cuBLASLtError: NOT_SUPPORTED, INVALID_VALUE, ...
            return f"tuned algorithm rejected by cublasLtMatmulAlgoCheck: {exc}"
        needed = int(result[0]["workspace_size"])
        if needed > self.workspace_bytes:
            return (
                f"tuned algorithm needs {needed} bytes of workspace; heron gives cuBLASLt"
                f" {self.workspace_bytes}"
            )
        return ""

    def candidates(self, call: GemmCall) -> tuple[bytes, ...]:
        """The heuristic's algorithms for ``call``'s shape, best first (empty where it finds
        none): what the autotuning pass times."""
        prepared = self.prepare(call)
        return () if prepared is None else prepared.candidates

    def tuning(self, algorithm: bytes, seconds: float, candidates: int) -> GemmTuning:
        """The tuning result saying ``algorithm`` is the fastest of ``candidates`` here."""
        return GemmTuning(
            library=LIBRARY_NAME,
            device=self.device_name or "unnamed",
            compute_capability=self.compute_capability,
            version=self.version,
            algorithm=algorithm.hex(),
            seconds=float(seconds),
            candidates=candidates,
        )

    def offers(self, call: Any) -> bool:
        return (
            isinstance(call, GemmCall) and not broken_rule(call) and self.prepare(call) is not None
        )

    def algorithm(self, call: Any) -> str:
        chosen = self.choose(call) if isinstance(call, GemmCall) else None
        return "" if chosen is None else chosen.note

    def refusal(self, call: Any) -> str:
        if not isinstance(call, GemmCall):
            return f"cuBLASLt computes GEMMs only, not {call!r}"
        return broken_rule(call) or "cuBLASLt's heuristic found no algorithm for it on this device"

    def run(self, call: Any, addresses: Sequence[int], stream: Any) -> None:
        choice = self.choose(call)
        if choice is None:
            raise DeviceError(f"cuBLASLt has no algorithm for {call.describe()}")
        prepared = choice.prepared
        chosen = prepared.plan
        pointers = {
            "BIAS_POINTER": chosen.bias_argument,
            "EPILOGUE_AUX_POINTER": chosen.aux_argument,
            "A_SCALE_POINTER": chosen.a_scale_argument,
            "B_SCALE_POINTER": chosen.b_scale_argument,
            "D_SCALE_POINTER": chosen.d_scale_argument,
        }
        for name, argument in pointers.items():
            if argument is None:
                continue
            self._set(
                "matmul_desc_set_attribute",
                "get_matmul_desc_attribute_dtype",
                prepared.desc,
                getattr(self._lt.MatmulDescAttribute, name),
                addresses[argument],
            )
        self._call(
            "matmul",
            self.handle,
            prepared.desc,
            prepared.alpha.ctypes.data,
            addresses[chosen.a_argument],
            prepared.layouts["a"],
            addresses[chosen.b_argument],
            prepared.layouts["b"],
            prepared.beta.ctypes.data,
            addresses[chosen.c_argument],
            prepared.layouts["c"],
            addresses[chosen.out_argument],
            prepared.layouts["d"],
            choice.algorithm.ctypes.data,
            self.workspace,
            self.workspace_bytes,
            int(stream),  # a CUstream is its handle's int
        )


def _candidates(results: np.ndarray) -> tuple[bytes, ...]:
    """The algorithms of the heuristic's results (``cublasLtMatmulHeuristicResult_t``
    records), in its order, each once; a result whose ``state`` is not success is none."""
    out: list[bytes] = []
    for record in results:
        algorithm = record["algo"].tobytes()
        if int(record["state"]) == 0 and algorithm not in out:
            out.append(algorithm)
    return tuple(out)
