"""Reading an HSACO's kernel metadata (ELF note, MessagePack) and packing the kernarg bytes.

The unit tests decode hand-made MessagePack and refuse broken images. The
corpus test compiles every fusion of the XLA corpus for the mi300x preset
(once, in a module-scoped fixture: about 15 s) and checks, for each kernel,
that the metadata has one 8-byte ``global_buffer`` per kernel argument at
offsets 0, 8, 16..., a ``.kernarg_segment_size`` of exactly those bytes (no
hidden arguments), a kernel descriptor agreeing on the kernarg and LDS sizes,
and packed bytes holding each pointer at its offset; where ``llvm-readobj`` is
installed, its reading of the same note gives the same offsets and sizes.
"""

from __future__ import annotations

import re
import shutil
import struct
import subprocess

import pytest

from heron.runtime.core.device import DeviceError
from heron.runtime.rocm.code_object import (
    KernelArgument,
    KernelMetadata,
    decode_msgpack,
    pack_arguments,
    read_code_object,
)


def test_msgpack_values():
    # {"a": [1, -1, 300, "xy", true, null, 1.5], "b": {}} written by hand
    data = bytes.fromhex("82a1619701ffcd012ca27879c3c0cb3ff8000000000000a16280")
    assert decode_msgpack(data) == {"a": [1, -1, 300, "xy", True, None, 1.5], "b": {}}
    assert decode_msgpack(bytes.fromhex("dc0002c2d0fe")) == [False, -2]
    with pytest.raises(DeviceError, match="truncated"):
        decode_msgpack(bytes.fromhex("92a3"))
    with pytest.raises(DeviceError, match="unsupported type byte 0xc7"):
        decode_msgpack(bytes.fromhex("c70101ff"))
    with pytest.raises(DeviceError, match="1 bytes after the value"):
        decode_msgpack(bytes.fromhex("0101"))
    with pytest.raises(DeviceError, match="repeated map key"):
        decode_msgpack(bytes.fromhex("82a16101a16102"))


def test_images_that_are_not_amdgpu_code_objects_are_refused():
    with pytest.raises(DeviceError, match="not an ELF file"):
        read_code_object(b"PK\x03\x04" + bytes(80))
    header = bytearray(64)
    header[:6] = b"\x7fELF\x02\x01"
    struct.pack_into("<H", header, 18, 62)  # x86-64
    with pytest.raises(DeviceError, match=r"not an AMDGPU code object \(ELF e_machine 62"):
        read_code_object(bytes(header))


def _kernel(arguments, size):
    return KernelMetadata("k", "k.kd", size, 8, 0, tuple(arguments), 64)


def test_packing_writes_explicit_pointers_and_leaves_hidden_arguments_to_the_runtime():
    kernel = _kernel(
        [
            KernelArgument(0, 8, "global_buffer"),
            KernelArgument(8, 8, "global_buffer"),
            KernelArgument(16, 8, "hidden_global_offset_x"),
        ],
        256,
    )
    assert kernel.explicit_size == 16
    assert struct.unpack("<2Q", pack_arguments(kernel, [0x1000, 0x2000])) == (0x1000, 0x2000)
    with pytest.raises(DeviceError, match="takes 2 arguments, given 3"):
        pack_arguments(kernel, [1, 2, 3])
    by_value = _kernel([KernelArgument(0, 4, "by_value")], 4)
    with pytest.raises(DeviceError, match="argument 0 is a 4-byte by_value, not a 64-bit"):
        pack_arguments(by_value, [1])


# -- every kernel of the corpus ---------------------------------------------------------------


@pytest.fixture(scope="module")
def corpus_code_objects(corpus_dir):
    """(file, kernel name, kernel argument count, HSACO) for every fusion, for mi300x."""
    from heron.compiler import compile_fusion, fusions_of
    from heron.hlo.parser import parse_module_file
    from heron.target import Target

    target = Target.preset("mi300x")
    compiled = []
    for path in sorted(corpus_dir.rglob("*.hlo")):
        for fusion in fusions_of(parse_module_file(path)):
            kernel = compile_fusion(fusion, target)
            (hsaco,) = [a.data for a in kernel.device_code() if a.extension == "hsaco"]
            name = str(path.relative_to(corpus_dir))
            compiled.append((name, kernel.kernel_name, len(kernel.arguments), hsaco))
    return compiled


def test_every_corpus_kernel_packs_as_its_metadata_declares(corpus_code_objects):
    assert len(corpus_code_objects) >= 105  # every fusion of the 105 files
    for name, kernel_name, argument_count, hsaco in corpus_code_objects:
        where = f"{name} ({kernel_name})"
        code_object = read_code_object(hsaco)
        assert code_object.target == "amdgcn-amd-amdhsa--gfx942", where
        kernel = code_object.kernel(kernel_name)
        arguments = kernel.arguments
        assert len(arguments) == argument_count, where
        for number, argument in enumerate(arguments):
            assert argument == KernelArgument(8 * number, 8, "global_buffer"), where
        assert kernel.kernarg_segment_size == 8 * argument_count == kernel.explicit_size, where
        assert kernel.descriptor_kernarg_size == kernel.kernarg_segment_size, where
        assert kernel.descriptor_group_segment_size == kernel.group_segment_fixed_size, where
        assert kernel.symbol == f"{kernel_name}.kd" and kernel.wavefront_size == 64, where
        pointers = [0x7F00_0000_0000 + 0x1_0000 * k + 8 * k for k in range(argument_count)]
        packed = pack_arguments(kernel, pointers)
        assert len(packed) == kernel.kernarg_segment_size, where
        for argument, pointer in zip(arguments, pointers, strict=True):
            assert struct.unpack_from("<Q", packed, argument.offset)[0] == pointer, where


@pytest.mark.skipif(shutil.which("llvm-readobj") is None, reason="llvm-readobj is not installed")
def test_llvm_readobj_reads_the_same_metadata(corpus_code_objects, tmp_path):
    for name, kernel_name, _, hsaco in corpus_code_objects[::7]:
        path = tmp_path / "kernel.hsaco"
        path.write_bytes(hsaco)
        listing = subprocess.run(
            ["llvm-readobj", "--notes", str(path)], capture_output=True, text=True, check=True
        ).stdout
        offsets = [int(v) for v in re.findall(r"\.offset:\s+(\d+)", listing)]
        sizes = [int(v) for v in re.findall(r"^\s+\.size:\s+(\d+)", listing, re.M)]
        (kernarg,) = [int(v) for v in re.findall(r"\.kernarg_segment_size:\s+(\d+)", listing)]
        kernel = read_code_object(hsaco).kernel(kernel_name)
        assert offsets == [a.offset for a in kernel.arguments], name
        assert sizes == [a.size for a in kernel.arguments], name
        assert kernarg == kernel.kernarg_segment_size, name
