"""LLVM IR definitions for the two OCKL functions the ROCDL lowering calls.

``convert-gpu-to-rocdl`` turns ``gpu.block_dim`` into ``__ockl_get_local_size``
and ``gpu.grid_dim`` into ``__ockl_get_num_groups``, both from the ROCm device
libraries, which heron does not ship. These definitions read the same numbers
from the HSA kernel dispatch packet (``llvm.amdgcn.dispatch.ptr``):
``workgroup_size_{x,y,z}`` are u16 at byte 4, 6, 8 and ``grid_size_{x,y,z}``
(in work-items) are u32 at byte 12, 16, 20. Written from the HSA packet
layout, not from the device libraries: blocks are always full (HIP's
``blockDim``), unlike OpenCL's partial last group.
"""

from __future__ import annotations

OCKL_SHIMS = """
declare ptr addrspace(4) @llvm.amdgcn.dispatch.ptr()

define i64 @__ockl_get_local_size(i32 %dim) #0 {
  %packet = call ptr addrspace(4) @llvm.amdgcn.dispatch.ptr()
  %twice = shl i32 %dim, 1
  %offset = add i32 %twice, 4
  %field = getelementptr inbounds i8, ptr addrspace(4) %packet, i32 %offset
  %size = load i16, ptr addrspace(4) %field, align 2
  %wide = zext i16 %size to i64
  ret i64 %wide
}

define i64 @__ockl_get_num_groups(i32 %dim) #0 {
  %packet = call ptr addrspace(4) @llvm.amdgcn.dispatch.ptr()
  %four = shl i32 %dim, 2
  %offset = add i32 %four, 12
  %field = getelementptr inbounds i8, ptr addrspace(4) %packet, i32 %offset
  %grid = load i32, ptr addrspace(4) %field, align 4
  %grid64 = zext i32 %grid to i64
  %local = call i64 @__ockl_get_local_size(i32 %dim)
  %padded = add i64 %grid64, %local
  %rounded = sub i64 %padded, 1
  %groups = udiv i64 %rounded, %local
  ret i64 %groups
}

attributes #0 = { alwaysinline nounwind }
"""

SHIMMED = frozenset({"__ockl_get_local_size", "__ockl_get_num_groups"})
