"""heron's CUDA kernel ABI read from PTX, and the launch parameter buffer packed from it.

The unit tests feed hand-written ``.entry`` lists (scalars, arrays, comments)
to the reader. The corpus test compiles every fusion of the XLA corpus for the
h100 preset (PTX and, with ptxas, cubin; once, in a module-scoped fixture:
about 30 s) and checks, for each kernel, that its ``.entry`` has one 64-bit
global pointer per kernel argument at offsets 0, 8, 16..., that the packed
buffer puts each pointer at its parameter's offset, and that its cubin says
sm_90.
"""

from __future__ import annotations

import struct

import pytest

from heron.runtime.core.device import DeviceError, KernelImage
from heron.runtime.cuda.kernel_abi import (
    choose_image,
    cubin_arch,
    cubin_runs_on,
    pack_arguments,
    ptx_entry_names,
    ptx_entry_signature,
)

MIXED = """
// a comment with .entry fake( in it
.visible .entry first(
    .param .u64 .ptr .global .align 16 first_param_0,  // trailing comment
    .param .u32 first_param_1,
    .param .align 16 .b8 first_param_2[24],
    .param .u16 first_param_3,
    .param .f64 first_param_4
)
{ ret; }
/* .entry hidden( */
.entry second()
{ ret; }
"""


def test_parameters_lie_at_their_aligned_offsets():
    signature = ptx_entry_signature(MIXED, "first")
    layout = [(p.name, p.offset, p.size, p.alignment, p.is_pointer) for p in signature.parameters]
    assert layout == [
        ("first_param_0", 0, 8, 8, True),
        ("first_param_1", 8, 4, 4, False),
        ("first_param_2", 16, 24, 16, False),
        ("first_param_3", 40, 2, 2, False),
        ("first_param_4", 48, 8, 8, False),
    ]
    assert signature.size == 64  # 56, aligned to the widest alignment (16)
    assert ptx_entry_names(MIXED) == ("first", "second")
    assert ptx_entry_signature(MIXED, "second").parameters == ()


def test_unknown_kernel_and_unreadable_parameter_are_named():
    with pytest.raises(DeviceError, match=r"no \.entry third \(entries: first, second\)"):
        ptx_entry_signature(MIXED, "third")
    with pytest.raises(DeviceError, match=r"cannot read parameter '\.param \.q64 x'"):
        ptx_entry_signature(".entry k(.param .q64 x)", "k")


def test_packing_puts_each_pointer_at_its_offset_and_refuses_other_abis():
    signature = ptx_entry_signature(
        ".entry k(.param .u64 .ptr .align 16 a, .param .u64 .ptr .align 16 b)", "k"
    )
    packed = pack_arguments(signature, [0x7F00_0000_1000, 0x7F00_0000_2008])
    assert struct.unpack("<2Q", packed) == (0x7F00_0000_1000, 0x7F00_0000_2008)
    with pytest.raises(DeviceError, match=r"kernel 'k' takes 2 parameters \(a, b\), given 1"):
        pack_arguments(signature, [1])
    mixed = ptx_entry_signature(MIXED, "first")
    with pytest.raises(DeviceError, match="first_param_1 is a 4-byte .u32, not a 64-bit"):
        pack_arguments(mixed, [1, 2, 3, 4, 5])


def _elf(abi_version: int, flags: int) -> bytes:
    header = bytearray(64)
    header[:9] = bytes([0x7F, 0x45, 0x4C, 0x46, 2, 1, 1, 0x33, abi_version])
    struct.pack_into("<H", header, 18, 190)
    struct.pack_into("<I", header, 48, flags)
    return bytes(header)


def test_cubin_arch_from_either_flags_layout():
    assert cubin_arch(_elf(7, 0x0050_0550)) == (8, 0)  # SM in the low byte (ABI version 7)
    assert cubin_arch(_elf(8, 0x0600_5A04)) == (9, 0)  # SM in the second byte (version 8)
    with pytest.raises(DeviceError, match="not a cubin"):
        cubin_arch(b"\x7fELF" + bytes(60))
    assert cubin_runs_on((8, 0), (8, 6)) and not cubin_runs_on((8, 6), (8, 0))
    assert not cubin_runs_on((8, 0), (9, 0))


def test_choose_image_prefers_a_cubin_that_runs_then_the_ptx():
    sm80 = KernelImage("cubin", "k", _elf(8, 0x0600_5004))
    sm90 = KernelImage("cubin", "k", _elf(8, 0x0600_5A04))
    ptx = KernelImage("ptx", "k", b".entry k()")
    assert choose_image([ptx, sm80, sm90], (9, 0)) is sm90
    assert choose_image([sm90, ptx], (8, 6)) is ptx
    with pytest.raises(DeviceError, match=r"no image runs on this sm_86 device \(images: cubin"):
        choose_image([sm90], (8, 6))


# -- every kernel of the corpus ---------------------------------------------------------------


@pytest.fixture(scope="module")
def corpus_kernels(corpus_dir):
    """(file, CompiledKernel) for every fusion of the corpus, compiled for the h100 preset."""
    from heron.compiler import compile_fusion, fusions_of
    from heron.hlo.parser import parse_module_file
    from heron.target import Target

    target = Target.preset("h100")
    compiled = []
    for path in sorted(corpus_dir.rglob("*.hlo")):
        for fusion in fusions_of(parse_module_file(path)):
            compiled.append((str(path.relative_to(corpus_dir)), compile_fusion(fusion, target)))
    return compiled


def test_every_corpus_kernel_packs_as_its_ptx_entry_declares(corpus_kernels):
    assert len(corpus_kernels) >= 105  # every fusion of the 105 files
    for name, kernel in corpus_kernels:
        images = {a.extension: a.data for a in kernel.device_code()}
        signature = ptx_entry_signature(images["ptx"], kernel.kernel_name)
        parameters = signature.parameters
        where = f"{name} ({kernel.kernel_name})"
        assert len(parameters) == len(kernel.arguments), where
        for number, parameter in enumerate(parameters):
            assert (parameter.type, parameter.size, parameter.alignment) == ("u64", 8, 8), where
            assert parameter.is_pointer and parameter.offset == 8 * number, where
        pointers = [0x7F00_0000_0000 + 0x1_0000 * k + 8 * k for k in range(len(parameters))]
        packed = pack_arguments(signature, pointers)
        assert len(packed) == signature.size == 8 * len(parameters), where
        for parameter, pointer in zip(parameters, pointers, strict=True):
            assert struct.unpack_from("<Q", packed, parameter.offset)[0] == pointer, where
        if "cubin" in images:  # ptxas is part of the dev environment
            assert cubin_arch(images["cubin"]) == (9, 0), where
