"""lower-tensors: the gpu.module kernel, memory types, shared memory, atomics, calls.

Structure is checked on the printed IR; the element-kind kernel (pred, s4, fp8,
f4, c64, array constants of each) is also run on the host for every thread
(``heron_test_support.kernel_jit``) and compared with numpy/ml_dtypes.
"""

from __future__ import annotations

import re

import ml_dtypes
import numpy as np
import pytest
from heron_test_support import vector_pipeline_inputs as _inputs
from heron_test_support.kernel_jit import run_lowered_kernel
from mlir import ir

from heron.emitters.dialect import make_context
from heron.emitters.pipeline import PipelineOptions, lower_tensors, lower_to_scf
from heron.hlo.element_types import ElementType as E
from heron.hlo.errors import UnsupportedError
from heron.hlo.shapes import ArrayShape


def _lowered(text: str, target: str = "cuda") -> str:
    with make_context(), ir.Location.unknown():
        module = ir.Module.parse(text)
        options = PipelineOptions(backend=target, warp_size=64 if target == "rocm" else 32)
        lower_to_scf.run(module, options)  # the pass before: predicated ops, shuffles
        lower_tensors.run(module, options)
        module.operation.verify()
        return str(module)


def _without_arg_attrs(text: str) -> str:
    """``text`` without the kernel's LLVM argument attributes (test_kernel_argument_attributes)."""
    return re.sub(r" \{llvm\.[^}]*\}", "", text)


def test_gelu_becomes_a_gpu_module_kernel_with_vector_accesses():
    out = _lowered(_inputs.gelu_lower_input())
    assert out.startswith("module attributes {gpu.container_module} {")
    assert "gpu.module @fusion_module {" in out
    assert (
        "gpu.func @fusion(%arg0: memref<12582912xbf16>, %arg1: memref<12582912xbf16>) kernel"
        " attributes {known_block_size = array<i32: 128, 1, 1>,"
        " known_grid_size = array<i32: 24576, 1, 1>}" in _without_arg_attrs(out)
    )
    assert (
        "%arg0: memref<12582912xbf16> {llvm.align = 16 : i64,"
        " llvm.dereferenceable = 25165824 : i64, llvm.noalias, llvm.readonly}" in out
    )
    assert out.count("vector.load") == 1 and out.count("vector.store") == 1
    assert "{alignment = 8 : i64} : memref<12582912xbf16>, vector<4xbf16>" in out
    assert "gpu.return" in out
    assert "tensor" not in out and "func.func" not in out and "heron" not in out


def test_element_kinds_use_their_memory_types():
    out = _lowered(_inputs.elements_lower_input())
    assert (
        "gpu.func @elements(%arg0: memref<16xi8>, %arg1: memref<8xi8>, %arg2: memref<16xi8>,"
        " %arg3: memref<8xi8>, %arg4: memref<16xcomplex<f32>>, %arg5: memref<16xi8>,"
        " %arg6: memref<8xi8>, %arg7: memref<16xi8>, %arg8: memref<8xi8>,"
        " %arg9: memref<16xcomplex<f32>>) kernel" in _without_arg_attrs(out)
    )
    assert "tensor" not in out
    assert "arith.cmpi ne" in out  # pred loads
    assert "arith.extui %8 : i1 to i8" in out or "i1 to i8" in out  # pred store
    assert "f8E4M3FN" not in out and "f4E2M1FN" not in out  # the bitcasts disappeared
    assert out.count("arith.trunci") == 3 and "i8 to i4" in out  # s4 x2, f4 loads
    # two sub-byte stores (s4, f4), each clearing then setting bits atomically
    assert out.count("memref.atomic_rmw andi") == 2 and out.count("memref.atomic_rmw ori") == 2
    assert out.count("memref.global") == 4 and out.count("memref.get_global") == 4


def test_array_constants_in_memory_layout():
    with make_context(), ir.Location.unknown():
        pred = ir.Attribute.parse("dense<[true, false, true, true]> : tensor<4xi1>")
        assert list(np.array(lower_tensors.memory_constant(pred))) == [1, 0, 1, 1]
        s4 = ir.Attribute.parse("dense<[1, -2, 7, -8, 3]> : tensor<5xi4>")
        packed = np.array(lower_tensors.memory_constant(s4)).astype(np.uint8)
        assert list(packed) == [0xE1, 0x87, 0x03]  # low nibble first, padded
        values = [1.0, -2.5, 448.0, 0.015625]
        f8 = ir.Attribute.parse(f"dense<{values}> : tensor<4xf8E4M3FN>")
        bits = np.array(values, dtype=ml_dtypes.float8_e4m3fn).view(np.uint8)
        assert list(np.array(lower_tensors.memory_constant(f8)).astype(np.uint8)) == list(bits)
        f4_values = [0.5, -6.0, 1.5, 3.0]
        f4 = ir.Attribute.parse(f"dense<{f4_values}> : tensor<4xf4E2M1FN>")
        nibbles = np.array(f4_values, dtype=ml_dtypes.float4_e2m1fn).view(np.uint8) & 0xF
        expected = [int(nibbles[0] | nibbles[1] << 4), int(nibbles[2] | nibbles[3] << 4)]
        assert list(np.array(lower_tensors.memory_constant(f4)).astype(np.uint8)) == expected


def test_element_kinds_run_on_the_host_like_numpy():
    rng = np.random.default_rng(0)
    n = 16
    pred = rng.integers(0, 2, n).astype(bool)
    s4 = rng.integers(-8, 8, n)
    f8 = rng.integers(0, 256, n).astype(np.uint8)
    f4 = rng.integers(0, 16, n).astype(np.uint8)
    c = (rng.standard_normal(n) + 1j * rng.standard_normal(n)).astype(np.complex64)
    kinds = [E.PRED, E.S4, E.F8E4M3FN, E.F4E2M1FN, E.C64]
    shapes = [ArrayShape(kind, (n,)) for kind in kinds]
    inputs = [
        pred,
        s4.astype(ml_dtypes.int4),
        f8.view(ml_dtypes.float8_e4m3fn),
        f4.view(ml_dtypes.float4_e2m1fn),
        c,
    ]
    with make_context(), ir.Location.unknown():
        module = ir.Module.parse(_inputs.elements_lower_input())
        lower_tensors.run(module, PipelineOptions())
    # the packed outputs start dirty (poison): the stores must clear their bits
    out = run_lowered_kernel(module, inputs, shapes, (1,), (n,), input_shapes=shapes)

    ptable = np.array([1, 0, 1, 1, 0, 0, 1, 0, 1, 0, 1, 1, 0, 0, 1, 0], bool)
    s4table = np.array([1, -2, 3, -4, 5, -6, 7, -8, 0, 1, 2, 3, 4, 5, 6, 7])
    f8table = np.arange(1, 17, dtype=np.float32).astype(ml_dtypes.float8_e4m3fn).view(np.uint8)
    ctable = np.tile(np.array([1 + 2j, 3 + 4j, 5 + 6j, 7 + 8j], np.complex64), 4)
    s4_sum = (s4 + s4table) & 0xF
    np.testing.assert_array_equal(out[0], pred ^ ptable)
    np.testing.assert_array_equal(out[1].astype(np.int64) & 0xF, s4_sum)
    np.testing.assert_array_equal(out[2].view(np.uint8), f8 ^ f8table)
    np.testing.assert_array_equal(out[3].view(np.uint8) & 0xF, (f4 ^ s4_sum) & 0xF)
    np.testing.assert_array_equal(out[4], ctable.imag + 1j * c.real)


@pytest.mark.parametrize(("target", "warp"), [("cuda", 32), ("rocm", 64)])
def test_shared_memory_atomics_shuffles_and_surviving_functions(target, warp):
    out = _lowered(_inputs.reduction_lower_input(), target)
    assert "func.func private @scale(%arg0: memref<16xf32>, %arg1: index, %arg2: f32) -> f32" in out
    assert "func.func private @add(%arg0: f32, %arg1: f32) -> f32" in out
    assert out.index("gpu.module") < out.index("func.func private @scale")
    assert "func.call @scale(%arg0, %thread_id_x, %cst)" in out
    shared = "memref<16xi32, #gpu.address_space<workgroup>> {llvm.align = 16 : i64}"
    assert f"workgroup(%arg3 : {shared}) kernel" in out
    assert out.count("gpu.barrier") == 1
    assert out.count("gpu.shuffle  xor") == 4 and out.count("func.call @add") == 4
    assert f"%c{warp}_i32 = arith.constant {warp} : i32" in out
    assert "memref.atomic_rmw addf" in out  # cur + x: one atomic instruction
    assert "memref.generic_atomic_rmw %arg2" in out  # cur * x on i32: a CAS loop
    assert out.count("scf.if") == 2  # predicated extract and insert
    assert "heron_gpu" not in out and "tensor" not in out


def test_a_shuffle_left_for_lower_tensors_names_the_pass_that_lowers_it():
    with make_context(), ir.Location.unknown():
        module = ir.Module.parse(_inputs.reduction_lower_input())
        with pytest.raises(UnsupportedError, match="lower-heron-gpu-to-scf lowers it"):
            lower_tensors.run(module, PipelineOptions())


def test_leftover_apply_indexing_is_refused_with_the_op_and_fusion():
    text = _inputs.flat_loop()
    with pytest.raises(UnsupportedError, match=r"heron_gpu.apply_indexing in fusion 'fusion'"):
        _lowered(text)


def test_multi_dimensional_tensors_are_refused():
    text = """
func.func @k(%a: tensor<4x4xf32>) -> tensor<4x4xf32>
    attributes {heron.kernel, heron.block_size = array<i64: 4>, heron.grid_size = array<i64: 1>} {
  %c0 = arith.constant 0 : index
  %x = tensor.extract %a[%c0, %c0] : tensor<4x4xf32>
  %r = tensor.insert %x into %a[%c0, %c0] : tensor<4x4xf32>
  return %r : tensor<4x4xf32>
}
"""
    with pytest.raises(UnsupportedError, match=r"tensor<4x4xf32> of @k in fusion 'k' is not 1-D"):
        _lowered(text)


def _ldmatrix_kernel(element: str, per_register: int) -> str:
    row = f"vector<{per_register}x{element}>"
    return f"""
func.func @k(%out: tensor<32xi32>) -> tensor<32xi32>
    attributes {{heron.kernel, heron.block_size = array<i64: 32>,
                heron.grid_size = array<i64: 1>}} {{
  %tid = gpu.thread_id x upper_bound 32
  %c8 = arith.constant 8 : index
  %row = arith.muli %tid, %c8 : index
  %sh = "heron_gpu.allocate_shared"() : () -> tensor<256x{element}>
  %v = "heron_gpu.ldmatrix"(%sh, %row) {{num_tiles = 4 : i64}}
      : (tensor<256x{element}>, index) -> vector<4x{per_register}x{element}>
  %w = vector.extract %v[0] : {row} from vector<4x{per_register}x{element}>
  %i = vector.bitcast %w : {row} to vector<1xi32>
  %x = vector.extract %i[0] : i32 from vector<1xi32>
  %r = tensor.insert %x into %out[%tid] : tensor<32xi32>
  return %r : tensor<32xi32>
}}
"""


@pytest.mark.parametrize(("element", "per_register"), [("f16", 2), ("bf16", 2), ("i8", 4)])
def test_ldmatrix_reads_the_shared_buffer(element, per_register):
    """heron_gpu.ldmatrix becomes nvgpu.ldmatrix on the workgroup memref (s8 rows are
    loaded as b16 words, which upstream's op accepts for 8-bit elements)."""
    out = _lowered(_ldmatrix_kernel(element, per_register))
    memref = f"memref<256x{element}, #gpu.address_space<workgroup>>"
    assert "nvgpu.ldmatrix %arg1[" in out and "numTiles = 4 : i32, transpose = false" in out
    assert f": {memref} -> vector<4x{per_register}x{element}>" in out


@pytest.mark.parametrize("element", ["f16", "i8"])
def test_shared_buffers_are_16_byte_aligned_in_the_ptx(element):
    """ldmatrix reads 16-byte rows and st.shared.v4 writes 16 bytes: the buffer is
    declared ``.align 16``, not its element's alignment (``.align 2`` for f16 before)."""
    compiler = pytest.importorskip("heron.runtime.cuda.compiler")
    with make_context(), ir.Location.unknown():
        module = ir.Module.parse(_ldmatrix_kernel(element, 4 // (2 if element == "f16" else 1)))
        lower_tensors.run(module, PipelineOptions(backend="cuda", warp_size=32))
        ptx = compiler.compile_to_ptx(module, "sm_90", ptx_version=80).ptx
    declared = re.findall(r"\.shared \.align (\d+) \.b8 \w+\[(\d+)\]", ptx)
    assert declared == [("16", str(256 * (2 if element == "f16" else 1)))], declared
    assert "ldmatrix.sync.aligned.m8n8.x4.shared.b16" in ptx


def test_ldmatrix_of_a_global_tensor_is_refused():
    text = _ldmatrix_kernel("f16", 2).replace(
        '%sh = "heron_gpu.allocate_shared"() : () -> tensor<256xf16>',
        "%sh = arith.constant dense<0.0> : tensor<256xf16>",
    )
    with pytest.raises(UnsupportedError, match="ldmatrix reads a shared tensor"):
        _lowered(text)


def _sub_byte_kernel() -> str:
    """An s4 shared tile written, updated atomically and read back; an s2 atomic add."""
    sync = _inputs.segments(1, _inputs.MAX_SYNC_TENSORS)
    return f"""
module {{
  func.func @k(%in: tensor<16xi4>, %out: tensor<16xi2>) -> tensor<16xi2>
      attributes {{heron.kernel, heron.block_size = array<i64: 16, 1, 1>,
                  heron.grid_size = array<i64: 1, 1, 1>}} {{
    %tid = gpu.thread_id x upper_bound 16
    %c0 = arith.constant 0 : index
    %v = tensor.extract %in[%tid] : tensor<16xi4>
    %sh = "heron_gpu.allocate_shared"() : () -> tensor<16xi4>
    %sh1 = tensor.insert %v into %sh[%tid] : tensor<16xi4>
    %sh2 = "heron_gpu.sync_threads"(%sh1) {{operandSegmentSizes = array<i32: {sync}>,
        resultSegmentSizes = array<i32: {sync}>}} : (tensor<16xi4>) -> tensor<16xi4>
    %sh3 = "heron_gpu.atomic_rmw"(%sh2, %c0) ({{
    ^bb0(%cur: i4):
      %s = arith.muli %cur, %v : i4
      gpu.yield %s : i4
    }}) : (tensor<16xi4>, index) -> tensor<16xi4>
    %w = tensor.extract %sh3[%c0] : tensor<16xi4>
    %n = arith.trunci %w : i4 to i2
    %o = "heron_gpu.atomic_rmw"(%out, %tid) ({{
    ^bb0(%cur: i2):
      %s = arith.addi %cur, %n : i2
      gpu.yield %s : i2
    }}) : (tensor<16xi2>, index) -> tensor<16xi2>
    return %o : tensor<16xi2>
  }}
}}
"""


def test_sub_byte_shared_memory_is_widened_and_packed_atomics_are_byte_cas_loops():
    """Shared s4: one i8 per element, plain stores (no RMW of a byte nothing wrote yet).

    A global s2 atomic: a CAS loop on its whole byte (the other three elements kept);
    a shared s4 atomic: a CAS loop on the element's own byte.
    """
    out = _lowered(_sub_byte_kernel())
    shared = "memref<16xi8, #gpu.address_space<workgroup>> {llvm.align = 16 : i64}"
    assert f"workgroup(%arg2 : {shared}) kernel" in out
    assert "memref.atomic_rmw" not in out  # no andi/ori read-modify-write of a packed byte
    assert out.count("memref.generic_atomic_rmw %arg1") == 1
    assert out.count("memref.generic_atomic_rmw %arg2") == 1
    assert "memref<4xi8>" in out  # the s2 output stays packed: 16 elements in 4 bytes


def _whole_byte_kernel(element: str, per_thread: int, order: list[int], base: str) -> str:
    """Each of 8 threads inserts ``per_thread`` sub-byte elements at ``base + order[j]``.

    ``base`` is the IR (over ``%tid`` as i32) of the first index: whether it is
    provably a multiple of the elements a byte decides between a plain byte
    store and per-element atomics.
    """
    n = 8 * per_thread
    lines = []
    previous = "%out"
    for j, offset in enumerate(order):
        lines += [
            f"    %o{j} = arith.addi %b, %c{offset} : i32",
            f"    %i{j} = arith.index_castui %o{j} : i32 to index",
            f"    %v{j} = tensor.extract %in[%i{j}] : tensor<{n + 4}x{element}>",
            f"    %t{j} = tensor.insert %v{j} into {previous}[%i{j}] : tensor<{n + 4}x{element}>",
        ]
        previous = f"%t{j}"
    constants = "\n".join(f"    %c{k} = arith.constant {k} : i32" for k in range(8))
    body = "\n".join(lines)
    return f"""
module {{
  func.func @k(%in: tensor<{n + 4}x{element}>, %out: tensor<{n + 4}x{element}>)
      -> tensor<{n + 4}x{element}>
      attributes {{heron.kernel, heron.block_size = array<i64: 8, 1, 1>,
                  heron.grid_size = array<i64: 1, 1, 1>}} {{
    %tid = gpu.thread_id x upper_bound 8
    %t = arith.index_castui %tid : index to i32
{constants}
    %b = {base}
{body}
    return {previous} : tensor<{n + 4}x{element}>
  }}
}}
"""


@pytest.mark.parametrize(
    ("element", "per_thread", "order", "base", "dtype"),
    [
        ("i4", 2, [0, 1], "arith.muli %t, %c2 : i32", ml_dtypes.int4),
        ("i2", 4, [3, 1, 0, 2], "arith.shli %t, %c2 : i32", ml_dtypes.int2),
        ("i4", 4, [0, 1, 2, 3], "arith.muli %c4, %t : i32", ml_dtypes.int4),
    ],
)
def test_a_thread_filling_whole_bytes_stores_them_plainly(element, per_thread, order, base, dtype):
    """Inserts at ``k*t + 0 .. k*t + k-1`` (k elements a byte): one plain byte store each.

    Run on the host with outputs starting as poison: every element of the
    bytes written must come back, in its own bits, with no atomic left.
    """
    with make_context(), ir.Location.unknown():
        module = ir.Module.parse(_whole_byte_kernel(element, per_thread, order, base))
        lower_tensors.run(module, PipelineOptions())
        module.operation.verify()
        out = str(module)
        assert "memref.atomic_rmw" not in out
        width = int(element[1:])
        assert out.count("memref.store") == per_thread * width // 8  # one a byte
        n = 8 * per_thread + 4
        shape = ArrayShape(E.S4 if element == "i4" else E.S2, (n,))
        rng = np.random.default_rng(1)
        low = -(1 << (width - 1))
        data = rng.integers(low, -low, n).astype(dtype)
        result = run_lowered_kernel(module, [data], [shape], (1,), (8,), input_shapes=[shape])
    written = 8 * per_thread
    np.testing.assert_array_equal(result[0][:written].astype(np.int64), data[:written])


@pytest.mark.parametrize(
    ("order", "base", "why"),
    [
        ([0, 1], "arith.addi %t, %c0 : i32", "the base is not provably even"),
        ([1, 2], "arith.muli %t, %c2 : i32", "the pair straddles two bytes"),
        ([0, 0], "arith.muli %t, %c2 : i32", "one element twice, its neighbour never"),
    ],
)
def test_unproven_whole_bytes_keep_their_atomics(order, base, why):
    out = _lowered(_whole_byte_kernel("i4", 2, order, base))
    assert out.count("memref.atomic_rmw andi") == 2, why
    assert "memref.store" not in out, why


_TWO_BLOCKS = """
func.func @k(%out: tensor<32xi32>) -> tensor<32xi32>
    attributes {heron.kernel, heron.block_size = array<i64: 32>,
                heron.grid_size = array<i64: 1>, heron.min_blocks_per_core = 5 : i64} {
  %tid = gpu.thread_id x upper_bound 32
  %x = arith.index_cast %tid : index to i32
  %r = tensor.insert %x into %out[%tid] : tensor<32xi32>
  return %r : tensor<32xi32>
}
"""


def test_min_blocks_per_core_reaches_the_backend():
    """An entry's ``heron.min_blocks_per_core`` stays on the gpu.func and becomes NVVM's
    ``nvvm.minctasm`` (``.minnctapersm`` beside ``.maxntid`` in the PTX); ROCDL has no
    counterpart in blocks, so the ROCm lowering drops it."""
    cuda = pytest.importorskip("heron.runtime.cuda.compiler")
    rocm = pytest.importorskip("heron.runtime.rocm.compiler")
    assert "heron.min_blocks_per_core = 5 : i64" in _lowered(_TWO_BLOCKS)
    llvm_ir = {}
    for name, backend, warp, arch in (("cuda", cuda, 32, ()), ("rocm", rocm, 64, ("gfx942",))):
        with make_context(), ir.Location.unknown():
            module = ir.Module.parse(_TWO_BLOCKS)
            lower_tensors.run(module, PipelineOptions(backend=name, warp_size=warp))
            block = {"max_block_size": 1024} if arch else {}  # ROCm's asks for it
            llvm_ir[name], _ = backend.lower_to_llvm_ir(module, *arch, **block)
            if name == "cuda":
                ptx = cuda.compile_to_ptx(module, "sm_90", ptx_version=80).ptx
    assert '"nvvm.minctasm"="5"' in llvm_ir["cuda"]
    assert re.search(r"\.maxntid 32, 1, 1\s+\.minnctapersm 5", ptx), ptx
    assert "minctasm" not in llvm_ir["rocm"] and "min_blocks" not in llvm_ir["rocm"]
    assert "min_blocks" not in llvm_ir["cuda"]
