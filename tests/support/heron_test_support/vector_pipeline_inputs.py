"""Hand-written IR at the input stages of vectorize-loads-stores, unroll-loops and lower-tensors.

Shared by the emitters-core pass tests (vectorize, unroll, lower-tensors) and the
backends' lowered-kernel tests (runtime-cuda, runtime-rocm):
the seeds' GELU after flatten-tensors (xla-gpu-emitters.md, "Flatten tensors"),
variants that must not be vectorized, and kernels at the lower-tensors input
stage (no apply_indexing, index arithmetic) for every element kind.
"""

from __future__ import annotations

from heron.emitters.dialect.irdl_source import (
    MAX_CALL_OPERANDS,
    MAX_CALL_RESULTS,
    MAX_REDUCE_VALUES,
    MAX_SYNC_TENSORS,
)

N = 12582912
LAUNCH = (
    "heron.kernel, heron.block_size = array<i64: 128, 1, 1>,"
    " heron.grid_size = array<i64: 24576, 1, 1>"
)
GELU_MAP = (
    "(th_x, bl_x, vector_index) -> (th_x * 4 + bl_x * 512 + vector_index), "
    "domain: th_x in [0, 127], bl_x in [0, 24575], vector_index in [0, 3]"
)


def segments(used: int, limit: int) -> str:
    """``operandSegmentSizes`` values for ``used`` of ``limit`` optional slots."""
    return ", ".join(["1"] * used + ["0"] * (limit - used))


def flat_loop(
    index_map: str = GELU_MAP,
    element: str = "bf16",
    size: int = 4,
    length: int = N,
    guard: str = "none",
) -> str:
    """The flatten-tensors stage of an elementwise loop over ``size`` elements per thread.

    ``guard``: ``none`` (the seeds' form), ``invariant`` (an in-bounds check on the
    thread only, as lower-loops-to-scf writes it) or ``variant`` (a check on the
    flat index, which depends on the loop variable).
    """
    t = f"tensor<{length}x{element}>"
    is_float = element.startswith(("f", "bf")) and not element.startswith("f4")
    op = "arith.mulf" if is_float else "arith.muli"
    apply = (
        f'%idx = "heron_gpu.apply_indexing"(%tid, %bid, %v) {{indexing_map = "{index_map}"}}'
        " : (index, index, index) -> index"
    )
    compute = f"""
        %e = tensor.extract %arg0[%idx] : {t}
        %y = {op} %e, %e : {element}
        %ins = tensor.insert %y into %iter[%idx] : {t}"""
    if guard == "none":
        body = f"""
      {apply}{compute}
      scf.yield %ins : {t}"""
    else:
        if guard == "invariant":
            check = "%ok = arith.cmpi ult, %tid, %c100 : index"
        else:
            check = f"""{apply}
      %ok = arith.cmpi ult, %idx, %c1000 : index"""
        inner_apply = apply if guard == "invariant" else ""
        body = f"""
      {check}
      %r = scf.if %ok -> ({t}) {{
        {inner_apply}{compute}
        scf.yield %ins : {t}
      }} else {{
        scf.yield %iter : {t}
      }}
      scf.yield %r : {t}"""
    return f"""
module {{
  func.func @fusion(%arg0: {t}, %arg1: {t}) -> {t} attributes {{{LAUNCH}}} {{
    %c0 = arith.constant 0 : index
    %c1 = arith.constant 1 : index
    %cV = arith.constant {size} : index
    %c100 = arith.constant 100 : index
    %c1000 = arith.constant 1000 : index
    %tid = gpu.thread_id x upper_bound 128
    %bid = gpu.block_id x upper_bound 24576
    %res = scf.for %v = %c0 to %cV step %c1 iter_args(%iter = %arg1) -> ({t}) {{{body}
    }}
    return %res : {t}
  }}
}}
"""


def gelu_flat() -> str:
    """The seeds' GELU after flatten-tensors, with the full GELU arithmetic."""
    t = f"tensor<{N}xbf16>"
    return f"""
module {{
  func.func @fusion(%input: {t}, %output: {t}) -> {t} attributes {{{LAUNCH}}} {{
    %c0 = arith.constant 0 : index
    %c1 = arith.constant 1 : index
    %c4 = arith.constant 4 : index
    %cst = arith.constant 5.000000e-01 : bf16
    %cst_0 = arith.constant 1.000000e+00 : bf16
    %cst_1 = arith.constant 7.968750e-01 : bf16
    %cst_2 = arith.constant 4.467770e-02 : bf16
    %tid = gpu.thread_id x upper_bound 128
    %bid = gpu.block_id x upper_bound 24576
    %loop = scf.for %vector_index = %c0 to %c4 step %c1 iter_args(%iter = %output) -> ({t}) {{
      %dim = "heron_gpu.apply_indexing"(%tid, %bid, %vector_index) {{indexing_map = "{GELU_MAP}"}}
          : (index, index, index) -> index
      %extracted = tensor.extract %input[%dim] : {t}
      %2 = arith.mulf %extracted, %extracted : bf16
      %3 = arith.mulf %2, %extracted : bf16
      %4 = arith.mulf %3, %cst_2 : bf16
      %5 = arith.addf %extracted, %4 : bf16
      %6 = arith.mulf %5, %cst_1 : bf16
      %7 = math.tanh %6 : bf16
      %8 = arith.addf %7, %cst_0 : bf16
      %9 = arith.mulf %8, %cst : bf16
      %10 = arith.mulf %extracted, %9 : bf16
      %inserted = tensor.insert %10 into %iter[%dim] : {t}
      scf.yield %inserted : {t}
    }}
    return %loop : {t}
  }}
}}
"""


def gelu_lower_input() -> str:
    """The GELU as it reaches lower-tensors: vectorized, unrolled, index arithmetic in i32."""
    t = f"tensor<{N}xbf16>"
    lanes = []
    for k in range(4):
        lanes.append(f"""
    %x{k} = vector.extract %in[{k}] : bf16 from vector<4xbf16>
    %w{k} = arith.extf %x{k} : bf16 to f32
    %t{k} = math.tanh %w{k} : f32
    %m{k} = arith.mulf %w{k}, %t{k} : f32
    %y{k} = arith.truncf %m{k} : f32 to bf16""")
    return f"""
module {{
  func.func @fusion(%arg0: {t}, %arg1: {t}) -> {t} attributes {{{LAUNCH}}} {{
    %pad = arith.constant 0.000000e+00 : bf16
    %c4 = arith.constant 4 : i32
    %c512 = arith.constant 512 : i32
    %tid = gpu.thread_id x upper_bound 128
    %bid = gpu.block_id x upper_bound 24576
    %t32 = arith.index_castui %tid : index to i32
    %b32 = arith.index_castui %bid : index to i32
    %a = arith.muli %t32, %c4 : i32
    %b = arith.muli %b32, %c512 : i32
    %s = arith.addi %a, %b : i32
    %base = arith.index_castui %s : i32 to index
    %in = vector.transfer_read %arg0[%base], %pad {{in_bounds = [true]}} : {t}, vector<4xbf16>
    {"".join(lanes)}
    %out = vector.from_elements %y0, %y1, %y2, %y3 : vector<4xbf16>
    %w = vector.transfer_write %out, %arg1[%base] {{in_bounds = [true]}} : vector<4xbf16>, {t}
    return %w : {t}
  }}
}}
"""


def elements_lower_input() -> str:
    """A kernel over 16 elements reading and writing pred, s4, f8, f4 and c64 buffers.

    Each output gets a value computed from the input and an array constant of the
    same type, so both argument and ``memref.global`` accesses are exercised.
    """
    return """
module {
  func.func @elements(%p: tensor<16xi1>, %s4: tensor<16xi4>, %f8: tensor<16xf8E4M3FN>,
                      %f4: tensor<16xf4E2M1FN>, %c: tensor<16xcomplex<f32>>,
                      %op: tensor<16xi1>, %os4: tensor<16xi4>, %of8: tensor<16xf8E4M3FN>,
                      %of4: tensor<16xf4E2M1FN>, %oc: tensor<16xcomplex<f32>>)
      -> (tensor<16xi1>, tensor<16xi4>, tensor<16xf8E4M3FN>, tensor<16xf4E2M1FN>,
          tensor<16xcomplex<f32>>)
      attributes {heron.kernel, heron.block_size = array<i64: 16, 1, 1>,
                  heron.grid_size = array<i64: 1, 1, 1>} {
    %tid = gpu.thread_id x upper_bound 16
    %ptable = arith.constant dense<[true, false, true, true, false, false, true, false,
        true, false, true, true, false, false, true, false]> : tensor<16xi1>
    %s4table = arith.constant dense<[1, -2, 3, -4, 5, -6, 7, -8, 0, 1, 2, 3, 4, 5, 6, 7]>
        : tensor<16xi4>
    %f8table = arith.constant dense<[1.0, 2.0, 3.0, 4.0, 5.0, 6.0, 7.0, 8.0, 9.0, 10.0,
        11.0, 12.0, 13.0, 14.0, 15.0, 16.0]> : tensor<16xf8E4M3FN>
    %ctable = arith.constant dense<[(1.0, 2.0), (3.0, 4.0), (5.0, 6.0), (7.0, 8.0),
        (1.0, 2.0), (3.0, 4.0), (5.0, 6.0), (7.0, 8.0), (1.0, 2.0), (3.0, 4.0), (5.0, 6.0),
        (7.0, 8.0), (1.0, 2.0), (3.0, 4.0), (5.0, 6.0), (7.0, 8.0)]> : tensor<16xcomplex<f32>>
    %pv = tensor.extract %p[%tid] : tensor<16xi1>
    %pt = tensor.extract %ptable[%tid] : tensor<16xi1>
    %px = arith.xori %pv, %pt : i1
    %op1 = tensor.insert %px into %op[%tid] : tensor<16xi1>
    %sv = tensor.extract %s4[%tid] : tensor<16xi4>
    %st = tensor.extract %s4table[%tid] : tensor<16xi4>
    %ss = arith.addi %sv, %st : i4
    %os1 = tensor.insert %ss into %os4[%tid] : tensor<16xi4>
    %fv = tensor.extract %f8[%tid] : tensor<16xf8E4M3FN>
    %fb = arith.bitcast %fv : f8E4M3FN to i8
    %ft = tensor.extract %f8table[%tid] : tensor<16xf8E4M3FN>
    %ftb = arith.bitcast %ft : f8E4M3FN to i8
    %fx = arith.xori %fb, %ftb : i8
    %fe = arith.bitcast %fx : i8 to f8E4M3FN
    %of1 = tensor.insert %fe into %of8[%tid] : tensor<16xf8E4M3FN>
    %f4v = tensor.extract %f4[%tid] : tensor<16xf4E2M1FN>
    %f4b = arith.bitcast %f4v : f4E2M1FN to i4
    %f4n = arith.xori %f4b, %ss : i4
    %f4e = arith.bitcast %f4n : i4 to f4E2M1FN
    %of41 = tensor.insert %f4e into %of4[%tid] : tensor<16xf4E2M1FN>
    %cv = tensor.extract %c[%tid] : tensor<16xcomplex<f32>>
    %ct = tensor.extract %ctable[%tid] : tensor<16xcomplex<f32>>
    %cre = complex.re %cv : complex<f32>
    %cim = complex.im %ct : complex<f32>
    %cn = complex.create %cim, %cre : complex<f32>
    %oc1 = tensor.insert %cn into %oc[%tid] : tensor<16xcomplex<f32>>
    return %op1, %os1, %of1, %of41, %oc1 : tensor<16xi1>, tensor<16xi4>, tensor<16xf8E4M3FN>,
        tensor<16xf4E2M1FN>, tensor<16xcomplex<f32>>
  }
}
"""


def reduction_lower_input() -> str:
    """Shared memory, a barrier, predicated accesses, atomics, a warp shuffle and a call.

    ``@scale`` (a subgraph function taking a tensor) and ``@add`` (the shuffle's
    reducer) survived inlining: they must move into the gpu.module.
    """
    call_segments = segments(3, MAX_CALL_OPERANDS)
    result_segments = segments(1, MAX_CALL_RESULTS)
    sync_segments = segments(1, MAX_SYNC_TENSORS)
    reduce_segments = segments(1, MAX_REDUCE_VALUES)
    return f"""
module {{
  func.func private @scale(%t: tensor<16xf32>, %i: index, %x: f32) -> f32 {{
    %e = tensor.extract %t[%i] : tensor<16xf32>
    %r = arith.mulf %e, %x : f32
    return %r : f32
  }}
  func.func private @add(%a: f32, %b: f32) -> f32 {{
    %r = arith.addf %a, %b : f32
    return %r : f32
  }}
  func.func @reduce(%in: tensor<16xf32>, %of: tensor<16xf32>, %oi: tensor<16xi32>)
      -> (tensor<16xf32>, tensor<16xi32>)
      attributes {{heron.kernel, heron.block_size = array<i64: 16, 1, 1>,
                  heron.grid_size = array<i64: 1, 1, 1>}} {{
    %tid = gpu.thread_id x upper_bound 16
    %c0 = arith.constant 0 : index
    %two = arith.constant 2.0 : f32
    %sc = "heron_gpu.pure_call"(%in, %tid, %two) {{callee = @scale,
        operandSegmentSizes = array<i32: {call_segments}>,
        resultSegmentSizes = array<i32: {result_segments}>}}
        : (tensor<16xf32>, index, f32) -> f32
    %red = "heron_gpu.shuffle_reduce"(%sc) {{max_distance = 8 : i64, reducer = @add,
        operandSegmentSizes = array<i32: {reduce_segments}>,
        resultSegmentSizes = array<i32: {reduce_segments}>}} : (f32) -> f32
    %of1 = tensor.insert %red into %of[%tid] : tensor<16xf32>
    %of2 = "heron_gpu.atomic_rmw"(%of1, %c0) ({{
    ^bb0(%cur: f32):
      %n = arith.addf %cur, %sc : f32
      gpu.yield %n : f32
    }}) : (tensor<16xf32>, index) -> tensor<16xf32>
    %sh = "heron_gpu.allocate_shared"() : () -> tensor<16xi32>
    %one = arith.constant 1 : i32
    %sh1 = tensor.insert %one into %sh[%tid] : tensor<16xi32>
    %sh2 = "heron_gpu.sync_threads"(%sh1) {{operandSegmentSizes = array<i32: {sync_segments}>,
        resultSegmentSizes = array<i32: {sync_segments}>}} : (tensor<16xi32>) -> tensor<16xi32>
    %zero = arith.constant 0 : i32
    %first = arith.cmpi eq, %tid, %c0 : index
    %ld = "heron_gpu.predicated_extract"(%first, %zero, %sh2, %tid)
        : (i1, i32, tensor<16xi32>, index) -> i32
    %oi1 = "heron_gpu.predicated_insert"(%first, %ld, %oi, %tid)
        : (i1, i32, tensor<16xi32>, index) -> tensor<16xi32>
    %oi2 = "heron_gpu.atomic_rmw"(%oi1, %c0) ({{
    ^bb0(%cur: i32):
      %n = arith.muli %cur, %ld : i32
      gpu.yield %n : i32
    }}) : (tensor<16xi32>, index) -> tensor<16xi32>
    return %of2, %oi2 : tensor<16xf32>, tensor<16xi32>
  }}
}}
"""
