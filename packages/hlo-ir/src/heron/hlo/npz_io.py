"""Arguments and results in ``.npz`` files, including element types numpy lacks.

``heron run`` reads a computation's arguments from an ``.npz`` file and writes
its results to one. An ``.npz`` holds numpy's own dtypes only: numpy writes a
bf16, fp8, f4 or 2/4-bit integer array (an ml_dtypes type) as raw bytes
(``|V2``, ``|V1``) that load back as untyped void, or, for f8e5m2, as ``<f1``,
which numpy cannot load at all. So heron stores such values *widened exactly*
and says what they really are beside them.

Outputs (``save_outputs``): leaf ``i`` of the flattened result is key
``out{i}``. A leaf whose element type numpy cannot store is widened exactly,
bf16 / f8* / f4e2m1fn to float32, s2 / s4 to int8, u2 / u4 to uint8, and key
``out{i}.hlo_type`` holds its HLO type name as a 0-d string array
(``np.array("bf16")``). Every other leaf is stored as it is, with no
``hlo_type`` key. ``load_outputs`` gives back the original arrays.

Inputs (``load_inputs``): key ``arg{i}`` feeds parameter ``i``. Its shape must
be the parameter's. When its dtype differs from the parameter's it is
converted if, and only if, the conversion is exact for every element: a
float32 array holding bf16 values feeds a bf16 parameter, an int8 array
holding values in [-8, 7] feeds an s4 one; a value that would change (a
float32 that is no bf16, 9 for s4, 1.5 for s32, inf for f8e4m3fn) is refused
with an error naming the argument, the parameter, the dtype and the first
such value. An ``arg{i}.hlo_type`` key, as ``save_inputs`` writes it, must
name the parameter's type.

Reading is defensive (an .npz is untrusted input): the archive is read with
:mod:`zipfile` member by member, and each member's NPY header (magic, version,
dtype, shape) is read and checked *before* its data: against the parameter
it feeds (shape), against the archive's own record of the member's size, and
against heron's memory budget (:mod:`heron.hlo.memory_budget`). Data is then
decompressed with a cap of exactly the size the header declares. Object
arrays (pickles), members without the NPY magic, encrypted members and
compression methods :mod:`zipfile` cannot read are refused with an
``HloInputError`` naming the file and the member.
"""

from __future__ import annotations

import lzma
import os
import re
import stat
import tokenize
import warnings
import zipfile
import zlib
from collections.abc import Sequence

import numpy as np

from heron.hlo import memory_budget
from heron.hlo.element_types import ElementType
from heron.hlo.errors import HloInputError
from heron.hlo.shapes import ArrayShape, Shape

#: Element types an .npz cannot hold, and the numpy dtype each is stored as.
WIDENED_STORAGE: dict[ElementType, np.dtype] = {
    **{t: np.dtype(np.float32) for t in ElementType if t.is_floating and t.bit_width < 16},
    ElementType.BF16: np.dtype(np.float32),
    ElementType.S2: np.dtype(np.int8),
    ElementType.S4: np.dtype(np.int8),
    ElementType.U2: np.dtype(np.uint8),
    ElementType.U4: np.dtype(np.uint8),
}

TYPE_SUFFIX = ".hlo_type"


# -- writing -----------------------------------------------------------------


def _storable(array: np.ndarray, key: str) -> dict[str, np.ndarray]:
    """``{key: array}``, widened plus ``key.hlo_type`` when numpy cannot store the type."""
    try:
        element_type = ElementType.from_numpy(array.dtype)
    except ValueError:
        raise HloInputError(f"{key}: dtype {array.dtype} has no HLO element type") from None
    storage = WIDENED_STORAGE.get(element_type)
    if storage is None:
        return {key: array}
    return {key: array.astype(storage), key + TYPE_SUFFIX: np.array(element_type.value)}


def _write(path: str | os.PathLike, prefix: str, arrays: Sequence[np.ndarray]) -> None:
    contents: dict[str, np.ndarray] = {}
    for i, array in enumerate(arrays):
        if not isinstance(array, np.ndarray):
            raise HloInputError(
                f"{prefix}{i} is a {type(array).__name__}, not an array; only arrays can be saved"
            )
        contents.update(_storable(array, f"{prefix}{i}"))
    # A file object, because np.savez appends ".npz" to a path that lacks it.
    with open(path, "wb") as f:
        np.savez(f, **contents)


def save_outputs(path: str | os.PathLike, leaves: Sequence[np.ndarray]) -> None:
    """Write result leaves as ``out0``, ``out1``, ... (see the module docstring)."""
    _write(path, "out", leaves)


def save_inputs(path: str | os.PathLike, arrays: Sequence[np.ndarray]) -> None:
    """Write arguments as ``arg0``, ``arg1``, ... in the same convention as outputs."""
    _write(path, "arg", arrays)


# -- reading -----------------------------------------------------------------


#: What zipfile and its decompressors raise for a damaged member.
_READ_ERRORS = (
    NotImplementedError,
    RuntimeError,
    zipfile.BadZipFile,
    EOFError,
    OSError,
    zlib.error,
    lzma.LZMAError,
)
_READABLE_METHODS = (zipfile.ZIP_STORED, zipfile.ZIP_DEFLATED, zipfile.ZIP_BZIP2, zipfile.ZIP_LZMA)


class _Member:
    """One ``.npy`` member of an archive whose header has been read (not its data)."""

    def __init__(self, archive: zipfile.ZipFile, info: zipfile.ZipInfo, label: str):
        self.archive, self.info, self.label = archive, info, label
        self.shape: tuple[int, ...] = ()
        self.dtype = np.dtype(np.uint8)
        self.fortran = False
        self.header_bytes = 0

    @property
    def data_bytes(self) -> int:
        count = 1
        for d in self.shape:
            count *= d
        return count * self.dtype.itemsize

    def read_header(self) -> None:
        from numpy.lib import format as npy

        info = self.info
        if info.flag_bits & 0x1:
            raise HloInputError(f"{self.label} is encrypted; heron reads unencrypted archives")
        if info.compress_type not in _READABLE_METHODS:
            raise HloInputError(
                f"{self.label} uses compression method {info.compress_type}, which heron cannot"
                " read (stored, deflate, bzip2 and lzma can be)"
            )
        try:
            with self.archive.open(info) as f:
                try:
                    version = npy.read_magic(f)
                except ValueError:
                    raise HloInputError(
                        f"{self.label} is not an .npy array (no NPY magic at its start)"
                    ) from None
                if version == (1, 0):
                    header = npy.read_array_header_1_0(f)
                elif version == (2, 0):
                    header = npy.read_array_header_2_0(f)
                else:
                    raise HloInputError(
                        f"{self.label}: NPY format version {version[0]}.{version[1]} is not"
                        " supported (1.0 and 2.0 are)"
                    )
                self.header_bytes = f.tell()
        except _READ_ERRORS as exc:
            raise HloInputError(f"{self.label}: cannot be read: {exc}") from exc
        except (ValueError, SyntaxError, TypeError, RecursionError, tokenize.TokenError) as exc:
            # numpy parses the header's dict with the tokenizer and ast: a damaged
            # header can fail in any of them.
            raise HloInputError(f"{self.label}: bad NPY header: {exc}") from exc
        self.shape, self.fortran, self.dtype = header
        if self.dtype.hasobject:
            raise HloInputError(
                f"{self.label} holds Python objects (a pickle); heron does not load pickles"
            )
        if self.dtype.itemsize == 0 or any(d < 0 for d in self.shape):
            raise HloInputError(
                f"{self.label}: bad NPY header: dtype {self.dtype}, shape {self.shape}"
            )

    def read_data(self) -> np.ndarray:
        """The array, decompressing no more than the header declares."""
        size = self.data_bytes
        declared = self.header_bytes + size
        if self.info.file_size != declared:
            raise HloInputError(
                f"{self.label}: the archive says the member inflates to {self.info.file_size}"
                f" bytes, its NPY header declares {declared} ({self.dtype} {self.shape});"
                " refused before decompressing it"
            )
        try:
            with self.archive.open(self.info) as f:
                f.read(self.header_bytes)
                data = bytearray(size)
                view, done = memoryview(data), 0
                while done < size:
                    n = f.readinto(view[done:])
                    if not n:
                        break
                    done += n
                if done != size:
                    raise HloInputError(f"{self.label}: data ends after {done} of {size} bytes")
        except _READ_ERRORS as exc:
            raise HloInputError(f"{self.label}: cannot be read: {exc}") from exc
        array = np.frombuffer(data, self.dtype, count=size // max(1, self.dtype.itemsize))
        order = "F" if self.fortran else "C"
        return array.reshape(self.shape, order=order)


def _members(path: str | os.PathLike, what: str, archive: zipfile.ZipFile) -> dict[str, _Member]:
    """Every member with its NPY header read, keyed as numpy keys them (``arg0.npy``: ``arg0``)."""
    members: dict[str, _Member] = {}
    for info in archive.infolist():
        if info.filename.endswith("/"):
            continue
        key = info.filename[: -len(".npy")] if info.filename.endswith(".npy") else info.filename
        member = _Member(archive, info, f"{what} file {path}: member '{info.filename}'")
        member.read_header()
        members[key] = member
    return members


def _archive(path: str | os.PathLike, what: str) -> zipfile.ZipFile:
    try:
        if isinstance(path, (str, os.PathLike)):
            if not stat.S_ISREG(os.stat(path).st_mode):  # a device or a FIFO would never end
                raise HloInputError(f"{what} file {path} is not a regular file")
            with open(path, "rb") as f:
                start = f.read(6)
        else:
            position = path.tell()
            start = path.read(6)
            path.seek(position)
        if start == b"\x93NUMPY":
            raise HloInputError(f"{what} file {path} holds one array (.npy), not an .npz archive")
        return zipfile.ZipFile(path)
    except OSError as exc:
        raise HloInputError(f"cannot read {what} file {path}: {exc.strerror or exc}") from exc
    except (ValueError, zipfile.BadZipFile, EOFError, NotImplementedError) as exc:
        raise HloInputError(f"{what} file {path} is not a readable .npz archive: {exc}") from exc


def _budget(members: dict[str, _Member], what: str, path: object, extra: int = 0) -> None:
    total = sum(m.data_bytes for m in members.values()) + extra
    memory_budget.check(total, f"the arrays of {what} file {path}")


def _small(member: _Member) -> np.ndarray:
    """A tag member (``.hlo_type``): read only when it is a few bytes."""
    if member.data_bytes > _MAX_TAG_BYTES:
        raise HloInputError(f"{member.label}: {member.data_bytes} bytes, not a type tag")
    return member.read_data()


#: The largest ``.hlo_type`` member read (a 0-d string array of a type name).
_MAX_TAG_BYTES = 1024


def _hlo_type(contents: dict[str, _Member], key: str, path: object) -> ElementType | None:
    member = contents.get(key + TYPE_SUFFIX)
    if member is None:
        return None
    raw = _small(member)
    if raw.shape != () or raw.dtype.kind != "U":
        raise HloInputError(f"{path}: {key}{TYPE_SUFFIX} must be a 0-d string array")
    try:
        return ElementType.parse(str(raw))
    except ValueError as exc:
        raise HloInputError(f"{path}: {key}{TYPE_SUFFIX}: {exc}") from None


def _check_keys(contents: dict[str, _Member], prefix: str, count: int | None, path) -> int:
    """Validate key names; return how many ``prefix{i}`` arrays there are."""
    pattern = re.compile(rf"{prefix}(0|[1-9][0-9]*)({re.escape(TYPE_SUFFIX)})?\Z")
    indices = set()
    for name in contents:
        match = pattern.match(name)
        if match is None:
            raise HloInputError(
                f"{path}: unexpected array '{name}' (expected keys {prefix}0, {prefix}1, ...)"
            )
        if match.group(2) is None:
            indices.add(int(match.group(1)))
        elif name[: -len(TYPE_SUFFIX)] not in contents:
            raise HloInputError(f"{path}: '{name}' has no array '{name[: -len(TYPE_SUFFIX)]}'")
    n = len(indices) if count is None else count
    extra = sorted(i for i in indices if i >= n)
    if extra:
        names = ", ".join(f"{prefix}{i}" for i in extra)
        if count is None:
            raise HloInputError(f"{path}: keys are not consecutive from {prefix}0: {names}")
        raise HloInputError(
            f"{path}: arrays {names} match no parameter (the computation takes {count})"
        )
    return n


def load_outputs(path: str | os.PathLike) -> list[np.ndarray]:
    """Read back what ``save_outputs`` wrote, with the original element types."""
    with _archive(path, "outputs") as archive:
        contents = _members(path, "outputs", archive)
        count = _check_keys(contents, "out", None, path)
        _budget(contents, "outputs", path)
        return _load_outputs(contents, count, path)


def _load_outputs(contents: dict[str, _Member], count: int, path: object) -> list[np.ndarray]:
    result = []
    for i in range(count):
        key = f"out{i}"
        array = contents[key].read_data()
        element_type = _hlo_type(contents, key, path)
        if element_type is not None:
            array = _convert_exactly(array, element_type, f"{path}: {key}")
        result.append(array)
    return result


def _first_difference(original: np.ndarray, back: np.ndarray) -> tuple[int, ...] | None:
    same = back == original
    if original.dtype.kind in "fc":
        same |= np.isnan(original) & np.isnan(back)
    if bool(np.all(same)):
        return None
    return tuple(int(i) for i in np.argwhere(~same)[0])


def _convert_exactly(array: np.ndarray, to: ElementType, label: str) -> np.ndarray:
    """``array`` as ``to``'s dtype, or HloInputError naming the first value that would change."""
    target = to.numpy_dtype
    if array.dtype == target:
        return array
    if array.dtype.kind not in "biufc":
        raise HloInputError(
            f"{label}: dtype {array.dtype} cannot be converted to {to}"
            + (
                " (numpy stores ml_dtypes arrays such as bf16 as raw bytes; store the values"
                " widened instead, e.g. as float32)"
                if array.dtype.kind == "V"
                else ""
            )
        )
    with np.errstate(all="ignore"), warnings.catch_warnings():
        warnings.simplefilter("ignore")
        converted = array.astype(target)
        back = converted.astype(array.dtype)
    where = _first_difference(array, back)
    if where is not None:
        at = f" at index {where}" if where else ""
        raise HloInputError(
            f"{label}: {array.dtype} value {str(array[where])}{at} is not exactly"
            f" representable as {to} (it would become {str(converted[where])});"
            f" give values of type {to}"
        )
    return converted


def load_inputs(
    path: str | os.PathLike,
    shapes: Sequence[Shape],
    names: Sequence[str] | None = None,
) -> list[np.ndarray]:
    """The arguments for parameters of ``shapes`` (in parameter order) from an .npz file.

    ``names`` are the parameters' names, for error messages. See the module
    docstring for the conversion rule.
    """
    with _archive(path, "inputs") as archive:
        contents = _members(path, "inputs", archive)
        _check_keys(contents, "arg", len(shapes), path)
        return _load_inputs(contents, shapes, names, path)


def _load_inputs(
    contents: dict[str, _Member], shapes: Sequence[Shape], names: Sequence[str] | None, path
) -> list[np.ndarray]:
    # Every header against its parameter before any data is read.
    converted = 0
    for i, shape in enumerate(shapes):
        key = f"arg{i}"
        named = f" '{names[i]}'" if names is not None else ""
        label = f"{key} (parameter {i}{named}, {shape})"
        if not isinstance(shape, ArrayShape) or shape.is_token:
            raise HloInputError(
                f"{label}: .npz inputs can only feed array parameters, not tuples or tokens"
            )
        if key not in contents:
            present = ", ".join(sorted(k for k in contents if TYPE_SUFFIX not in k)) or "none"
            raise HloInputError(f"{path}: no array '{key}' for {label} (arrays present: {present})")
        member = contents[key]
        declared = _hlo_type(contents, key, path)
        if declared is not None and declared is not shape.element_type:
            raise HloInputError(
                f"{path}: {label}: {key}{TYPE_SUFFIX} says {declared},"
                f" the parameter is {shape.element_type}"
            )
        if tuple(member.shape) != shape.dims:
            raise HloInputError(
                f"{path}: {label}: array has shape {tuple(member.shape)}, expected {shape.dims}"
            )
        if member.dtype != shape.element_type.numpy_dtype:
            converted += shape.num_elements * shape.element_type.byte_width
    _budget(contents, "inputs", path, converted)
    arguments = []
    for i, shape in enumerate(shapes):
        key = f"arg{i}"
        named = f" '{names[i]}'" if names is not None else ""
        label = f"{key} (parameter {i}{named}, {shape})"
        array = contents[key].read_data()
        arguments.append(
            np.asarray(_convert_exactly(array, shape.element_type, f"{path}: {label}"), order="C")
        )
    return arguments
