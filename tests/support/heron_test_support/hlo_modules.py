"""Small HLO modules several test suites compile (the CLI, the driver, the targets).

Kept here once rather than as a copy in each test file; a test that needs a
variant writes its own.
"""

from __future__ import annotations

__all__ = ["JAX_ARGMAX_REDUCER", "SCALE", "division_chain", "elementwise_chain"]

#: One loop fusion, f32[64,32] times 3: the smallest module with a real kernel.
SCALE = """\
HloModule scale

fused_scale {
  x = f32[64,32] parameter(0)
  c = f32[] constant(3)
  b = f32[64,32] broadcast(c), dimensions={}
  ROOT m = f32[64,32] multiply(x, b)
}

ENTRY main {
  x = f32[64,32] parameter(0)
  ROOT f = f32[64,32] fusion(x), kind=kLoop, calls=fused_scale
}
"""


#: One f32 dot fusion (k = 16): the GEMM emitter's, which writes each element once.
GEMM_FUSION = """
HloModule gemm
fused {
  a = f32[32,16]{1,0} parameter(0)
  b = f32[16,8]{1,0} parameter(1)
  ROOT d = f32[32,8]{1,0} dot(a, b), lhs_contracting_dims={1}, rhs_contracting_dims={0}
}
ENTRY main {
  a = f32[32,16]{1,0} parameter(0)
  b = f32[16,8]{1,0} parameter(1)
  ROOT f = f32[32,8]{1,0} fusion(a, b), kind=kOutput, calls=fused
}
"""


#: Scatters of each kind the tolerance and the order rules tell apart: a float sum, an
#: integer sum, an overwrite, unique indices, and a variadic (argmax) one.
SCATTER_KINDS = """
HloModule scatters

add_f32 {
  a = f32[] parameter(0)
  b = f32[] parameter(1)
  ROOT s = f32[] add(a, b)
}

add_s32 {
  a = s32[] parameter(0)
  b = s32[] parameter(1)
  ROOT s = s32[] add(a, b)
}

overwrite {
  a = f32[] parameter(0)
  ROOT b = f32[] parameter(1)
}

argmax {
  v0 = f32[] parameter(0)
  i0 = s32[] parameter(1)
  v1 = f32[] parameter(2)
  i1 = s32[] parameter(3)
  larger = pred[] compare(v1, v0), direction=GT
  v = f32[] select(larger, v1, v0)
  i = s32[] select(larger, i1, i0)
  ROOT r = (f32[], s32[]) tuple(v, i)
}

ENTRY main {
  operand = f32[8] parameter(0)
  ints = s32[8] parameter(1)
  indices = s32[64,1] parameter(2)
  updates = f32[64] parameter(3)
  int_updates = s32[64] parameter(4)
  sum = f32[8] scatter(operand, indices, updates), update_window_dims={},
    inserted_window_dims={0}, scatter_dims_to_operand_dims={0}, index_vector_dim=1,
    to_apply=add_f32
  int_sum = s32[8] scatter(ints, indices, int_updates), update_window_dims={},
    inserted_window_dims={0}, scatter_dims_to_operand_dims={0}, index_vector_dim=1,
    to_apply=add_s32
  last = f32[8] scatter(operand, indices, updates), update_window_dims={},
    inserted_window_dims={0}, scatter_dims_to_operand_dims={0}, index_vector_dim=1,
    to_apply=overwrite
  unique = f32[8] scatter(operand, indices, updates), update_window_dims={},
    inserted_window_dims={0}, scatter_dims_to_operand_dims={0}, index_vector_dim=1,
    unique_indices=true, to_apply=add_f32
  pair = (f32[8], s32[8]) scatter(operand, ints, indices, updates, int_updates),
    update_window_dims={}, inserted_window_dims={0}, scatter_dims_to_operand_dims={0},
    index_vector_dim=1, to_apply=argmax
  ROOT all = (f32[8], s32[8], f32[8], f32[8], (f32[8], s32[8])) tuple(sum, int_sum, last,
    unique, pair)
}
"""


#: The reducer of jnp.argmax as jax writes it, named ``argmax_reducer``: it keeps its
#: first operand when that is a NaN (``x > y or x != x``), so over two NaNs the order the
#: elements are combined in decides the index; equal values keep the lower index.
JAX_ARGMAX_REDUCER = """\
argmax_reducer {
  a = f32[] parameter(0)
  i = s32[] parameter(1)
  b = f32[] parameter(2)
  j = s32[] parameter(3)
  gt = pred[] compare(a, b), direction=GT
  a_nan = pred[] compare(a, a), direction=NE
  pick_a = pred[] or(gt, a_nan)
  value = f32[] select(pick_a, a, b)
  eq = pred[] compare(a, b), direction=EQ
  lower = pred[] compare(i, j), direction=LT
  tie = pred[] and(eq, lower)
  pick_i = pred[] or(pick_a, tie)
  index = s32[] select(pick_i, i, j)
  ROOT pair = (f32[], s32[]) tuple(value, index)
}
"""


def elementwise_chain(length: int, elements: int = 64) -> str:
    """An entry computing ``length`` elementwise ops one after another on one f32 parameter
    of ``elements``: the fusion passes' simplest growing fusion."""
    shape = f"f32[{elements}]{{0}}"
    lines = ["HloModule chain", "ENTRY e {", f"  v0 = {shape} parameter(0)"]
    for k in range(1, length + 1):
        op = "negate" if k % 2 else "exponential"
        lines.append(f"  v{k} = {shape} {op}(v{k - 1})")
    lines[-1] = lines[-1].replace(f"  v{length}", f"  ROOT v{length}")
    return "\n".join([*lines, "}"])


def division_chain(element_type: str) -> str:
    """Four divisions of ``element_type[80]`` chained through adds, the last read by two
    users: XLA's priority fusion duplicates the f32 chain into both users and keeps a
    c128 one a kernel of its own (its measured op profile; the fusion tests and the
    comparison with XLA's own dump of it)."""
    shape = f"{element_type}[80]{{0}}"
    return f"""HloModule division_chain

ENTRY e {{
  a = {shape} parameter(0)
  b = {shape} parameter(1)
  d1 = {shape} divide(a, b)
  q1 = {shape} add(d1, a)
  d2 = {shape} divide(b, q1)
  q2 = {shape} add(d2, b)
  d3 = {shape} divide(a, q2)
  q3 = {shape} add(d3, a)
  d4 = {shape} divide(b, q3)
  use_a = {shape} multiply(d4, a)
  use_b = {shape} subtract(d4, b)
  ROOT t = ({shape}, {shape}) tuple(use_a, use_b)
}}
"""
