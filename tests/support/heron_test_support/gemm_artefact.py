"""A small artefact whose whole program is one GEMM library call (heron's kernel beside it):
what the CUDA device tests run on the stand-in driver and cuBLASLt (no PTX is executed)."""

from __future__ import annotations

from heron.runtime.core.artefact import Allocation, Artefact, EntrySignature, KernelEntry
from heron.runtime.core.device import KernelImage
from heron.runtime.core.gemm import GemmCall
from heron.runtime.core.thunks import BufferSlice, KernelThunk, LibraryCallThunk
from heron.target import Target

__all__ = ["CALL", "gemm_artefact"]

CALL = GemmCall(2, 3, 4, 5, bias=True, activation="relu")
PTX = """
.version 8.0
.target sm_90
.address_size 64
.visible .entry gemm_fusion(
    .param .u64 .ptr .align 16 p0,
    .param .u64 .ptr .align 16 p1,
    .param .u64 .ptr .align 16 p2,
    .param .u64 .ptr .align 16 p3
)
{ ret; }
"""


def gemm_artefact() -> Artefact:
    """(lhs, rhs, bias) -> relu(lhs @ rhs + bias): a library call, heron's kernel beside it."""
    sizes = CALL.byte_sizes()
    slices = [BufferSlice(i, 0, size) for i, size in enumerate(sizes)]
    launch = KernelThunk("gemm_fusion", "fusion", slices, (1, 1, 1), (32, 1, 1))
    call = LibraryCallThunk(
        "blas", "gemm", slices, CALL.attributes(), fallback=[launch], fallback_emitter="gemm"
    )
    return Artefact(
        target=Target.preset("h100"),
        program=[call],
        allocations=[
            Allocation(0, sizes[0], "parameter", parameter=0),
            Allocation(1, sizes[1], "parameter", parameter=1),
            Allocation(2, sizes[2], "parameter", parameter=2),
            Allocation(3, sizes[3], "output", output=0),
        ],
        signature=EntrySignature(
            ["f32[2,3,5]{2,1,0}", "f32[2,5,4]{2,1,0}", "f32[4]{0}"], ["f32[2,3,4]{2,1,0}"]
        ),
        kernels=[KernelEntry("cuda", "fusion", KernelImage("ptx", "gemm_fusion", PTX.encode()))],
    )
