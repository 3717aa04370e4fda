"""Executable artefacts: one file holding everything a runtime needs to run a program.

An artefact is a zip archive (read by the standard library's ``zipfile``)
with a fixed layout (docs/runtime.md has the table):

=========================== ==========================================================
``heron-executable``        the magic member: first, stored, at offset 0
``manifest.json``           format version, heron version, creator, target, and the
                            size and sha256 of every other member
``program.json``            the thunk program (:mod:`heron.runtime.core.thunks`)
``allocations.json``        the allocation table: size, kind, parameter / output number
``signature.json``          the entry's parameter and result shapes, as HLO text
``kernels.json``            the kernel images: backend, key, format, kernel name, and
                            the member holding the bytes where another kernel's does
``kernels/B/KEY.FORMAT``    one kernel image's bytes (PTX, cubin, HSACO, interpreter);
                            kernels whose images are the same bytes (a cubin made of
                            several kernels by one ptxas) share the first one's
``constants/N.bin``         constant allocation N's bytes
``optimized.hlo``           (optional) the optimized module, for reports
=========================== ==========================================================

:func:`load` verifies all of it before anything is used, and refuses with an
:class:`ArtefactError` (one line, naming the member and the problem): a
foreign or truncated file, unsafe member names (absolute, ``..``, backslashes,
duplicates, directories, symlinks), encrypted or oddly compressed members,
sizes over the :class:`Limits` (checked on the archive's own directory, before
anything is decompressed: a zip bomb cannot exhaust memory), a format version
this heron does not read, a manifest whose listing is not exactly the
archive's members, a member whose size or sha256 differs from the manifest,
and any malformed table. Every member is data: JSON (read without pickle,
``NaN`` or duplicate keys) or bytes handed to a device later; nothing is
unpickled, imported or executed.
"""

from __future__ import annotations

import hashlib
import json
import os
import re
import stat
import tempfile
import zipfile
import zlib
from collections.abc import Iterable, Iterator, Mapping, Sequence
from pathlib import Path
from typing import Any

import attrs

from heron.hlo.errors import HloError
from heron.hlo.parser import parse_shape
from heron.runtime.core import __version__
from heron.runtime.core.device import KernelImage
from heron.runtime.core.gemm import GEMM, GemmTuning
from heron.runtime.core.thunks import (
    NAME_PATTERN,
    KernelThunk,
    LibraryCallThunk,
    Thunk,
    ThunkError,
    check_slices,
    program_from_json,
    program_to_json,
    walk,
)
from heron.target import Target, TargetError

__all__ = [
    "ALLOCATION_KINDS",
    "FORMAT_VERSION",
    "MAGIC",
    "MAGIC_MEMBER",
    "MANIFEST",
    "Allocation",
    "Artefact",
    "ArtefactError",
    "EntrySignature",
    "KernelEntry",
    "Limits",
    "load",
]

#: The artefact format this heron writes and the newest it reads.
#: 2: the manifest records the whole Target (every field of heron.target.Target).
#: 3: a kernels.json entry may name the member holding its image (``member``): kernels
#: whose images are the same bytes share one member.
#: 4: a kernel launched only beside a library call (its fallback) may have no image for a
#: backend whose devices always run the call (``BackendSpec.library_always_runs``).
FORMAT_VERSION = 4
#: The formats this heron reads (2 is 3 without shared image members; 3 is 4 with every
#: fallback kernel's image for every backend).
READABLE_VERSIONS = (2, 3, 4)
MAGIC_MEMBER = "heron-executable"
MAGIC = b"heron executable artefact\n"
MANIFEST = "manifest.json"
PROGRAM = "program.json"
ALLOCATIONS = "allocations.json"
SIGNATURE = "signature.json"
KERNELS = "kernels.json"
OPTIMIZED_HLO = "optimized.hlo"
ALLOCATION_KINDS = ("parameter", "constant", "output", "temp")

_ZIP_MAGIC = b"PK\x03\x04"
_MEMBER_NAME = re.compile(r"[A-Za-z0-9_][A-Za-z0-9_.-]*(/[A-Za-z0-9_][A-Za-z0-9_.-]*)*\Z")
_SHA256 = re.compile(r"[0-9a-f]{64}\Z")
#: 1980-01-01, zip's epoch: artefacts of the same program are byte-identical.
_TIMESTAMP = (1980, 1, 1, 0, 0, 0)


class ArtefactError(Exception):
    """An artefact is refused (or cannot be written); the message is one line and names why."""


@attrs.frozen
class Limits:
    """What :func:`load` accepts, checked before anything is decompressed."""

    max_member_bytes: int = 4 << 30
    max_total_bytes: int = 16 << 30
    #: the manifest and every JSON table
    max_json_bytes: int = 256 << 20
    max_members: int = 100_000


# -- the artefact's contents -----------------------------------------------------------


def _check(condition: bool, message: str) -> None:
    if not condition:
        raise ArtefactError(message)


def _manifest_target(value: Any) -> Target:
    """The manifest's target: every field of a :class:`heron.target.Target`, checked as a
    preset's are (the device it opens and the interpreter's warp width come from it)."""
    try:
        target = Target.from_json(value)
    except TargetError as error:
        raise ArtefactError(f"{MANIFEST}: target: {error}") from None
    _checked_name(target.name, f"{MANIFEST}: target name")
    return target


def _is_int(value: object) -> bool:
    return isinstance(value, int) and not isinstance(value, bool)


def _checked_name(value: Any, what: str) -> str:
    _check(
        isinstance(value, str) and bool(NAME_PATTERN.match(value)),
        f"{what} must be a name of letters, digits, '_', '.', '-', got {value!r:.80}",
    )
    return value


@attrs.frozen
class Allocation:
    """One allocation of the buffer assignment.

    ``kind`` is one of :data:`ALLOCATION_KINDS`. ``parameter`` is the entry
    parameter a parameter allocation holds; ``output`` the result (index into
    the signature's results) an output allocation holds, or that a parameter
    allocation aliases.
    """

    index: int
    size: int
    kind: str
    parameter: int | None = None
    output: int | None = None

    def __attrs_post_init__(self) -> None:
        where = f"allocation {self.index!r}"
        _check(_is_int(self.index) and self.index >= 0, f"{where}: index must be an integer >= 0")
        _check(_is_int(self.size) and self.size >= 0, f"{where}: size must be an integer >= 0")
        _check(
            self.kind in ALLOCATION_KINDS,
            f"{where}: kind must be one of {', '.join(ALLOCATION_KINDS)}, got {self.kind!r}",
        )
        for field in ("parameter", "output"):
            value = getattr(self, field)
            _check(
                value is None or (_is_int(value) and value >= 0),
                f"{where}: {field} must be null or an integer >= 0, got {value!r}",
            )
        _check(
            (self.parameter is not None) == (self.kind == "parameter"),
            f"{where}: a {self.kind} allocation "
            + ("needs a parameter number" if self.kind == "parameter" else "has no parameter"),
        )
        if self.kind == "output":
            _check(self.output is not None, f"{where}: an output allocation needs an output number")
        elif self.kind != "parameter":
            _check(self.output is None, f"{where}: a {self.kind} allocation is no output")

    def to_json(self) -> dict[str, Any]:
        return attrs.asdict(self)


@attrs.frozen
class EntrySignature:
    """The entry computation's parameter and result shapes, as HLO text (``f32[2,3]{1,0}``)."""

    parameters: tuple[str, ...] = attrs.field(converter=tuple)
    results: tuple[str, ...] = attrs.field(converter=tuple)

    def __attrs_post_init__(self) -> None:
        for role in ("parameters", "results"):
            for i, text in enumerate(getattr(self, role)):
                _check(isinstance(text, str), f"signature {role}[{i}] must be a string")
                try:
                    parse_shape(text)
                except HloError as error:
                    raise ArtefactError(
                        f"signature {role}[{i}] {text!r:.80} is not an HLO shape:"
                        f" {str(error).splitlines()[0]}"
                    ) from None

    def to_json(self) -> dict[str, Any]:
        return {"parameters": list(self.parameters), "results": list(self.results)}


@attrs.frozen
class KernelEntry:
    """The image of kernel ``key`` for ``backend`` (an artefact may hold several backends)."""

    backend: str
    key: str
    image: KernelImage

    def __attrs_post_init__(self) -> None:
        _checked_name(self.backend, "kernel backend")
        _checked_name(self.key, "kernel key")
        _checked_name(self.image.format, f"kernel {self.key!r} format")
        _checked_name(self.image.kernel_name, f"kernel {self.key!r} kernel name")
        _check(isinstance(self.image.data, bytes), f"kernel {self.key!r}: data must be bytes")

    @property
    def member(self) -> str:
        return f"kernels/{self.backend}/{self.key}.{self.image.format}"

    def to_json(self, member: str | None = None) -> dict[str, Any]:
        """The kernels.json entry; ``member``: the member holding the image, where that is
        not the entry's own (:attr:`member`)."""
        entry = {
            "backend": self.backend,
            "key": self.key,
            "format": self.image.format,
            "kernel_name": self.image.kernel_name,
        }
        if member is not None and member != self.member:
            entry["member"] = member
        return entry


def _kernel_thunks(
    thunks: Sequence[Thunk], beside_library: bool = False
) -> Iterator[tuple[KernelThunk, bool]]:
    """Every kernel thunk of ``thunks``, nested ones too, and whether it is in a library
    call's fallback (where a backend may hold no image for it)."""
    for thunk in thunks:
        if isinstance(thunk, KernelThunk):
            yield thunk, beside_library
        inside = beside_library or isinstance(thunk, LibraryCallThunk)
        yield from _kernel_thunks(tuple(thunk.children()), inside)


def _constant_member(index: int) -> str:
    return f"constants/{index}.bin"


@attrs.frozen
class Artefact:
    """An executable as a file holds it; built, it is consistent (the checks below).

    The program's slices lie inside the allocations; every kernel thunk's
    image exists for every backend the artefact holds, under the thunk's
    kernel name; every constant allocation has exactly its bytes; parameter
    and output numbers name the signature's parameters and results.
    """

    target: Target
    program: tuple[Thunk, ...] = attrs.field(converter=tuple)
    allocations: tuple[Allocation, ...] = attrs.field(converter=tuple)
    signature: EntrySignature
    kernels: tuple[KernelEntry, ...] = attrs.field(converter=tuple)
    constants: Mapping[int, bytes] = attrs.field(factory=dict, converter=dict)
    optimized_hlo: str | None = None
    created_by: str = "heron"
    heron_version: str = __version__

    def __attrs_post_init__(self) -> None:
        for position, allocation in enumerate(self.allocations):
            _check(
                allocation.index == position,
                f"allocation table: entry {position} has index {allocation.index}",
            )
        try:
            check_slices(self.program, [a.size for a in self.allocations])
        except ThunkError as error:
            raise ArtefactError(f"{PROGRAM}: {error}") from None
        self._check_kernels()
        self._check_constants()
        self._check_tunings()
        for allocation in self.allocations:
            if allocation.parameter is not None:
                _check(
                    allocation.parameter < len(self.signature.parameters),
                    f"allocation {allocation.index}: parameter {allocation.parameter}, but the"
                    f" entry has {len(self.signature.parameters)}",
                )
            if allocation.output is not None:
                _check(
                    allocation.output < len(self.signature.results),
                    f"allocation {allocation.index}: output {allocation.output}, but the entry"
                    f" has {len(self.signature.results)} results",
                )
        _check(isinstance(self.optimized_hlo, str | None), "optimized_hlo must be a string or None")

    def _check_tunings(self) -> None:
        """A GEMM call's autotuning result (``heron compile --autotune``) is well formed: the
        device reads its algorithm's bytes (the rest of a call is checked when the executor
        reads it against the call's contract)."""
        for thunk in walk(self.program):
            if not isinstance(thunk, LibraryCallThunk) or thunk.operation != GEMM:
                continue
            tuning = dict(thunk.attributes).get("tuning")
            if tuning is None:
                continue
            try:
                GemmTuning.from_attribute(tuning)
            except ThunkError as error:
                raise ArtefactError(
                    f"{PROGRAM}: library call {thunk.library}.{thunk.operation}: {error}"
                ) from None

    def _check_kernels(self) -> None:
        images: dict[tuple[str, str], KernelImage] = {}
        for entry in self.kernels:
            _check(
                (entry.backend, entry.key) not in images,
                f"{KERNELS}: kernel {entry.key!r} appears twice for backend {entry.backend!r}",
            )
            images[entry.backend, entry.key] = entry.image
        for thunk, beside_library in _kernel_thunks(self.program):
            for backend in self.backends:
                image = images.get((backend, thunk.image_key))
                if image is None and beside_library:
                    continue  # this backend's devices run the library call (compile's choice)
                _check(
                    image is not None,
                    f"{PROGRAM}: kernel thunk {thunk.kernel_name!r} needs image"
                    f" {thunk.image_key!r}, which backend {backend!r} lacks",
                )
                _check(
                    image.kernel_name == thunk.kernel_name,  # type: ignore[union-attr]
                    f"{PROGRAM}: kernel thunk {thunk.kernel_name!r} uses image"
                    f" {thunk.image_key!r} of backend {backend!r}, whose kernel is"
                    f" {image.kernel_name!r}",  # type: ignore[union-attr]
                )

    def runs_fallback(self, call: LibraryCallThunk, backend: str) -> bool:
        """Whether ``call``'s fallback can run on ``backend``: it has one, and every kernel
        it launches has an image for that backend (a compile leaves heron's kernel out
        of a backend whose devices always run the library call)."""
        if not call.fallback:
            return False
        held = {(entry.backend, entry.key) for entry in self.kernels}
        return all((backend, thunk.image_key) in held for thunk, _ in _kernel_thunks(call.fallback))

    def _check_constants(self) -> None:
        kinds = {a.index: a for a in self.allocations}
        for index, data in self.constants.items():
            allocation = kinds.get(index)
            _check(
                allocation is not None and allocation.kind == "constant",
                f"constants: allocation {index!r} is not a constant allocation",
            )
            _check(
                isinstance(data, bytes) and len(data) == allocation.size,  # type: ignore[union-attr]
                f"{_constant_member(index)}: {len(data)} bytes for a constant allocation of"
                f" {allocation.size}",  # type: ignore[union-attr]
            )
        for allocation in self.allocations:
            _check(
                allocation.kind != "constant" or allocation.index in self.constants,
                f"constants: constant allocation {allocation.index} has no bytes",
            )

    @property
    def backends(self) -> tuple[str, ...]:
        """The backends the artefact holds kernel images for, sorted."""
        return tuple(sorted({entry.backend for entry in self.kernels}))

    def kernel_image(self, backend: str, key: str) -> KernelImage:
        for entry in self.kernels:
            if entry.backend == backend and entry.key == key:
                return entry.image
        raise KeyError(f"no kernel image {key!r} for backend {backend!r}")

    # -- serialisation -----------------------------------------------------------------

    def members(self) -> dict[str, bytes]:
        """Every member but the magic and the manifest, by name (the layout above)."""
        # Images of one backend and format with the same bytes are written once.
        holders: dict[tuple[str, str, bytes], str] = {}
        images: dict[str, bytes] = {}
        entries = []
        for entry in self.kernels:
            digest = hashlib.sha256(entry.image.data).digest()
            holder = holders.setdefault((entry.backend, entry.image.format, digest), entry.member)
            if holder == entry.member:
                images[entry.member] = entry.image.data
            entries.append(entry.to_json(holder))
        members = {
            PROGRAM: _json_bytes(program_to_json(self.program)),
            ALLOCATIONS: _json_bytes([a.to_json() for a in self.allocations]),
            SIGNATURE: _json_bytes(self.signature.to_json()),
            KERNELS: _json_bytes(entries),
            **images,
        }
        for index in sorted(self.constants):
            members[_constant_member(index)] = self.constants[index]
        if self.optimized_hlo is not None:
            members[OPTIMIZED_HLO] = self.optimized_hlo.encode()
        return members

    def manifest(self, members: Mapping[str, bytes] | None = None) -> dict[str, Any]:
        members = self.members() if members is None else members
        return {
            "format_version": FORMAT_VERSION,
            "heron_version": self.heron_version,
            "created_by": self.created_by,
            "target": self.target.to_json(),
            "members": [
                {"name": name, "size": len(data), "sha256": hashlib.sha256(data).hexdigest()}
                for name, data in members.items()
            ],
        }

    def save(self, path: str | os.PathLike[str]) -> None:
        """Write the artefact to ``path`` (atomically: a reader never sees half of it)."""
        members = self.members()
        manifest = _json_bytes(self.manifest(members))
        path = Path(path)
        handle, temporary = tempfile.mkstemp(prefix=f".{path.name}.", dir=path.parent or ".")
        try:
            with os.fdopen(handle, "wb") as file, zipfile.ZipFile(file, "w") as archive:
                _write(archive, MAGIC_MEMBER, MAGIC, zipfile.ZIP_STORED)
                _write(archive, MANIFEST, manifest, zipfile.ZIP_DEFLATED)
                for name, data in members.items():
                    _write(archive, name, data, zipfile.ZIP_DEFLATED)
            # mkstemp makes the file 0600; an artefact is read like any output (0666 less
            # the umask), by whoever runs it
            umask = os.umask(0)
            os.umask(umask)
            os.chmod(temporary, 0o666 & ~umask)
            os.replace(temporary, path)
        except BaseException:
            Path(temporary).unlink(missing_ok=True)
            raise

    @classmethod
    def load(cls, path: str | os.PathLike[str], limits: Limits | None = None) -> Artefact:
        return load(path, limits)

    def describe(self) -> str:
        """A summary for ``heron-run --describe``: manifest, program, allocations, kernels."""
        members = self.members()
        kinds: dict[str, int] = {}
        for thunk in walk(self.program):
            kinds[thunk.kind] = kinds.get(thunk.kind, 0) + 1
        by_kind: dict[str, list[int]] = {}
        for allocation in self.allocations:
            by_kind.setdefault(allocation.kind, []).append(allocation.size)
        lines = [
            f"heron executable artefact, format version {FORMAT_VERSION}",
            f"  created by {self.created_by} (heron {self.heron_version})",
            f"  target: {self.target.name} ({self.target.backend}, {self.target.arch},"
            f" warps of {self.target.warp_size})",
            f"  entry: ({', '.join(self.signature.parameters)})"
            f" -> ({', '.join(self.signature.results)})",
            f"  program: {len(self.program)} top-level thunks; "
            + (", ".join(f"{k} {n}" for k, n in sorted(kinds.items())) or "none"),
            f"  allocations: {len(self.allocations)}, {sum(a.size for a in self.allocations)}"
            " bytes; "
            + (
                ", ".join(f"{k} {len(v)} ({sum(v)} B)" for k, v in sorted(by_kind.items()))
                or "none"
            ),
            f"  kernel images: {len({e.key for e in self.kernels})} kernels for "
            + (", ".join(self.backends) or "no backend"),
            f"  members ({len(members) + 2}):",
        ]
        every = {MAGIC_MEMBER: MAGIC, MANIFEST: _json_bytes(self.manifest(members)), **members}
        for name, data in every.items():
            lines.append(
                f"    {name:<40} {len(data):>10}  sha256 {hashlib.sha256(data).hexdigest()}"
            )
        return "\n".join(lines)


def _json_bytes(value: Any) -> bytes:
    return json.dumps(value, indent=1, sort_keys=True, allow_nan=False).encode()


def _write(archive: zipfile.ZipFile, name: str, data: bytes, compression: int) -> None:
    info = zipfile.ZipInfo(name, date_time=_TIMESTAMP)
    info.compress_type = compression
    info.external_attr = (stat.S_IFREG | 0o644) << 16
    archive.writestr(info, data)


# -- loading ---------------------------------------------------------------------------


def _member_name_problem(name: str) -> str | None:
    """Why ``name`` cannot be an artefact member (None when it can)."""
    if not name:
        return "an empty name"
    if name.startswith("/") or re.match(r"[A-Za-z]:", name):
        return "an absolute path"
    if name.endswith("/"):
        return "a trailing '/' (a directory entry)"
    if "\\" in name:
        return "a backslash"
    if ".." in name.split("/"):
        return "a '..' component (outside the archive)"
    if len(name) > 255 or not _MEMBER_NAME.match(name):
        return "characters or components outside [A-Za-z0-9_.-] separated by '/'"
    return None


def _read_bounded(archive: zipfile.ZipFile, info: zipfile.ZipInfo, size: int) -> bytes:
    """The member's bytes, never more than ``size`` + 1 of them in memory."""
    try:
        with archive.open(info) as stream:
            data = stream.read(size + 1)
    except (zipfile.BadZipFile, zlib.error, OSError, EOFError, ValueError) as error:
        raise ArtefactError(
            f"member {info.filename!r} is damaged and cannot be read: {error}"
        ) from None
    _check(
        len(data) == size,
        f"member {info.filename!r} holds {'more' if len(data) > size else len(data)}"
        f" bytes where {size} were declared",
    )
    return data


def _reject_constant(text: str) -> Any:
    raise ValueError(f"{text} is not JSON")


def _unique_keys(pairs: list[tuple[str, Any]]) -> dict[str, Any]:
    keys = [k for k, _ in pairs]
    if len(set(keys)) != len(keys):
        raise ValueError(f"repeated key {next(k for k in keys if keys.count(k) > 1)!r}")
    return dict(pairs)


def _parse_json(data: bytes, member: str) -> Any:
    try:
        return json.loads(
            data.decode("utf-8"), parse_constant=_reject_constant, object_pairs_hook=_unique_keys
        )
    except (UnicodeDecodeError, ValueError, RecursionError) as error:
        text = str(error).splitlines()[0] if str(error) else type(error).__name__
        raise ArtefactError(f"member {member!r} is not valid JSON: {text}") from None


def _check_archive(archive: zipfile.ZipFile, limits: Limits) -> dict[str, zipfile.ZipInfo]:
    """The members by name, once the archive's directory passed every check."""
    infos = archive.infolist()
    _check(
        len(infos) <= limits.max_members,
        f"the archive has {len(infos)} members, more than {limits.max_members}",
    )
    members: dict[str, zipfile.ZipInfo] = {}
    total = 0
    for info in infos:
        name = info.filename
        problem = _member_name_problem(name)
        _check(problem is None, f"member {name!r} is refused: its name has {problem}")
        _check(name not in members, f"member {name!r} appears more than once in the archive")
        mode = info.external_attr >> 16
        _check(not info.is_dir(), f"member {name!r} is a directory")
        _check(not stat.S_ISLNK(mode), f"member {name!r} is a symbolic link")
        _check(not info.flag_bits & 0x1, f"member {name!r} is encrypted")
        _check(
            info.compress_type in (zipfile.ZIP_STORED, zipfile.ZIP_DEFLATED),
            f"member {name!r} uses compression method {info.compress_type}"
            " (only stored and deflated are read)",
        )
        _check(
            info.file_size <= limits.max_member_bytes,
            f"member {name!r} declares {info.file_size} bytes, over the limit of"
            f" {limits.max_member_bytes}",
        )
        total += info.file_size
        _check(
            total <= limits.max_total_bytes,
            f"member {name!r} takes the archive over the limit of {limits.max_total_bytes}"
            " bytes in all",
        )
        members[name] = info
    _check(
        bool(infos) and infos[0].filename == MAGIC_MEMBER and infos[0].header_offset == 0,
        f"not a heron executable artefact: the first member is not {MAGIC_MEMBER!r}",
    )
    magic = infos[0]
    _check(
        magic.compress_type == zipfile.ZIP_STORED and magic.file_size == len(MAGIC),
        f"member {MAGIC_MEMBER!r} is not heron's magic",
    )
    _check(
        _read_bounded(archive, magic, len(MAGIC)) == MAGIC,
        f"member {MAGIC_MEMBER!r} is not heron's magic",
    )
    _check(MANIFEST in members, f"member {MANIFEST!r} is missing")
    return members


def _check_manifest(value: Any) -> dict[str, Any]:
    where = f"member {MANIFEST!r}"
    _check(isinstance(value, dict), f"{where}: not a JSON object")
    version = value.get("format_version")
    _check(_is_int(version), f"{where}: format_version is {version!r}, not an integer")
    _check(
        version <= FORMAT_VERSION,
        f"{where}: the artefact has format version {version}, newer than this heron"
        f" ({__version__}) reads (version {FORMAT_VERSION}); use a newer heron",
    )
    _check(
        version in READABLE_VERSIONS,
        f"{where}: format version {version} is not one this heron reads (versions"
        f" {', '.join(map(str, READABLE_VERSIONS))})",
    )
    expected = {"format_version", "heron_version", "created_by", "target", "members"}
    _check(
        set(value) == expected,
        f"{where}: fields {sorted(value)} are not {sorted(expected)}",
    )
    for field in ("heron_version", "created_by"):  # printed by heron-run: one plain line
        text = value[field]
        _check(
            isinstance(text, str) and text.isprintable() and len(text) <= 200,
            f"{where}: {field} is not one printable line of at most 200 characters",
        )
    listing = value["members"]
    _check(isinstance(listing, list), f"{where}: members is not a list")
    names: set[str] = set()
    for entry in listing:
        _check(
            isinstance(entry, dict) and set(entry) == {"name", "size", "sha256"},
            f"{where}: a member entry is not {{name, size, sha256}}: {entry!r:.80}",
        )
        name, size, digest = entry["name"], entry["size"], entry["sha256"]
        _check(isinstance(name, str), f"{where}: a member name is not a string: {name!r:.80}")
        problem = _member_name_problem(name)
        _check(problem is None, f"{where} names {name!r}, which is refused: it has {problem}")
        _check(
            name not in (MAGIC_MEMBER, MANIFEST),
            f"{where} lists {name!r}, which it cannot",
        )
        _check(name not in names, f"{where} lists {name!r} twice")
        _check(_is_int(size) and size >= 0, f"{where}: {name!r} has size {size!r}")
        _check(
            isinstance(digest, str) and bool(_SHA256.match(digest)),
            f"{where}: {name!r} has sha256 {digest!r:.80}, not 64 lowercase hex digits",
        )
        names.add(name)
    return value


def load(path: str | os.PathLike[str], limits: Limits | None = None) -> Artefact:
    """The artefact at ``path``, once every check of the module docstring passed."""
    limits = limits or Limits()
    path = Path(path)
    _check(path.exists(), f"{path}: no such file")
    _check(not path.is_dir(), f"{path}: is a directory, not an artefact file")
    _check(path.is_file(), f"{path}: not a regular file")
    try:
        with path.open("rb") as file:
            head = file.read(len(_ZIP_MAGIC))
            _check(bool(head), f"{path}: the file is empty, not an artefact")
            _check(
                head == _ZIP_MAGIC,
                f"{path}: not a heron executable artefact (it starts with {head.hex(' ')},"
                " not a zip header)",
            )
            file.seek(0)
            try:
                archive = zipfile.ZipFile(file)
            except (zipfile.BadZipFile, OSError, EOFError, ValueError) as error:
                raise ArtefactError(
                    f"{path}: not a readable zip archive (truncated or damaged): {error}"
                ) from None
            with archive:
                return _load_members(archive, limits)
    except OSError as error:
        raise ArtefactError(f"{path}: cannot be read: {error.strerror or error}") from None


def _load_members(archive: zipfile.ZipFile, limits: Limits) -> Artefact:
    infos = _check_archive(archive, limits)
    manifest_info = infos[MANIFEST]
    _check(
        manifest_info.file_size <= limits.max_json_bytes,
        f"member {MANIFEST!r} declares {manifest_info.file_size} bytes, over the limit of"
        f" {limits.max_json_bytes}",
    )
    manifest = _check_manifest(
        _parse_json(_read_bounded(archive, manifest_info, manifest_info.file_size), MANIFEST)
    )
    target = _manifest_target(manifest["target"])
    listed = {entry["name"]: entry for entry in manifest["members"]}
    present = set(infos) - {MAGIC_MEMBER, MANIFEST}
    for name in sorted(present - set(listed)):
        raise ArtefactError(f"member {name!r} is in the archive but not in the manifest")
    for name in sorted(set(listed) - present):
        raise ArtefactError(f"member {name!r} is in the manifest but not in the archive")

    data: dict[str, bytes] = {}
    for name, entry in listed.items():
        info = infos[name]
        _check(
            info.file_size == entry["size"],
            f"member {name!r} is {info.file_size} bytes in the archive, the manifest says"
            f" {entry['size']}",
        )
        content = _read_bounded(archive, info, entry["size"])
        _check(
            hashlib.sha256(content).hexdigest() == entry["sha256"],
            f"member {name!r}: sha256 differs from the manifest's (the member was altered)",
        )
        data[name] = content
    return _build(manifest, target, data, limits)


def _json_member(data: Mapping[str, bytes], name: str, limits: Limits) -> Any:
    _check(name in data, f"member {name!r} is missing")
    _check(
        len(data[name]) <= limits.max_json_bytes,
        f"member {name!r} is {len(data[name])} bytes, over the limit of {limits.max_json_bytes}",
    )
    return _parse_json(data[name], name)


def _kernel_entries(value: Any, version: int) -> list[dict[str, Any]]:
    """kernels.json's entries: the four fields, and from format 3 perhaps ``member``."""
    fields = {"backend", "key", "format", "kernel_name"}
    _check(isinstance(value, list), f"member {KERNELS!r}: not a JSON list")
    for i, item in enumerate(value):
        _check(
            isinstance(item, dict)
            and (set(item) == fields or (version >= 3 and set(item) == fields | {"member"})),
            f"member {KERNELS!r}: entry {i} does not have exactly {sorted(fields)}"
            + (" (and perhaps 'member')" if version >= 3 else ""),
        )
    return value


def _objects(value: Any, member: str, fields: Iterable[str]) -> list[dict[str, Any]]:
    fields = set(fields)
    _check(isinstance(value, list), f"member {member!r}: not a JSON list")
    for i, item in enumerate(value):
        _check(
            isinstance(item, dict) and set(item) == fields,
            f"member {member!r}: entry {i} does not have exactly {sorted(fields)}",
        )
    return value


def _build(
    manifest: Mapping[str, Any], target: Target, data: Mapping[str, bytes], limits: Limits
) -> Artefact:
    """The artefact from verified members; every table is checked as it is read."""
    used = {PROGRAM, ALLOCATIONS, SIGNATURE, KERNELS, OPTIMIZED_HLO}
    try:
        program = program_from_json(_json_member(data, PROGRAM, limits))
    except ThunkError as error:
        raise ArtefactError(f"member {PROGRAM!r}: {error}") from None
    allocations = [
        Allocation(**entry)
        for entry in _objects(
            _json_member(data, ALLOCATIONS, limits),
            ALLOCATIONS,
            ("index", "size", "kind", "parameter", "output"),
        )
    ]
    signature_json = _json_member(data, SIGNATURE, limits)
    _check(
        isinstance(signature_json, dict)
        and set(signature_json) == {"parameters", "results"}
        and all(isinstance(signature_json[k], list) for k in signature_json),
        f"member {SIGNATURE!r}: expected lists 'parameters' and 'results'",
    )
    signature = EntrySignature(**signature_json)
    kernels = []
    for entry in _kernel_entries(_json_member(data, KERNELS, limits), manifest["format_version"]):
        _checked_name(entry["format"], f"member {KERNELS!r}: a kernel format")
        _checked_name(entry["backend"], f"member {KERNELS!r}: a kernel backend")
        _checked_name(entry["key"], f"member {KERNELS!r}: a kernel key")
        own = f"kernels/{entry['backend']}/{entry['key']}.{entry['format']}"
        member = entry.get("member", own)
        _check(
            isinstance(member, str)
            and member.startswith(f"kernels/{entry['backend']}/")
            and member.endswith(f".{entry['format']}"),
            f"member {KERNELS!r}: kernel {entry['key']!r} names member {member!r}, not one of"
            f" its backend's {entry['format']} images",
        )
        _check(member in data, f"member {member!r} (named by {KERNELS!r}) is missing")
        used.add(member)
        image = KernelImage(entry["format"], entry["kernel_name"], data[member])
        kernels.append(KernelEntry(entry["backend"], entry["key"], image))
    constants = {}
    for allocation in allocations:
        if allocation.kind == "constant":
            member = _constant_member(allocation.index)
            _check(member in data, f"member {member!r} (constant allocation) is missing")
            used.add(member)
            constants[allocation.index] = data[member]
    for name in sorted(set(data) - used):
        raise ArtefactError(f"member {name!r} is no part of an artefact's layout")
    optimized = None
    if OPTIMIZED_HLO in data:
        try:
            optimized = data[OPTIMIZED_HLO].decode("utf-8")
        except UnicodeDecodeError:
            raise ArtefactError(f"member {OPTIMIZED_HLO!r} is not UTF-8 text") from None
    return Artefact(
        target=target,
        program=program,
        allocations=allocations,
        signature=signature,
        kernels=kernels,
        constants=constants,
        optimized_hlo=optimized,
        created_by=manifest["created_by"],
        heron_version=manifest["heron_version"],
    )


def member_names(artefact: Artefact) -> Sequence[str]:
    """Every member name of ``artefact``'s file, in order (magic, manifest, the rest)."""
    return [MAGIC_MEMBER, MANIFEST, *artefact.members()]
