"""Small HLO modules several test suites compile (the CLI, the driver, the targets).

Kept here once rather than as a copy in each test file; a test that needs a
variant writes its own.
"""

from __future__ import annotations

__all__ = ["SCALE"]

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
