"""heron's CUDA kernel ABI, read from the code: the ``.entry`` parameter list of the PTX.

heron lowers memrefs with the bare-pointer calling convention
(``convert-gpu-to-nvvm{use-bare-ptr-memref-call-conv=true}``, see
``compiler.py``): a kernel takes one 64-bit global pointer per buffer, in the
kernel's argument order (inputs, then outputs), and nothing else. A launch
hands the driver one value per parameter; how they lie in the parameter space
(offset and size of each) is what the PTX declares::

    .visible .entry fusion(
        .param .u64 .ptr .align 16 fusion_param_0,
        .param .u64 .ptr .align 16 fusion_param_1
    )

Each parameter sits at the next offset aligned to its own alignment: the size
of its type for a scalar (``.ptr .align N`` is the *pointee's* alignment, not
the parameter's), ``.align N`` for a ``.b8`` array. This module reads that
list (:func:`ptx_entry_signature`), packs device pointers into the
parameter buffer it describes (:func:`pack_arguments`), and says which
architecture a cubin was assembled for (:func:`cubin_arch`), so that the
device can JIT the PTX instead when the cubin does not fit. All of it is pure
Python and runs without a GPU.
"""

from __future__ import annotations

import re
import struct
from collections.abc import Sequence

import attrs

from heron.runtime.core.device import DeviceError, KernelImage

__all__ = [
    "IMAGE_FORMATS",
    "KernelParameter",
    "choose_image",
    "KernelSignature",
    "cubin_arch",
    "cubin_runs_on",
    "pack_arguments",
    "pack_values",
    "ptx_entry_signature",
    "ptx_entry_names",
]

#: The kernel images a CUDA device loads, in order of preference: a cubin (when its arch
#: runs on the device), else the PTX the driver JIT-compiles. The one declaration: the
#: backend's ``BackendSpec.image_formats`` is this, and ``CudaDevice.load_kernel`` refuses
#: any other format.
IMAGE_FORMATS = ("cubin", "ptx")
#: Bytes of each PTX fundamental type.
_TYPE_SIZES = {
    **dict.fromkeys(("u8", "s8", "b8"), 1),
    **dict.fromkeys(("u16", "s16", "b16", "f16", "bf16"), 2),
    **dict.fromkeys(("u32", "s32", "b32", "f32"), 4),
    **dict.fromkeys(("u64", "s64", "b64", "f64"), 8),
}
_ENTRY = re.compile(r"\.entry\s+([A-Za-z_$%][\w$%]*)\s*\(")
_PARAMETER = re.compile(
    r"\.param\s+"
    r"(?:\.align\s+(?P<array_align>\d+)\s+)?"
    r"\.(?P<type>[a-z]+\d+)\s+"
    r"(?P<pointer>\.ptr\s+(?:\.(?:global|const|local|shared)\s+)?(?:\.align\s+\d+\s+)?)?"
    r"(?P<name>[A-Za-z_$%][\w$%]*)"
    r"(?:\s*\[\s*(?P<count>\d+)\s*\])?"
)
#: ELF ``EI_OSABI`` of a CUDA cubin, and the ABI version from which the SM moved up a byte.
_ELFOSABI_CUDA = 0x33, 0x41
_ABI_VERSION_SM_IN_SECOND_BYTE = 8


@attrs.frozen
class KernelParameter:
    """One ``.param`` of a kernel entry: where it lies in the parameter buffer."""

    name: str
    type: str  # the PTX type: "u64", "b8"...
    size: int
    alignment: int
    offset: int
    #: ``.ptr``: a pointer to global memory (heron's buffers).
    is_pointer: bool


@attrs.frozen
class KernelSignature:
    """A kernel's parameters in order, and the size of its parameter buffer."""

    kernel_name: str
    parameters: tuple[KernelParameter, ...]

    @property
    def size(self) -> int:
        """Bytes of the parameter buffer: the last parameter's end, aligned to the widest."""
        if not self.parameters:
            return 0
        end = max(p.offset + p.size for p in self.parameters)
        return _align_up(end, max(p.alignment for p in self.parameters))


def _align_up(value: int, alignment: int) -> int:
    return -(-value // alignment) * alignment


def ptx_entry_names(ptx: str) -> tuple[str, ...]:
    """The names of every ``.entry`` (kernel) the PTX defines, in order."""
    return tuple(match.group(1) for match in _ENTRY.finditer(_strip_comments(ptx)))


def _strip_comments(ptx: str) -> str:
    ptx = re.sub(r"/\*.*?\*/", " ", ptx, flags=re.S)
    return re.sub(r"//[^\n]*", "", ptx)


def ptx_entry_signature(ptx: str | bytes, kernel_name: str) -> KernelSignature:
    """The parameter list of ``.entry kernel_name(...)`` in ``ptx``, with offsets.

    Raises :class:`DeviceError` when the kernel is not there or a parameter
    is one this reader does not know (naming it).
    """
    text = _strip_comments(ptx.decode("utf-8", "replace") if isinstance(ptx, bytes) else ptx)
    for match in _ENTRY.finditer(text):
        if match.group(1) == kernel_name:
            close = text.find(")", match.end())
            if close < 0:
                raise DeviceError(f"PTX .entry {kernel_name}: unterminated parameter list")
            return _signature(kernel_name, text[match.end() : close])
    found = ", ".join(ptx_entry_names(text)) or "none"
    raise DeviceError(f"the PTX has no .entry {kernel_name} (entries: {found})")


def _signature(kernel_name: str, parameter_list: str) -> KernelSignature:
    parameters: list[KernelParameter] = []
    offset = 0
    for raw in (part.strip() for part in parameter_list.split(",")):
        if not raw:
            continue
        match = _PARAMETER.fullmatch(" ".join(raw.split()))
        if match is None or match["type"] not in _TYPE_SIZES:
            raise DeviceError(f"PTX .entry {kernel_name}: cannot read parameter {raw!r}")
        element = _TYPE_SIZES[match["type"]]
        count = int(match["count"]) if match["count"] else 1
        alignment = int(match["array_align"]) if match["array_align"] else element
        offset = _align_up(offset, alignment)
        parameters.append(
            KernelParameter(
                name=match["name"],
                type=match["type"],
                size=element * count,
                alignment=alignment,
                offset=offset,
                is_pointer=match["pointer"] is not None,
            )
        )
        offset += element * count
    return KernelSignature(kernel_name, tuple(parameters))


def pack_arguments(signature: KernelSignature, pointers: Sequence[int]) -> bytes:
    """The parameter buffer for a launch: each device pointer at its parameter's offset.

    heron's ABI is one 64-bit pointer per buffer, so every parameter must be
    8 bytes wide and there must be exactly one pointer per parameter; anything
    else is a :class:`DeviceError` naming the kernel and the parameter (a
    kernel compiled with another calling convention, or the wrong buffers).
    Padding bytes are zero.
    """
    for parameter in signature.parameters:
        if parameter.size != 8:
            raise DeviceError(
                f"kernel '{signature.kernel_name}' parameter {parameter.name} is a"
                f" {parameter.size}-byte .{parameter.type}, not a 64-bit buffer pointer"
                " (heron's kernel ABI)"
            )
    return pack_values(signature, pointers, what="buffers")


def pack_values(signature: KernelSignature, values: Sequence[int], what: str = "values") -> bytes:
    """The parameter buffer holding each unsigned integer at its parameter's offset and width.

    For heron's own helper kernels (``conditional``), whose parameters are
    not all pointers; a value that does not fit its parameter is refused.
    """
    parameters = signature.parameters
    if len(values) != len(parameters):
        raise DeviceError(
            f"kernel '{signature.kernel_name}' takes {len(parameters)} parameters"
            f" ({', '.join(p.name for p in parameters) or 'none'}), given {len(values)} {what}"
        )
    packed = bytearray(signature.size)
    for parameter, value in zip(parameters, values, strict=True):
        if not 0 <= int(value) < 1 << (8 * parameter.size):
            raise DeviceError(
                f"kernel '{signature.kernel_name}' parameter {parameter.name}: {value!r} does not"
                f" fit {parameter.size} bytes"
            )
        offset = parameter.offset
        packed[offset : offset + parameter.size] = int(value).to_bytes(parameter.size, "little")
    return bytes(packed)


def cubin_arch(image: bytes) -> tuple[int, int]:
    """The compute capability ``(major, minor)`` a cubin was assembled for.

    A cubin is an ELF64 whose ``EI_OSABI`` is CUDA's; the SM number is in
    ``e_flags``: its low byte up to ELF ABI version 7, its second byte from
    version 8 (the CUDA 13 toolchain: ``sm_90`` is ``0x...5a..``).
    """
    if len(image) < 52 or image[:4] != b"\x7fELF" or image[4] != 2:
        raise DeviceError("not a cubin: the image is not a 64-bit ELF file")
    if image[7] not in _ELFOSABI_CUDA:
        raise DeviceError(f"not a cubin: ELF OS ABI {image[7]:#x} is not CUDA's")
    flags = struct.unpack_from("<I", image, 48)[0]
    abi_version = image[8]
    sm = (flags >> 8) & 0xFF if abi_version >= _ABI_VERSION_SM_IN_SECOND_BYTE else flags & 0xFF
    if sm < 10:
        raise DeviceError(f"cubin e_flags {flags:#x} (ABI version {abi_version}) name no SM")
    return divmod(sm, 10)


def cubin_runs_on(image_arch: tuple[int, int], device: tuple[int, int]) -> bool:
    """Whether a cubin for ``image_arch`` runs on a device of compute capability ``device``.

    CUDA's binary compatibility: the same major version and a device minor at
    least the cubin's (an sm_80 cubin runs on sm_86, not on sm_90).
    """
    return image_arch[0] == device[0] and image_arch[1] <= device[1]


def choose_image(images: Sequence[KernelImage], device: tuple[int, int]) -> KernelImage:
    """The image to load on a device of compute capability ``device``.

    A cubin that runs there (:func:`cubin_runs_on`) first: it needs no JIT.
    Otherwise the PTX, which the driver JIT-compiles for the device (PTX for
    an older arch runs on a newer device). Neither: :class:`DeviceError`
    saying what the images were built for.
    """
    ptx = None
    built_for = []
    for image in images:
        if image.format == "cubin":
            arch = cubin_arch(image.data)
            if cubin_runs_on(arch, device):
                return image
            built_for.append(f"cubin sm_{arch[0]}{arch[1]}")
        elif image.format == "ptx" and ptx is None:
            ptx = image
        else:
            built_for.append(image.format)
    if ptx is not None:
        return ptx
    major, minor = device
    listing = ", ".join(built_for) or "none"
    raise DeviceError(
        f"no image runs on this sm_{major}{minor} device (images: {listing});"
        " compile for its arch or keep the PTX"
    )
