"""What the cuBLASLt and hipBLAS stand-ins share: a column-major GEMM run from the arguments.

The stand-ins (``FakeCublasLt`` in packages/runtime-cuda/tests/conftest.py,
``FakeHipblas`` in packages/runtime-rocm/tests/conftest.py) record every
argument heron's wrappers pass and then compute what a BLAS library computes
from exactly those arguments (:func:`column_major_gemm`: column-major
matrices of the given rows, columns, leading dimensions and batch strides,
read from memory through :class:`Memory`), so that a test compares the
result with the contract (``GemmCall.reference``): a wrong leading dimension,
stride, operand order or epilogue shows up as wrong numbers, not only as a
wrong recorded value.

:func:`corpus_gemm_calls` lists the GEMM library calls the compiler makes of
every dot of the program corpus (programs/), for the wrappers' tests.
"""

from __future__ import annotations

import ctypes
import functools
from collections.abc import Callable
from pathlib import Path

import attrs
import numpy as np

__all__ = [
    "HostMemory",
    "Matrix",
    "Memory",
    "assert_gemm_close",
    "column_major_gemm",
    "corpus_gemm_calls",
    "expected_bytes",
    "extra_gemm_calls",
    "random_operands",
]


class Memory:
    """Bytes at device addresses (a stand-in's; :class:`HostMemory` for host addresses)."""

    def read(self, address: int, nbytes: int) -> bytes:
        raise NotImplementedError

    def write(self, address: int, data: bytes) -> None:
        raise NotImplementedError


class HostMemory(Memory):
    """Device addresses that are host addresses (numpy arrays' ``ctypes.data``)."""

    def read(self, address: int, nbytes: int) -> bytes:
        return ctypes.string_at(address, nbytes)

    def write(self, address: int, data: bytes) -> None:
        ctypes.memmove(address, data, len(data))


@attrs.frozen
class Matrix:
    """A column-major matrix batch as a BLAS call describes it."""

    address: int
    dtype: np.dtype
    rows: int
    cols: int
    ld: int
    batch_stride: int = 0  #: elements

    def read(self, memory: Memory, batch: int) -> np.ndarray:
        """``[batch, rows, cols]`` (column-major: element (i, j) at ``i + j * ld``)."""
        size = np.dtype(self.dtype).itemsize
        span = (batch - 1) * self.batch_stride + (self.cols - 1) * self.ld + self.rows
        flat = np.frombuffer(memory.read(self.address, span * size), self.dtype)
        out = np.empty((batch, self.rows, self.cols), self.dtype)
        for b in range(batch):
            for j in range(self.cols):
                start = b * self.batch_stride + j * self.ld
                out[b, :, j] = flat[start : start + self.rows]
        return out

    def write(self, memory: Memory, values: np.ndarray) -> None:
        size = np.dtype(self.dtype).itemsize
        values = values.astype(self.dtype)
        for b in range(values.shape[0]):
            for j in range(self.cols):
                start = (b * self.batch_stride + j * self.ld) * size
                memory.write(self.address + start, values[b, :, j].tobytes())


def column_major_gemm(
    memory: Memory,
    batch: int,
    a: Matrix,
    b: Matrix,
    d: Matrix,
    accumulate: np.dtype,
    alpha: float,
    beta: float,
    bias: tuple[int, np.dtype] | None = None,
    activation: str = "none",
    transpose: Callable[[str], bool] = lambda _: False,
    c: Matrix | None = None,
    compute: str = "",
    aux: Matrix | None = None,
    scale: float = 1.0,
    d_scale: float = 1.0,
) -> None:
    """``D = activation(alpha * op(A) @ op(B) + beta * C + bias[row])`` per batch, as BLAS
    computes it (C is D where not given; ``compute`` rounds the operands first); ``aux``
    receives the activation's argument (cuBLASLt's GELU_AUX); ``scale`` (fp8: A's scale
    times B's) multiplies the products' sum, ``d_scale`` the result before it is
    rounded to D's type (saturated where D is fp8, as cuBLASLt's fp8 D)."""
    import ml_dtypes

    from heron.runtime.core.gemm import gelu_tanh, rounded_to_compute

    a_values = rounded_to_compute(a.read(memory, batch), compute).astype(accumulate)
    b_values = rounded_to_compute(b.read(memory, batch), compute).astype(accumulate)
    if transpose("a"):
        a_values = a_values.transpose(0, 2, 1)
    if transpose("b"):
        b_values = b_values.transpose(0, 2, 1)
    with np.errstate(over="ignore", invalid="ignore"):
        result = np.matmul(a_values, b_values) * np.asarray(alpha, accumulate)
        if scale != 1:
            result = result * np.asarray(scale, accumulate)
        if beta:
            before = (c or d).read(memory, batch).astype(accumulate)
            result = result + np.asarray(beta, accumulate) * before
        if bias is not None:
            address, dtype = bias
            vector = np.frombuffer(memory.read(address, d.rows * np.dtype(dtype).itemsize), dtype)
            result = result + vector.astype(accumulate)[None, :, None]
        if aux is not None:
            aux.write(memory, result.astype(accumulate))
        if activation == "relu":
            result = np.maximum(result, np.zeros((), accumulate))
        elif activation == "gelu":
            result = gelu_tanh(result)
        if d_scale != 1:
            result = result * np.asarray(d_scale, accumulate)
    if np.dtype(d.dtype).itemsize == 1 and np.dtype(d.dtype).kind == "V":  # fp8: saturated
        largest = float(ml_dtypes.finfo(d.dtype).max)
        result = np.where(np.isnan(result), result, np.clip(result, -largest, largest))
    d.write(memory, result.astype(accumulate))


@functools.cache
def corpus_dot_fusions(corpus: str = "programs") -> tuple[tuple[str, str, object], ...]:
    """(program, fusion, verdict) for every fusion of ``corpus`` (``programs`` or
    ``models``) holding a dot: its :class:`~heron.compiler.library_gemm.GemmMatch`, or
    why no library computes it.

    The programs are prepared for the h100 Target as ``compile_program`` does
    (fusion, copy insertion, scheduling), without compiling kernels.
    """
    from heron.compiler import Target
    from heron.compiler.executable import prepare_module
    from heron.compiler.library_gemm import match_gemm
    from heron.hlo.parser import parse_module_file

    target = Target.preset("h100")
    programs = Path(__file__).resolve().parents[3] / corpus
    found = []
    for path in sorted(programs.glob("*/module.hlo")):
        if " dot(" not in path.read_text():
            continue
        module, _ = prepare_module(parse_module_file(path), target)
        for inst in module.instructions():
            if inst.opcode != "fusion":
                continue
            body = inst.called("calls")
            if any(i.opcode == "dot" for i in body.instructions):
                found.append((path.parent.name, inst.name, match_gemm(body, target)))
    return tuple(found)


def corpus_gemm_calls() -> tuple[tuple[str, object], ...]:
    """(program, GemmCall) for every dot of the program corpus that becomes a library call
    (:func:`corpus_dot_fusions`)."""
    return tuple(
        (program, verdict.call)
        for program, _, verdict in corpus_dot_fusions()
        if not isinstance(verdict, str)
    )


def random_operands(call, rng: np.random.Generator) -> list[np.ndarray]:
    """Random operands of a GemmCall in its argument order (out too: beta reads it)."""
    from heron.hlo.element_types import ElementType

    operands = []
    for kind, count in zip(call.element_types(), call.element_counts(), strict=True):
        if kind == "s8":
            operands.append(rng.integers(-128, 128, count).astype(np.int8))
        elif kind == "s32":
            operands.append(rng.integers(-1000, 1000, count).astype(np.int32))
        elif kind == "f32" and count == 1:  # an fp8 call's scale
            operands.append(rng.uniform(0.25, 2, 1).astype(np.float32))
        else:
            operands.append(rng.standard_normal(count).astype(ElementType(kind).numpy_dtype))
    return operands


def expected_bytes(call, operands: list[np.ndarray]) -> np.ndarray:
    """The contract's output (``GemmCall.reference``) for ``operands`` as they are now."""
    return call.reference([o.view(np.uint8).copy() for o in operands])


def assert_gemm_close(
    call, got: np.ndarray, expected: np.ndarray, slack: float = 1.0, device_rounding: bool = False
) -> None:
    """``got`` (the output's elements or bytes) equals the contract within its accumulation
    bound: integers exactly; floats within 4 epsilon of the output type times sqrt(k)
    (the products summed in another order, rounded once). Both sides round the
    operands to the call's ``compute`` alike, so that rounding costs nothing here;
    ``device_rounding``: a GPU's tensor cores may round them otherwise (truncate),
    so a narrowed compute's rounding unit times 4 sqrt(k) is allowed too."""
    import ml_dtypes

    from heron.hlo.element_types import ElementType

    dtype = ElementType(call.out_type).numpy_dtype
    wide = np.complex128 if np.dtype(dtype).kind == "c" else np.float64
    got, expected = got.view(dtype).astype(wide), expected.view(dtype).astype(wide)
    if call.accumulation == "s32":
        np.testing.assert_array_equal(got, expected, err_msg=call.describe())
        return
    unit = float(ml_dtypes.finfo(dtype).eps)
    if device_rounding and call.compute:
        from heron.hlo.dot_precision import rounding_unit

        unit = max(unit, 2 * rounding_unit(call.compute))
    bound = slack * (4 * unit * max(call.k, 1) ** 0.5 + 1e-6)
    np.testing.assert_allclose(got, expected, rtol=bound, atol=bound, err_msg=call.describe())


def extra_gemm_calls() -> tuple:
    """Calls the corpus lacks: s8 (s32 accumulation), f16 with and without an epilogue,
    alpha and beta, f64, a matrix-vector product, both operands transposed with a
    residual and a bias, bf16 compute, GELU without a bias, c64 and c128 (with complex
    alphas and residuals), and GELUs
    writing their argument too (aux: bf16 with a bias and a batch, f32 without), fp8
    (scaled and not, e4m3 and e5m2, to f32, bf16 and a scaled e4m3)."""
    from heron.runtime.core.gemm import GemmCall

    return (
        GemmCall(1, 16, 24, 32, "s8", "s8", "s32"),
        GemmCall(3, 5, 7, 9, "f16", "f16", "f16", bias=True, activation="relu"),
        GemmCall(3, 5, 7, 9, "f16", "f16", "f32"),
        GemmCall(2, 4, 6, 8, "f32", "f32", "f32", alpha=0.5, beta=2.0),
        GemmCall(1, 1, 9, 4, "f64", "f64", "f64"),
        GemmCall(1, 7, 1, 12, "bf16", "bf16", "f32"),
        GemmCall(
            2,
            3,
            5,
            7,
            lhs_transposed=True,
            rhs_transposed=True,
            compute="tf32",
            beta=1.0,
            bias=True,
            residual=True,
            activation="gelu",
        ),
        GemmCall(1, 6, 4, 10, "f32", "f32", "f32", compute="bf16", activation="gelu"),
        GemmCall(2, 5, 6, 7, "c64", "c64", "c64"),
        GemmCall(1, 4, 3, 5, "c128", "c128", "c128", alpha=0.5),
        GemmCall(
            2, 5, 6, 7, "c64", "c64", "c64", alpha=2.0, alpha_imag=-1.0, beta=1.0, residual=True
        ),
        GemmCall(1, 4, 3, 5, "c128", "c128", "c128", alpha_imag=0.5, beta=1.0, residual=True),
        GemmCall(3, 5, 16, 9, "bf16", "bf16", "bf16", bias=True, activation="gelu", aux=True),
        GemmCall(1, 6, 8, 10, lhs_transposed=True, compute="tf32", activation="gelu", aux=True),
        GemmCall(1, 16, 32, 48, "f8e4m3fn", "f8e4m3fn", "f32", rhs_transposed=True, scales=True),
        GemmCall(2, 16, 16, 32, "f8e4m3fn", "f8e5m2", "bf16", rhs_transposed=True, alpha=0.5),
        GemmCall(
            1,
            32,
            16,
            16,
            "f8e5m2",
            "f8e4m3fn",
            "f8e4m3fn",
            rhs_transposed=True,
            scales=True,
            d_scale=True,
        ),  # fmt: skip
    )
