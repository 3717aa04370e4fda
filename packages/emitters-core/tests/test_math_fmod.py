"""``arith.remf`` under expand-math: bit-exact with numpy.fmod (C fmod) for f32/f64, scalar
and vector, f16/bf16 through f32, and GPU kernels that need no vendor fmod."""

from __future__ import annotations

import numpy as np
import pytest
from heron_test_support.host_jit import run_elementwise
from heron_test_support.kernels import hsaco_stages, kernel_after, ptx_and_stages
from heron_test_support.math_accuracy import expand_checked
from mlir import ir
from mlir.dialects import arith, func, vector

from heron.emitters.dialect import make_context
from heron.emitters.ir_utils import walk_ops
from heron.emitters.pipeline import expand_math
from heron.emitters.pipeline.manager import PipelineOptions, run_upstream
from heron.hlo.element_types import ElementType
from heron.hlo.errors import UnsupportedError

F32, F64 = ElementType.F32, ElementType.F64
_UINT = {np.dtype(np.float32): np.uint32, np.dtype(np.float64): np.uint64}


def _expand_checked(module: ir.Module) -> None:
    expand_checked(module, gone={"arith.remf"})


def _remf(element: ElementType, x: np.ndarray, y: np.ndarray) -> np.ndarray:
    (out,) = run_elementwise(
        lambda a: [arith.RemFOp(a[0], a[1]).result],
        [element, element],
        [element],
        [x, y],
        pre_lowering=_expand_checked,
    )
    return out


def _assert_bit_exact(x, y, out, ref, uint) -> None:
    nan = np.isnan(ref)
    assert np.array_equal(np.isnan(out), nan)
    bad = np.flatnonzero((out.view(uint) != ref.view(uint)) & ~nan)
    assert bad.size == 0, (x[bad[:4]], y[bad[:4]], out[bad[:4]], ref[bad[:4]])


def _random_floats(rng, dtype, n: int) -> np.ndarray:
    """Finite values of every exponent (subnormals included) and either sign."""
    info = np.finfo(dtype)
    width, m = info.bits, info.nmant
    uint = _UINT[np.dtype(dtype)]
    exponent = rng.integers(0, 2 ** (width - 1 - m) - 1, n).astype(uint)
    fraction = rng.integers(0, 2**m, n, dtype=np.uint64).astype(uint)
    sign = rng.integers(0, 2, n).astype(uint)
    bits = (sign << uint(width - 1)) | (exponent << uint(m)) | fraction
    return bits.view(dtype)


def _cases(dtype) -> tuple[np.ndarray, np.ndarray]:
    dtype = np.dtype(dtype).type
    rng = np.random.default_rng(7)
    info = np.finfo(dtype)
    uint = _UINT[np.dtype(dtype)]
    tiny = info.smallest_subnormal
    special = np.array(
        [
            0.0,
            -0.0,
            1.0,
            -1.0,
            1.5,
            -3.0,
            7.0,
            0.1,
            tiny,
            -tiny,
            info.smallest_normal - tiny,
            info.smallest_normal,
            info.max,
            -info.max,
            np.inf,
            -np.inf,
            np.nan,
            -np.nan,
        ],
        dtype=dtype,
    )
    xs, ys = [np.repeat(special, special.size)], [np.tile(special, special.size)]
    # Raw bit patterns: inf/NaN payloads included, exponent differences up to the range.
    for _ in range(2):
        xs.append(rng.integers(0, np.iinfo(uint).max, 3000, dtype=uint).view(dtype))
    ys.append(rng.integers(0, np.iinfo(uint).max, 6000, dtype=uint).view(dtype))
    # Finite values of any magnitude, in both orders.
    a, b = _random_floats(rng, dtype, 3000), _random_floats(rng, dtype, 3000)
    xs += [a, b]
    ys += [b, a]
    # Subnormals on both sides, and huge over tiny.
    sub = (rng.integers(1, 2**info.nmant, 2000, dtype=np.uint64).astype(uint)).view(dtype)
    huge = _random_floats(rng, dtype, 2000)
    huge_bits = huge.view(uint) | uint((2 ** (info.bits - 1 - info.nmant) - 2) << info.nmant)
    xs += [sub, np.roll(sub, 1), huge_bits.view(dtype), sub]
    ys += [np.roll(sub, 7), sub * dtype(-3), sub, huge_bits.view(dtype)]
    # Exact multiples (small integers times a power of two) give signed zeros.
    k = rng.integers(1, 2**10, 1000).astype(dtype)
    unit = rng.integers(1, 2**10, 1000).astype(dtype) * np.exp2(
        rng.integers(info.minexp - info.nmant, info.maxexp - 21, 1000)
    ).astype(dtype)
    signs = rng.choice(np.array([-1.0, 1.0], dtype), 1000)
    xs += [signs * k * unit, signs * unit * dtype(2.0**12)]
    ys += [unit * signs[::-1], unit]
    # y = +-inf and y = 0 with finite x.
    fin = _random_floats(rng, dtype, 500)
    xs += [fin, fin, fin]
    ys += [np.full(500, np.inf, dtype), np.full(500, -np.inf, dtype), np.zeros(500, dtype)]
    return np.concatenate(xs).astype(dtype), np.concatenate(ys).astype(dtype)


@pytest.mark.parametrize("element", [F32, F64], ids=["f32", "f64"])
def test_fmod_is_bit_exact(element):
    dtype = np.dtype(element.numpy_dtype).type
    x, y = _cases(dtype)
    out = _remf(element, x, y)
    with np.errstate(all="ignore"):
        ref = np.fmod(x, y)
    _assert_bit_exact(x, y, out, ref, _UINT[np.dtype(dtype)])
    # The cases cover what they claim to.
    assert (ref == 0).sum() > 500 and (np.signbit(ref) & (ref == 0)).sum() > 100
    usable = np.isfinite(x) & np.isfinite(y) & (x != 0) & (y != 0)
    spread = np.frexp(x[usable])[1] - np.frexp(y[usable])[1]
    assert spread.max() > 1.9 * np.finfo(dtype).maxexp  # exponent differences up to the range


@pytest.mark.parametrize("element", [ElementType.F16, ElementType.BF16], ids=["f16", "bf16"])
def test_narrow_floats_via_f32_are_exact(element):
    import ml_dtypes  # noqa: F401  (numpy dtype of bf16)

    dtype = element.numpy_dtype
    rng = np.random.default_rng(11)
    x = rng.integers(0, 2**16, 40000, dtype=np.uint32).astype(np.uint16).view(dtype)
    y = rng.integers(0, 2**16, 40000, dtype=np.uint32).astype(np.uint16).view(dtype)
    grid = np.array([0.0, -0.0, 1.0, -2.5, np.inf, -np.inf, np.nan, 1e-7, 3e-40], np.float32)
    x = np.concatenate([x, np.repeat(grid, grid.size).astype(dtype)])
    y = np.concatenate([y, np.tile(grid, grid.size).astype(dtype)])
    out = _remf(element, x, y)
    with np.errstate(all="ignore"):
        ref = np.fmod(x.astype(np.float32), y.astype(np.float32)).astype(dtype)
    _assert_bit_exact(x, y, out, ref, np.uint16)


@pytest.mark.parametrize("element", [F32, F64], ids=["f32", "f64"])
def test_vector_lanes_with_different_loop_lengths(element):
    """``fmod(<x, y>, <y, x>)``: one lane loops over the exponent difference, one does not."""
    dtype = element.numpy_dtype
    rng = np.random.default_rng(5)
    x = _random_floats(rng, dtype, 3000)
    y = _random_floats(rng, dtype, 3000)

    def body(args):
        vtype = ir.VectorType.get([2], args[0].type)
        a = vector.FromElementsOp(vtype, [args[0], args[1]]).result
        b = vector.FromElementsOp(vtype, [args[1], args[0]]).result
        r = arith.RemFOp(a, b).result
        return [vector.ExtractOp(r, [], [i]).result for i in (0, 1)]

    def lower(module):
        _expand_checked(module)
        run_upstream(module, "builtin.module(convert-vector-to-llvm)")

    first, second = run_elementwise(
        body, [element, element], [element, element], [x, y], pre_lowering=lower
    )
    with np.errstate(all="ignore"):
        _assert_bit_exact(x, y, first, np.fmod(x, y), _UINT[np.dtype(dtype)])
        _assert_bit_exact(y, x, second, np.fmod(y, x), _UINT[np.dtype(dtype)])


def test_remf_becomes_a_loop_and_bad_types_are_clear_errors():
    with make_context(), ir.Location.unknown():
        module = ir.Module.create()
        types = [ir.F32Type.get(), ir.F64Type.get(), ir.F16Type.get(), ir.BF16Type.get()]
        with ir.InsertionPoint(module.body):
            f = func.FuncOp("f", ir.FunctionType.get(types, types))
            block = f.add_entry_block()
        with ir.InsertionPoint(block):
            func.ReturnOp([arith.RemFOp(a, a).result for a in block.arguments])
        expand_math.PASS.run(module, PipelineOptions())
        module.operation.verify()
        names = [op.name for op in walk_ops(module.operation)]
        assert "arith.remf" not in names
        assert names.count("scf.while") == 4
        assert f.type.results == types

        bad = ir.Module.create()
        f8 = ir.Float8E5M2Type.get()
        with ir.InsertionPoint(bad.body):
            g = func.FuncOp("g", ir.FunctionType.get([f8], [f8]))
            block = g.add_entry_block()
        with ir.InsertionPoint(block):
            func.ReturnOp([arith.RemFOp(block.arguments[0], block.arguments[0]).result])
        with pytest.raises(UnsupportedError, match=r"arith.remf .*f8E5M2.* in function g"):
            expand_math.PASS.run(bad, PipelineOptions())


KERNEL = """module attributes {gpu.container_module} {
  gpu.module @kernels {
    gpu.func @k(%a: memref<64xf32>, %b: memref<64xf64>, %v: memref<64xf64>,
                %c: memref<64xf32>, %d: memref<64xf64>, %e: memref<64xf64>) kernel {
      %i = gpu.thread_id x
      %x = memref.load %a[%i] : memref<64xf32>
      %y = memref.load %b[%i] : memref<64xf64>
      %x1 = arith.remf %x, %x : f32
      %y1 = arith.remf %y, %y : f64
      %w = vector.load %v[%i] : memref<64xf64>, vector<2xf64>
      %w1 = arith.remf %w, %w : vector<2xf64>
      memref.store %x1, %c[%i] : memref<64xf32>
      memref.store %y1, %d[%i] : memref<64xf64>
      vector.store %w1, %e[%i] : memref<64xf64>, vector<2xf64>
      gpu.return
    }
  }
}"""


def _expand_without_remf(module: ir.Module) -> None:
    expand_math.PASS.run(module, PipelineOptions())
    assert "arith.remf" not in {op.name for op in walk_ops(module.operation)}


def test_kernel_compiles_to_ptx_without_libdevice():
    ptx, stages = ptx_and_stages(kernel_after(KERNEL, _expand_without_remf), "sm_90")
    assert "__nv_" not in stages["llvm-ir"]
    assert "__nv_" not in ptx and "rem.u64" in ptx


def test_kernel_compiles_to_hsaco_without_ocml():
    stages = hsaco_stages(kernel_after(KERNEL, _expand_without_remf), "gfx942")
    assert "__ocml_" not in stages["llvm-ir"]
