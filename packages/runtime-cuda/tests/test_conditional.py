"""The kernels that set CUDA conditional nodes' conditions: their PTX and their parameters.

ptxas is the judge of PTX without a GPU: it must accept the kernels for the
archs heron targets in a whole-program compile, which leaves
``cudaGraphSetConditional`` for the driver to resolve at load (and refuses
any other unresolved function, which the second test shows). What the
kernels compute is checked on a GPU (test_device.py's real-GPU test) and, as
the stand-in driver models it, against the interpreter.
"""

from __future__ import annotations

import pytest

from heron.runtime.cuda.conditional import (
    BRANCH_KERNEL,
    COUNT_KERNEL,
    COUNTDOWN_KERNEL,
    SET_CONDITION_PTX,
    WHILE_KERNEL,
)
from heron.runtime.cuda.kernel_abi import pack_values, ptx_entry_names, ptx_entry_signature


def _assemble(ptx: str, arch: str) -> bytes:
    """``ptx`` assembled whole-program, as the driver JIT-compiles it: by the ptxas
    executable (nvJitLink, heron's compile-side assembler, links relocatable code)."""
    compiler_tools = pytest.importorskip("heron.runtime.cuda.compiler_tools")
    try:
        ptxas = compiler_tools.find_ptxas()
    except compiler_tools.ToolNotFoundError as exc:
        pytest.skip(str(exc))
    with pytest.MonkeyPatch.context() as patch:
        patch.setenv("HERON_PTXAS", str(ptxas))
        return compiler_tools.assemble_cubin(ptx, arch)


@pytest.mark.parametrize("arch", ["sm_80", "sm_90", "sm_100"])
def test_ptxas_accepts_the_condition_kernels(arch):
    cubin = _assemble(SET_CONDITION_PTX, arch)
    assert cubin[:4] == b"\x7fELF"
    for kernel in (WHILE_KERNEL, BRANCH_KERNEL, COUNT_KERNEL, COUNTDOWN_KERNEL):
        assert kernel.encode() in cubin
    assert b"cudaGraphSetConditional" in cubin  # left for the driver to resolve


def test_ptxas_refuses_an_unknown_external_function():
    from heron.runtime.cuda.compiler_tools import PtxasError

    misspelt = SET_CONDITION_PTX.replace("cudaGraphSetConditional", "cudaGraphSetCondition")
    with pytest.raises(PtxasError, match="Unresolved extern function 'cudaGraphSetCondition'"):
        _assemble(misspelt, "sm_90")


def test_the_kernels_parameters():
    assert ptx_entry_names(SET_CONDITION_PTX) == (
        WHILE_KERNEL,
        BRANCH_KERNEL,
        COUNT_KERNEL,
        COUNTDOWN_KERNEL,
    )
    count = ptx_entry_signature(SET_CONDITION_PTX, COUNT_KERNEL)
    assert [(p.offset, p.size) for p in count.parameters] == [(0, 8), (8, 8), (16, 4)]
    down = ptx_entry_signature(SET_CONDITION_PTX, COUNTDOWN_KERNEL)
    assert [(p.offset, p.size) for p in down.parameters] == [(0, 8), (8, 8)]
    setter = ptx_entry_signature(SET_CONDITION_PTX, WHILE_KERNEL)
    assert [(p.offset, p.size) for p in setter.parameters] == [(0, 8), (8, 8)]
    branch = ptx_entry_signature(SET_CONDITION_PTX, BRANCH_KERNEL)
    assert [(p.offset, p.size) for p in branch.parameters] == [
        (0, 8),
        (8, 8),
        (16, 4),
        (20, 4),
        (24, 4),
    ]
    packed = pack_values(branch, [0x1001, 0x7F00_0000_0040, 1, 2, 3])
    assert packed == (
        (0x1001).to_bytes(8, "little")
        + (0x7F00_0000_0040).to_bytes(8, "little")
        + bytes([1, 0, 0, 0, 2, 0, 0, 0, 3, 0, 0, 0])
        + bytes(4)  # the buffer is aligned to its widest parameter
    )
