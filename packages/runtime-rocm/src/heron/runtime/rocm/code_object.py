"""What an AMDGPU code object (HSACO) says about its kernels' arguments, and packing them.

The HIP runtime launches a kernel from a buffer of its explicit arguments
(``hipModuleLaunchKernel``'s ``extra`` with ``HIP_LAUNCH_PARAM_BUFFER_POINTER``),
laid out as the code object's metadata says: the ``NT_AMDGPU_METADATA`` ELF
note (owner ``AMDGPU``, type 32), a MessagePack map whose ``amdhsa.kernels``
list gives each kernel's ``.name``, ``.symbol`` (``NAME.kd``, its kernel
descriptor), ``.kernarg_segment_size``, ``.kernarg_segment_align`` and
``.args``: per argument ``.offset``, ``.size`` and ``.value_kind``
(``global_buffer`` for a pointer, ``by_value``, or ``hidden_*`` for what the
runtime itself fills in). The kernel descriptor (64 bytes at the ``.kd``
symbol) repeats the kernarg size at byte 8 and the static LDS size at byte 0,
which the loader uses: :func:`read_code_object` reads both and checks them
against each other.

heron's ABI is the CUDA side's: one 64-bit global pointer per buffer, inputs
then outputs (bare-pointer memrefs). :func:`pack_arguments` writes the
pointers at the metadata's offsets.

No MessagePack or ELF library is a dependency: the ELF reader and the
MessagePack decoder here read only what a code object holds (64-bit
little-endian ELF; MessagePack without extension types), refusing anything
else with a :class:`DeviceError` that says what.
"""

from __future__ import annotations

import struct
from collections.abc import Mapping, Sequence
from typing import Any

import attrs

from heron.runtime.core.device import DeviceError

__all__ = [
    "IMAGE_FORMATS",
    "CodeObject",
    "KernelArgument",
    "KernelMetadata",
    "decode_msgpack",
    "pack_arguments",
    "read_code_object",
]

#: The kernel images a HIP device loads: a code object (HSACO). The one declaration: the
#: backend's ``BackendSpec.image_formats`` is this, and ``HipDevice.load_kernel`` refuses
#: any other format.
IMAGE_FORMATS = ("hsaco",)
EM_AMDGPU = 224
NT_AMDGPU_METADATA = 32
_SHT_SYMTAB, _SHT_NOTE, _SHT_DYNSYM = 2, 7, 11
#: Kernel descriptor fields (AMDGPU's amdhsa kernel_descriptor_t): byte offsets.
_KD_GROUP_SEGMENT_FIXED_SIZE, _KD_KERNARG_SIZE, _KD_SIZE = 0, 8, 64


@attrs.frozen
class KernelArgument:
    """One entry of a kernel's ``.args``."""

    offset: int
    size: int
    value_kind: str

    @property
    def hidden(self) -> bool:
        """Filled in by the runtime (``hidden_*``), not by the caller."""
        return self.value_kind.startswith("hidden_")


@attrs.frozen
class KernelMetadata:
    """A kernel as the code object describes it (metadata and kernel descriptor)."""

    name: str
    symbol: str
    kernarg_segment_size: int
    kernarg_segment_align: int
    group_segment_fixed_size: int
    arguments: tuple[KernelArgument, ...]
    wavefront_size: int
    #: From the kernel descriptor at ``symbol`` (None when the ELF has no such symbol).
    descriptor_kernarg_size: int | None = None
    descriptor_group_segment_size: int | None = None

    @property
    def explicit_arguments(self) -> tuple[KernelArgument, ...]:
        return tuple(a for a in self.arguments if not a.hidden)

    @property
    def explicit_size(self) -> int:
        """Bytes of the caller's part of the kernarg buffer (the runtime appends hidden ones)."""
        explicit = self.explicit_arguments
        return max((a.offset + a.size for a in explicit), default=0)


@attrs.frozen
class CodeObject:
    """The kernels of one HSACO, by name, and its target (``amdgcn-amd-amdhsa--gfx942``)."""

    target: str
    kernels: Mapping[str, KernelMetadata]

    def kernel(self, name: str) -> KernelMetadata:
        if name not in self.kernels:
            raise DeviceError(
                f"the code object has no kernel '{name}' (kernels: {', '.join(self.kernels)})"
            )
        return self.kernels[name]


# -- ELF ----------------------------------------------------------------------------------


@attrs.frozen
class _Section:
    name: str
    type: int
    offset: int
    size: int
    link: int
    address: int
    entry_size: int


def _sections(image: bytes) -> list[_Section]:
    if len(image) < 64 or image[:4] != b"\x7fELF":
        raise DeviceError("not a code object: the image is not an ELF file")
    if image[4] != 2 or image[5] != 1:
        raise DeviceError("not a code object: not a 64-bit little-endian ELF")
    machine = struct.unpack_from("<H", image, 18)[0]
    if machine != EM_AMDGPU:
        raise DeviceError(f"not an AMDGPU code object (ELF e_machine {machine}, not 224)")
    (shoff,) = struct.unpack_from("<Q", image, 40)
    shentsize, shnum, shstrndx = struct.unpack_from("<HHH", image, 58)
    if shentsize != 64 or shoff + shnum * 64 > len(image):
        raise DeviceError("code object: its section header table lies outside the file")
    raw = []
    for index in range(shnum):
        name, kind, _flags, address, offset, size, link, _info, _align, entry = struct.unpack_from(
            "<IIQQQQIIQQ", image, shoff + index * 64
        )
        if kind != 8 and offset + size > len(image):  # 8: SHT_NOBITS, no bytes in the file
            raise DeviceError(f"code object: section {index} lies outside the file")
        raw.append((name, kind, offset, size, link, address, entry))
    names = raw[shstrndx] if shstrndx < len(raw) else None
    sections = []
    for name, kind, offset, size, link, address, entry in raw:
        text = _c_string(image, names[2] + name) if names else ""
        sections.append(_Section(text, kind, offset, size, link, address, entry))
    return sections


def _c_string(image: bytes, offset: int) -> str:
    end = image.find(b"\0", offset)
    return image[offset : end if end >= 0 else len(image)].decode("utf-8", "replace")


def _notes(image: bytes, section: _Section) -> list[tuple[str, int, bytes]]:
    """``(owner, type, description)`` of each note of a SHT_NOTE section (4-byte aligned)."""
    notes, position, end = [], section.offset, section.offset + section.size
    while position + 12 <= end:
        name_size, description_size, kind = struct.unpack_from("<III", image, position)
        position += 12
        owner = image[position : position + name_size].rstrip(b"\0").decode("ascii", "replace")
        position += -(-name_size // 4) * 4
        description = image[position : position + description_size]
        position += -(-description_size // 4) * 4
        if position > end:
            raise DeviceError("code object: a note runs past its section")
        notes.append((owner, kind, description))
    return notes


def _symbols(image: bytes, sections: list[_Section]) -> dict[str, int]:
    """Symbol name -> file offset of its bytes (for symbols inside a section with bytes)."""
    found: dict[str, int] = {}
    for table in sections:
        if table.type not in (_SHT_SYMTAB, _SHT_DYNSYM) or table.entry_size != 24:
            continue
        strings = sections[table.link]
        for start in range(table.offset, table.offset + table.size, 24):
            name, _info, _other, shndx, value, _size = struct.unpack_from("<IBBHQQ", image, start)
            if not name or not 0 < shndx < len(sections):
                continue
            home = sections[shndx]
            if home.type == 8 or not home.address <= value < home.address + home.size:
                continue
            found.setdefault(
                _c_string(image, strings.offset + name), home.offset + value - home.address
            )
    return found


# -- MessagePack ---------------------------------------------------------------------------


def decode_msgpack(data: bytes) -> Any:
    """One MessagePack value from ``data`` (all of it): maps, arrays, strings, numbers.

    Extension types are refused (a code object's metadata has none).
    """
    value, end = _decode(data, 0)
    if end != len(data):
        raise DeviceError(f"MessagePack: {len(data) - end} bytes after the value")
    return value


def _take(data: bytes, position: int, size: int) -> tuple[bytes, int]:
    if position + size > len(data):
        raise DeviceError("MessagePack: truncated value")
    return data[position : position + size], position + size


def _decode(data: bytes, position: int) -> tuple[Any, int]:
    head, position = _take(data, position, 1)
    byte = head[0]
    if byte <= 0x7F:
        return byte, position
    if byte >= 0xE0:
        return byte - 0x100, position
    if 0x80 <= byte <= 0x8F:
        return _decode_map(data, position, byte & 0x0F)
    if 0x90 <= byte <= 0x9F:
        return _decode_array(data, position, byte & 0x0F)
    if 0xA0 <= byte <= 0xBF:
        raw, position = _take(data, position, byte & 0x1F)
        return raw.decode("utf-8"), position
    fixed = {0xC0: None, 0xC2: False, 0xC3: True}
    if byte in fixed:
        return fixed[byte], position
    numbers = {
        0xCA: ">f",
        0xCB: ">d",
        0xCC: ">B",
        0xCD: ">H",
        0xCE: ">I",
        0xCF: ">Q",
        0xD0: ">b",
        0xD1: ">h",
        0xD2: ">i",
        0xD3: ">q",
    }
    if byte in numbers:
        raw, position = _take(data, position, struct.calcsize(numbers[byte]))
        return struct.unpack(numbers[byte], raw)[0], position
    lengths = {0xC4: ">B", 0xC5: ">H", 0xC6: ">I", 0xD9: ">B", 0xDA: ">H", 0xDB: ">I"}
    if byte in lengths:
        raw, position = _take(data, position, struct.calcsize(lengths[byte]))
        payload, position = _take(data, position, struct.unpack(lengths[byte], raw)[0])
        return (payload if byte <= 0xC6 else payload.decode("utf-8")), position
    containers = {0xDC: (">H", _decode_array), 0xDD: (">I", _decode_array)}
    containers |= {0xDE: (">H", _decode_map), 0xDF: (">I", _decode_map)}
    if byte in containers:
        form, decoder = containers[byte]
        raw, position = _take(data, position, struct.calcsize(form))
        return decoder(data, position, struct.unpack(form, raw)[0])
    raise DeviceError(f"MessagePack: unsupported type byte {byte:#04x}")


def _decode_array(data: bytes, position: int, count: int) -> tuple[list, int]:
    items = []
    for _ in range(count):
        item, position = _decode(data, position)
        items.append(item)
    return items, position


def _decode_map(data: bytes, position: int, count: int) -> tuple[dict, int]:
    result = {}
    for _ in range(count):
        key, position = _decode(data, position)
        value, position = _decode(data, position)
        if not isinstance(key, str | int) or key in result:
            raise DeviceError(f"MessagePack: bad or repeated map key {key!r}")
        result[key] = value
    return result, position


# -- the code object -------------------------------------------------------------------------


def _field(entry: Mapping[str, Any], key: str, kernel: str, kind: type = int) -> Any:
    value = entry.get(key)
    if not isinstance(value, kind) or isinstance(value, bool) and kind is int:
        raise DeviceError(f"code object metadata of kernel '{kernel}': {key} is {value!r}")
    return value


def read_code_object(image: bytes) -> CodeObject:
    """The kernels an HSACO's metadata note describes, each checked against its descriptor.

    Raises :class:`DeviceError` for an image that is not an AMDGPU ELF, that
    has no metadata note, or whose descriptor disagrees with the metadata.
    """
    sections = _sections(image)
    metadata = None
    for section in sections:
        if section.type == _SHT_NOTE:
            for owner, kind, description in _notes(image, section):
                if owner == "AMDGPU" and kind == NT_AMDGPU_METADATA:
                    metadata = decode_msgpack(description)
    if not isinstance(metadata, dict) or not isinstance(metadata.get("amdhsa.kernels"), list):
        raise DeviceError("the code object has no AMDGPU metadata note with amdhsa.kernels")
    symbols = _symbols(image, sections)
    kernels: dict[str, KernelMetadata] = {}
    for entry in metadata["amdhsa.kernels"]:
        if not isinstance(entry, dict):
            raise DeviceError(f"code object metadata: a kernel entry is {entry!r}")
        name = _field(entry, ".name", "?", str)
        arguments = []
        for raw in entry.get(".args", []):
            if not isinstance(raw, dict):
                raise DeviceError(f"code object metadata of kernel '{name}': argument {raw!r}")
            arguments.append(
                KernelArgument(
                    _field(raw, ".offset", name),
                    _field(raw, ".size", name),
                    _field(raw, ".value_kind", name, str),
                )
            )
        kernel = KernelMetadata(
            name=name,
            symbol=_field(entry, ".symbol", name, str),
            kernarg_segment_size=_field(entry, ".kernarg_segment_size", name),
            kernarg_segment_align=_field(entry, ".kernarg_segment_align", name),
            group_segment_fixed_size=_field(entry, ".group_segment_fixed_size", name),
            arguments=tuple(arguments),
            wavefront_size=_field(entry, ".wavefront_size", name),
            **_descriptor(image, symbols.get(_field(entry, ".symbol", name, str))),
        )
        _check(kernel)
        kernels[name] = kernel
    target = metadata.get("amdhsa.target", "")
    return CodeObject(target if isinstance(target, str) else "", kernels)


def _descriptor(image: bytes, offset: int | None) -> dict[str, int | None]:
    if offset is None or offset + _KD_SIZE > len(image):
        return {}
    return {
        "descriptor_group_segment_size": struct.unpack_from(
            "<I", image, offset + _KD_GROUP_SEGMENT_FIXED_SIZE
        )[0],
        "descriptor_kernarg_size": struct.unpack_from("<I", image, offset + _KD_KERNARG_SIZE)[0],
    }


def _check(kernel: KernelMetadata) -> None:
    """The metadata is self-consistent and agrees with the kernel descriptor."""
    name = kernel.name
    end = 0
    for argument in sorted(kernel.arguments, key=lambda a: a.offset):
        if argument.offset < end:
            raise DeviceError(f"kernel '{name}': argument at {argument.offset} overlaps another")
        end = argument.offset + argument.size
    if end > kernel.kernarg_segment_size:
        raise DeviceError(
            f"kernel '{name}': arguments end at byte {end}, past .kernarg_segment_size"
            f" {kernel.kernarg_segment_size}"
        )
    if (
        kernel.descriptor_kernarg_size is not None
        and kernel.descriptor_kernarg_size != kernel.kernarg_segment_size
    ):
        raise DeviceError(
            f"kernel '{name}': its descriptor says {kernel.descriptor_kernarg_size} kernarg"
            f" bytes, its metadata {kernel.kernarg_segment_size}"
        )


def pack_arguments(kernel: KernelMetadata, pointers: Sequence[int]) -> bytes:
    """The explicit kernarg bytes for a launch: each device pointer at its argument's offset.

    heron's ABI: every explicit argument is an 8-byte ``global_buffer``, one per
    buffer; anything else is a :class:`DeviceError` naming the kernel and the
    argument. Hidden arguments are the runtime's (it appends them).
    """
    explicit = kernel.explicit_arguments
    if len(pointers) != len(explicit):
        raise DeviceError(
            f"kernel '{kernel.name}' takes {len(explicit)} arguments, given {len(pointers)} buffers"
        )
    packed = bytearray(kernel.explicit_size)
    for number, (argument, pointer) in enumerate(zip(explicit, pointers, strict=True)):
        if argument.value_kind != "global_buffer" or argument.size != 8:
            raise DeviceError(
                f"kernel '{kernel.name}' argument {number} is a {argument.size}-byte"
                f" {argument.value_kind}, not a 64-bit global buffer pointer (heron's kernel ABI)"
            )
        if not 0 <= int(pointer) < 1 << 64:
            raise DeviceError(f"device pointer {pointer!r} does not fit 64 bits")
        struct.pack_into("<Q", packed, argument.offset, int(pointer))
    return bytes(packed)
