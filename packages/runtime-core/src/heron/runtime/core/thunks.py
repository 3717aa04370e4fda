"""Thunks: the units of work an executable's program is made of.

A compiled program is a sequence of thunks (XLA's ThunkSequence): a kernel
launch, a device-to-device copy, a memset, a library call, a custom call
(a ``heron.custom_calls`` plugin's host implementation), or control flow
(sequential, while, conditional) holding thunk sequences of its own. A
``CommandBufferThunk`` holds a run of recordable thunks that a device records
once (a CUDA graph, a HIP graph, the interpreter's command buffer) and replays.

Every operand is a :class:`BufferSlice` of one of the executable's
allocations (the buffer assignment's): tuples, get-tuple-element, bitcasts and
parameters have been resolved into slices at compile time, so a thunk never
sees an HLO value. The types here are only data: frozen, validated when built
(``ThunkError`` names the thunk and the field), and written to and read from
JSON-compatible values (``to_json`` / :func:`thunk_from_json`): an artefact
stores its program as JSON, never pickled. Whether a slice lies inside its
allocation needs the allocation table: :func:`check_slices`.

:mod:`heron.runtime.core.executor` runs them on a device;
:mod:`heron.runtime.core.command_buffers` groups them into command buffers.
"""

from __future__ import annotations

import abc
import re
from collections.abc import Iterator, Mapping, Sequence
from typing import Any, ClassVar

import attrs
import numpy as np

from heron.hlo.control_flow import branch_index
from heron.hlo.custom_calls.call import CustomCall
from heron.hlo.custom_calls.hookspecs import TARGET_PATTERN
from heron.hlo.errors import HloError
from heron.hlo.memory_layout import memory_bytes
from heron.hlo.parser import parse_shape
from heron.hlo.shapes import ArrayShape, Shape

__all__ = [
    "MAX_NESTING",
    "NAME_PATTERN",
    "RECORDABLE",
    "BufferSlice",
    "CommandBufferThunk",
    "ConditionalThunk",
    "CopyThunk",
    "CustomCallThunk",
    "KernelThunk",
    "LibraryCallThunk",
    "MemsetThunk",
    "SequentialThunk",
    "Thunk",
    "ThunkError",
    "WhileThunk",
    "check_slices",
    "order_dependent_kernels",
    "program_from_json",
    "program_to_json",
    "thunk_from_json",
    "walk",
]

#: How deep thunks may nest (while in conditional in while ...). Real programs
#: nest a few levels; a deeper program read from a file is refused rather than
#: ending in a RecursionError.
MAX_NESTING = 64

#: Kernel names, kernel image keys, library and operation names: a symbol-like
#: token (these become archive member names and device symbols).
NAME_PATTERN = re.compile(r"[A-Za-z_][A-Za-z0-9_.-]{0,199}\Z")

Json = Any


class ThunkError(ValueError):
    """A thunk, or its JSON form, is malformed; the message names the thunk and the field."""


# -- fields ----------------------------------------------------------------------------


def _is_int(value: object) -> bool:
    return isinstance(value, (int, np.integer)) and not isinstance(value, (bool, np.bool_))


def _int_at_least(minimum: int) -> Any:
    def check(instance: Any, attribute: attrs.Attribute, value: Any) -> None:
        if not _is_int(value) or value < minimum:
            raise ThunkError(
                f"{type(instance).__name__}.{attribute.name} must be an integer >= {minimum},"
                f" got {value!r}"
            )

    return check


def _name(instance: Any, attribute: attrs.Attribute, value: Any) -> None:
    if not isinstance(value, str) or not NAME_PATTERN.match(value):
        raise ThunkError(
            f"{type(instance).__name__}.{attribute.name} must be a name of letters, digits,"
            f" '_', '.', '-' (not starting with a digit or '.'), got {value!r}"
        )


def _dim3(instance: Any, attribute: attrs.Attribute, value: Any) -> None:
    if (
        not isinstance(value, tuple)
        or len(value) != 3
        or not all(_is_int(v) and v >= 1 for v in value)
    ):
        raise ThunkError(
            f"{type(instance).__name__}.{attribute.name} must be three positive integers,"
            f" got {value!r}"
        )


def _to_tuple(value: Any) -> Any:
    return tuple(value) if isinstance(value, (list, tuple)) else value


def _to_dim3(value: Any) -> Any:
    if isinstance(value, (list, tuple)):
        return tuple(int(v) if _is_int(v) else v for v in value)
    return value


def _slices(instance: Any, attribute: attrs.Attribute, value: Any) -> None:
    if not isinstance(value, tuple) or not all(isinstance(s, BufferSlice) for s in value):
        raise ThunkError(
            f"{type(instance).__name__}.{attribute.name} must be a sequence of BufferSlice,"
            f" got {value!r}"
        )


def _slice(instance: Any, attribute: attrs.Attribute, value: Any) -> None:
    if not isinstance(value, BufferSlice):
        raise ThunkError(
            f"{type(instance).__name__}.{attribute.name} must be a BufferSlice, got {value!r}"
        )


def _thunks(instance: Any, attribute: attrs.Attribute, value: Any) -> None:
    if not isinstance(value, tuple) or not all(isinstance(t, Thunk) for t in value):
        raise ThunkError(
            f"{type(instance).__name__}.{attribute.name} must be a sequence of thunks,"
            f" got {value!r}"
        )


# -- slices ----------------------------------------------------------------------------


@attrs.frozen
class BufferSlice:
    """``size`` bytes at ``offset`` in allocation number ``allocation``."""

    allocation: int = attrs.field(validator=_int_at_least(0))
    offset: int = attrs.field(validator=_int_at_least(0))
    size: int = attrs.field(validator=_int_at_least(0))

    @property
    def end(self) -> int:
        return self.offset + self.size

    def to_json(self) -> Json:
        return [self.allocation, self.offset, self.size]

    @classmethod
    def from_json(cls, value: Json, where: str = "slice") -> BufferSlice:
        if not isinstance(value, list) or len(value) != 3 or not all(_is_int(v) for v in value):
            raise ThunkError(
                f"{where}: a slice is [allocation, offset, size] (integers), got {value!r}"
            )
        return cls(*value)

    def __str__(self) -> str:
        return f"alloc{self.allocation}[{self.offset}:{self.end}]"


# -- thunks ----------------------------------------------------------------------------


class Thunk(abc.ABC):
    """Base of every thunk type; ``kind`` is its tag in the JSON form."""

    kind: ClassVar[str] = ""

    @abc.abstractmethod
    def to_json(self) -> Json:
        """This thunk as JSON-compatible data (``kind`` first), read back by ``from_json``."""

    def slices(self) -> Iterator[BufferSlice]:
        """Every slice this thunk reads or writes itself (not its nested thunks')."""
        return iter(())

    def children(self) -> Iterator[Thunk]:
        """The thunks nested directly in this one."""
        return iter(())


@attrs.frozen
class KernelThunk(Thunk):
    """Launch ``kernel_name`` from the kernel image ``image_key`` over ``grid`` x ``block``.

    ``arguments`` are the kernel's arguments in heron's kernel ABI order
    (inputs, then outputs: :mod:`heron.runtime.core.device`); an executable
    holds one image per backend under each key.
    """

    kind: ClassVar[str] = "kernel"

    kernel_name: str = attrs.field(validator=_name)
    image_key: str = attrs.field(validator=_name)
    arguments: tuple[BufferSlice, ...] = attrs.field(converter=_to_tuple, validator=_slices)
    grid: tuple[int, int, int] = attrs.field(converter=_to_dim3, validator=_dim3)
    block: tuple[int, int, int] = attrs.field(converter=_to_dim3, validator=_dim3)
    shared_bytes: int = attrs.field(default=0, validator=_int_at_least(0))
    #: Why the kernel's result may differ from run to run (float atomics that
    #: combine in arrival order), or None: what the emitter said of it.
    order_dependence: str | None = attrs.field(
        default=None, validator=attrs.validators.optional(attrs.validators.instance_of(str))
    )

    def slices(self) -> Iterator[BufferSlice]:
        return iter(self.arguments)

    def to_json(self) -> Json:
        value: Json = {
            "kind": self.kind,
            "kernel_name": self.kernel_name,
            "image_key": self.image_key,
            "arguments": [a.to_json() for a in self.arguments],
            "grid": list(self.grid),
            "block": list(self.block),
            "shared_bytes": self.shared_bytes,
        }
        if self.order_dependence is not None:  # absent otherwise: older artefacts read alike
            value["order_dependence"] = self.order_dependence
        return value


@attrs.frozen
class CopyThunk(Thunk):
    """Copy ``source`` to ``destination`` on the device (the same size; they may not overlap)."""

    kind: ClassVar[str] = "copy"

    source: BufferSlice = attrs.field(validator=_slice)
    destination: BufferSlice = attrs.field(validator=_slice)

    def __attrs_post_init__(self) -> None:
        if self.source.size != self.destination.size:
            raise ThunkError(
                f"CopyThunk: source {self.source} is {self.source.size} bytes but destination"
                f" {self.destination} is {self.destination.size}"
            )
        s, d = self.source, self.destination
        if s.allocation == d.allocation and s.offset < d.end and d.offset < s.end:
            raise ThunkError(f"CopyThunk: source {s} and destination {d} overlap")

    def slices(self) -> Iterator[BufferSlice]:
        return iter((self.source, self.destination))

    def to_json(self) -> Json:
        return {
            "kind": self.kind,
            "source": self.source.to_json(),
            "destination": self.destination.to_json(),
        }


@attrs.frozen
class MemsetThunk(Thunk):
    """Fill ``destination`` with ``value``, an unsigned ``width``-byte pattern (1, 2 or 4).

    The widths of cuMemsetD8/D16/D32 and hipMemsetD8/D16/D32; the
    destination's size is a multiple of the width.
    """

    kind: ClassVar[str] = "memset"

    destination: BufferSlice = attrs.field(validator=_slice)
    value: int = attrs.field(default=0, validator=_int_at_least(0))
    width: int = attrs.field(default=1)

    def __attrs_post_init__(self) -> None:
        if self.width not in (1, 2, 4) or not _is_int(self.width):
            raise ThunkError(f"MemsetThunk.width must be 1, 2 or 4 bytes, got {self.width!r}")
        if self.value >= 1 << (8 * self.width):
            raise ThunkError(f"MemsetThunk.value {self.value} does not fit in {self.width} byte(s)")
        if self.destination.size % self.width:
            raise ThunkError(
                f"MemsetThunk: destination {self.destination} ({self.destination.size} bytes)"
                f" is not a multiple of the {self.width}-byte pattern"
            )

    def pattern(self) -> bytes:
        """The bytes the destination holds afterwards (little-endian pattern, repeated)."""
        word = self.value.to_bytes(self.width, "little")
        return word * (self.destination.size // self.width)

    def slices(self) -> Iterator[BufferSlice]:
        return iter((self.destination,))

    def to_json(self) -> Json:
        return {
            "kind": self.kind,
            "destination": self.destination.to_json(),
            "value": self.value,
            "width": self.width,
        }


@attrs.frozen
class SequentialThunk(Thunk):
    """Its thunks, one after the other."""

    kind: ClassVar[str] = "sequential"

    thunks: tuple[Thunk, ...] = attrs.field(converter=_to_tuple, validator=_thunks)

    def children(self) -> Iterator[Thunk]:
        return iter(self.thunks)

    def to_json(self) -> Json:
        return {"kind": self.kind, "thunks": [t.to_json() for t in self.thunks]}


@attrs.frozen
class WhileThunk(Thunk):
    """``condition`` writes a pred to ``predicate``; while it is true, run ``body``.

    The condition runs on the device; the host reads the one-byte pred after
    each run (or a device with conditional graph nodes keeps the loop in a
    command buffer). ``trip_count``, when the compiler proved it, lets a
    runtime unroll or skip reading the predicate.
    """

    kind: ClassVar[str] = "while"

    condition: tuple[Thunk, ...] = attrs.field(converter=_to_tuple, validator=_thunks)
    predicate: BufferSlice = attrs.field(validator=_slice)
    body: tuple[Thunk, ...] = attrs.field(converter=_to_tuple, validator=_thunks)
    trip_count: int | None = attrs.field(default=None)

    def __attrs_post_init__(self) -> None:
        if self.predicate.size != 1:
            raise ThunkError(
                f"WhileThunk.predicate {self.predicate} must be 1 byte (a pred),"
                f" got {self.predicate.size}"
            )
        if self.trip_count is not None and (not _is_int(self.trip_count) or self.trip_count < 0):
            raise ThunkError(
                f"WhileThunk.trip_count must be None or an integer >= 0, got {self.trip_count!r}"
            )

    def slices(self) -> Iterator[BufferSlice]:
        return iter((self.predicate,))

    def children(self) -> Iterator[Thunk]:
        yield from self.condition
        yield from self.body

    def to_json(self) -> Json:
        return {
            "kind": self.kind,
            "condition": [t.to_json() for t in self.condition],
            "predicate": self.predicate.to_json(),
            "body": [t.to_json() for t in self.body],
            "trip_count": self.trip_count,
        }


_SELECTOR_BYTES = {"pred": 1, "s32": 4}


@attrs.frozen
class ConditionalThunk(Thunk):
    """Run the branch ``selector`` picks: a pred (true: 0, false: 1) or an s32 index.

    An index out of range takes the last branch, as XLA does
    (:func:`heron.hlo.control_flow.branch_index`, shared with the evaluator).
    """

    kind: ClassVar[str] = "conditional"

    selector: BufferSlice = attrs.field(validator=_slice)
    selector_type: str = attrs.field()
    branches: tuple[tuple[Thunk, ...], ...] = attrs.field(
        converter=lambda v: tuple(_to_tuple(b) for b in v) if isinstance(v, (list, tuple)) else v
    )

    def __attrs_post_init__(self) -> None:
        if self.selector_type not in _SELECTOR_BYTES:
            raise ThunkError(
                f"ConditionalThunk.selector_type must be 'pred' or 's32', got"
                f" {self.selector_type!r}"
            )
        width = _SELECTOR_BYTES[self.selector_type]
        if self.selector.size != width:
            raise ThunkError(
                f"ConditionalThunk.selector {self.selector} must be {width} byte(s) for"
                f" {self.selector_type}, got {self.selector.size}"
            )
        if not isinstance(self.branches, tuple) or not self.branches:
            raise ThunkError("ConditionalThunk.branches must be a non-empty sequence of branches")
        if self.selector_type == "pred" and len(self.branches) != 2:
            raise ThunkError(
                f"ConditionalThunk: a pred selector takes exactly 2 branches, got"
                f" {len(self.branches)}"
            )
        for i, branch in enumerate(self.branches):
            if not isinstance(branch, tuple) or not all(isinstance(t, Thunk) for t in branch):
                raise ThunkError(
                    f"ConditionalThunk.branches[{i}] must be a sequence of thunks, got {branch!r}"
                )

    def branch_for(self, selector_bytes: bytes) -> int:
        """The branch the selector's bytes (as read from the device) pick."""
        if len(selector_bytes) != self.selector.size:
            raise ThunkError(
                f"ConditionalThunk: selector is {self.selector.size} byte(s), got"
                f" {len(selector_bytes)}"
            )
        dtype = np.bool_ if self.selector_type == "pred" else np.dtype("<i4")
        value = np.frombuffer(selector_bytes, dtype=dtype)[0]
        return branch_index(value, len(self.branches))

    def slices(self) -> Iterator[BufferSlice]:
        return iter((self.selector,))

    def children(self) -> Iterator[Thunk]:
        for branch in self.branches:
            yield from branch

    def to_json(self) -> Json:
        return {
            "kind": self.kind,
            "selector": self.selector.to_json(),
            "selector_type": self.selector_type,
            "branches": [[t.to_json() for t in b] for b in self.branches],
        }


def _freeze_attribute(value: Any, where: str, depth: int = 0) -> Any:
    """A JSON-compatible attribute value, lists made tuples (the thunk is hashable)."""
    if depth > MAX_NESTING:
        raise ThunkError(f"{where}: nested more than {MAX_NESTING} levels")
    if value is None or isinstance(value, (bool, str)) or _is_int(value):
        return int(value) if _is_int(value) else value
    if isinstance(value, float):
        if value != value or value in (float("inf"), float("-inf")):
            raise ThunkError(f"{where}: {value!r} has no JSON form")
        return value
    if isinstance(value, (list, tuple)):
        return tuple(_freeze_attribute(v, where, depth + 1) for v in value)
    raise ThunkError(
        f"{where}: attribute values are None, bool, int, float, str or lists of them,"
        f" got {type(value).__name__}"
    )


def _to_attributes(value: Any) -> Any:
    if isinstance(value, Mapping):
        value = tuple(value.items())
    elif not isinstance(value, (list, tuple)):
        raise ThunkError(
            f"LibraryCallThunk.attributes must be a mapping of names to values, got {value!r:.80}"
        )
    items = []
    for item in value:
        if not isinstance(item, (list, tuple)) or len(item) != 2 or not isinstance(item[0], str):
            raise ThunkError(f"LibraryCallThunk.attributes: ({item!r}) is not a (name, value)")
        items.append((item[0], _freeze_attribute(item[1], f"attribute {item[0]!r}")))
    names = [k for k, _ in items]
    if len(set(names)) != len(names):
        raise ThunkError(f"LibraryCallThunk.attributes: repeated names in {names}")
    return tuple(sorted(items, key=lambda item: item[0]))


def _thaw(value: Any) -> Json:
    return [_thaw(v) for v in value] if isinstance(value, tuple) else value


@attrs.frozen
class LibraryCallThunk(Thunk):
    """A call into a vendor library (cuBLASLt, hipBLAS, ...), with heron's own thunks beside it.

    ``library`` and ``operation`` say what to call (``"blas"``, ``"gemm"``:
    :mod:`heron.runtime.core.gemm` is GEMM's contract), ``attributes`` how
    (JSON-compatible values, sorted by name), ``arguments`` on what, in the
    operation's documented order. Which device offers which call is the
    device's business (``Device.library_for``).

    ``fallback`` are thunks that compute the same with heron's own kernels
    (the GEMM fusion's kernel launch): the executor picks at load time, the
    library call where the running device offers it, else the fallback
    (:mod:`heron.runtime.core.library_calls`); ``fallback_emitter`` names the
    emitter of its kernels for reports (``"gemm"``). Without a fallback, a
    device that does not offer the call cannot run the program.
    """

    kind: ClassVar[str] = "library_call"

    library: str = attrs.field(validator=_name)
    operation: str = attrs.field(validator=_name)
    arguments: tuple[BufferSlice, ...] = attrs.field(converter=_to_tuple, validator=_slices)
    attributes: tuple[tuple[str, Any], ...] = attrs.field(default=(), converter=_to_attributes)
    fallback: tuple[Thunk, ...] = attrs.field(default=(), converter=_to_tuple, validator=_thunks)
    fallback_emitter: str = attrs.field(default="")

    def __attrs_post_init__(self) -> None:
        if not isinstance(self.fallback_emitter, str) or (
            self.fallback_emitter and not NAME_PATTERN.match(self.fallback_emitter)
        ):
            raise ThunkError(
                f"LibraryCallThunk.fallback_emitter must be a name or empty,"
                f" got {self.fallback_emitter!r}"
            )

    def attribute(self, name: str) -> Any:
        return dict(self.attributes)[name]

    def slices(self) -> Iterator[BufferSlice]:
        return iter(self.arguments)

    def children(self) -> Iterator[Thunk]:
        """The fallback's thunks (their slices and kernel images are checked like any)."""
        return iter(self.fallback)

    def to_json(self) -> Json:
        return {
            "kind": self.kind,
            "library": self.library,
            "operation": self.operation,
            "arguments": [a.to_json() for a in self.arguments],
            "attributes": {k: _thaw(v) for k, v in self.attributes},
            "fallback": [t.to_json() for t in self.fallback],
            "fallback_emitter": self.fallback_emitter,
        }


def _shape(text: Any, where: str) -> Shape:
    if not isinstance(text, str):
        raise ThunkError(f"{where} must be an HLO shape as text, got {text!r:.80}")
    try:
        return parse_shape(text)
    except HloError as error:
        raise ThunkError(
            f"{where} {text!r:.80} is not an HLO shape: {str(error).splitlines()[0]}"
        ) from None


def _printable(limit: int) -> Any:
    def check(instance: Any, attribute: attrs.Attribute, value: Any) -> None:
        if not isinstance(value, str) or len(value) > limit or not value.isprintable():
            raise ThunkError(
                f"{type(instance).__name__}.{attribute.name} must be printable text of at most"
                f" {limit} characters, got {value!r:.80}"
            )

    return check


def _custom_call_target(instance: Any, attribute: attrs.Attribute, value: Any) -> None:
    if not isinstance(value, str) or not TARGET_PATTERN.match(value):
        raise ThunkError(
            f"CustomCallThunk.target must be a custom_call_target (1 to 200 printable ASCII"
            f" characters, no spaces or quotes), got {value!r:.80}"
        )


def _texts(instance: Any, attribute: attrs.Attribute, value: Any) -> None:
    if not isinstance(value, tuple) or not all(isinstance(v, str) for v in value):
        raise ThunkError(
            f"{type(instance).__name__}.{attribute.name} must be a sequence of strings,"
            f" got {value!r:.80}"
        )


@attrs.frozen
class CustomCallThunk(Thunk):
    """A custom call (``custom_call_target``) run by its plugin's host implementation.

    ``operands`` hold the instruction's operand leaves (``operand_shapes``,
    HLO text with layouts), ``results`` its result leaves (``result_shape``,
    an array or a tuple); each slice is exactly its leaf's bytes in heron's
    memory representation. ``backend_config``, ``opaque`` and ``api_version``
    are the instruction's attribute texts, ``name`` and ``computation`` where
    it was: what the implementation receives (:meth:`call`,
    :mod:`heron.hlo.custom_calls`). The executor copies the operands to the
    host, calls, and copies the results back; a host call cannot be recorded
    in a command buffer, so it ends one.
    """

    kind: ClassVar[str] = "custom_call"

    target: str = attrs.field(validator=_custom_call_target)
    name: str = attrs.field(validator=_printable(200))
    computation: str = attrs.field(validator=_printable(200))
    operands: tuple[BufferSlice, ...] = attrs.field(converter=_to_tuple, validator=_slices)
    operand_shapes: tuple[str, ...] = attrs.field(converter=_to_tuple, validator=_texts)
    results: tuple[BufferSlice, ...] = attrs.field(converter=_to_tuple, validator=_slices)
    result_shape: str = attrs.field(validator=_printable(1 << 16))
    backend_config: str = attrs.field(default="", validator=attrs.validators.instance_of(str))
    opaque: str = attrs.field(default="", validator=attrs.validators.instance_of(str))
    api_version: str = attrs.field(default="", validator=_printable(200))

    def __attrs_post_init__(self) -> None:
        self.call()  # every shape parses and fits its slice

    def call(self) -> CustomCall:
        """The call its implementation receives; raises ThunkError when shapes and slices
        disagree (an artefact edited by hand, or a bug)."""
        where = f"CustomCallThunk '{self.name}' ({self.target})"
        operand_shapes = [
            _shape(text, f"{where}: operand_shapes[{k}]")
            for k, text in enumerate(self.operand_shapes)
        ]
        result_shape = _shape(self.result_shape, f"{where}: result_shape")
        result_leaves = list(result_shape.leaves())
        for role, shapes, pieces in (
            ("operand", operand_shapes, self.operands),
            ("result", result_leaves, self.results),
        ):
            if len(shapes) != len(pieces):
                raise ThunkError(
                    f"{where}: {len(pieces)} {role} slices for {len(shapes)} {role} leaves"
                )
            for k, (shape, piece) in enumerate(zip(shapes, pieces, strict=True)):
                if not isinstance(shape, ArrayShape) or shape.is_token:
                    raise ThunkError(f"{where}: {role} {k} is {shape}, not an array")
                if piece.size != memory_bytes(shape):
                    raise ThunkError(
                        f"{where}: {role} {k} ({shape}) is {memory_bytes(shape)} bytes, its"
                        f" slice {piece} is {piece.size}"
                    )
        return CustomCall(
            target=self.target,
            instruction=self.name,
            computation=self.computation,
            operand_shapes=operand_shapes,  # type: ignore[arg-type]
            result_shape=result_shape,
            backend_config=self.backend_config,
            opaque=self.opaque,
            api_version=self.api_version,
        )

    def slices(self) -> Iterator[BufferSlice]:
        yield from self.operands
        yield from self.results

    def to_json(self) -> Json:
        return {
            "kind": self.kind,
            "target": self.target,
            "name": self.name,
            "computation": self.computation,
            "operands": [a.to_json() for a in self.operands],
            "operand_shapes": list(self.operand_shapes),
            "results": [a.to_json() for a in self.results],
            "result_shape": self.result_shape,
            "backend_config": self.backend_config,
            "opaque": self.opaque,
            "api_version": self.api_version,
        }


def _recordable(thunk: Thunk) -> bool:
    if isinstance(thunk, (WhileThunk, ConditionalThunk, LibraryCallThunk)):
        return all(_recordable(t) for t in thunk.children())
    return isinstance(thunk, (KernelThunk, CopyThunk, MemsetThunk, LibraryCallThunk))


#: The thunk types a command buffer may hold (control flow when what it holds is).
RECORDABLE: tuple[type[Thunk], ...] = (
    KernelThunk,
    CopyThunk,
    MemsetThunk,
    LibraryCallThunk,
    WhileThunk,
    ConditionalThunk,
)


@attrs.frozen
class CommandBufferThunk(Thunk):
    """Thunks recorded once per device into a command buffer and replayed after.

    Only recordable thunks (:data:`RECORDABLE`; a while or conditional whose
    thunks are all recordable, for devices with conditional graph nodes); no
    sequential or nested command buffer: the conversion pass flattens them.
    """

    kind: ClassVar[str] = "command_buffer"

    thunks: tuple[Thunk, ...] = attrs.field(converter=_to_tuple, validator=_thunks)

    def __attrs_post_init__(self) -> None:
        if not self.thunks:
            raise ThunkError("CommandBufferThunk: a command buffer holds at least one thunk")
        for i, thunk in enumerate(self.thunks):
            if not _recordable(thunk):
                raise ThunkError(
                    f"CommandBufferThunk.thunks[{i}]: a {thunk.kind} thunk (or one inside it)"
                    " cannot be recorded in a command buffer"
                )

    def children(self) -> Iterator[Thunk]:
        return iter(self.thunks)

    def to_json(self) -> Json:
        return {"kind": self.kind, "thunks": [t.to_json() for t in self.thunks]}


# -- reading JSON ----------------------------------------------------------------------

_FIELDS: dict[str, tuple[type[Thunk], dict[str, str]]] = {
    # kind: (type, {field: how to read it}); every field is required but those of _OPTIONAL.
    "kernel": (
        KernelThunk,
        {
            "kernel_name": "str",
            "image_key": "str",
            "arguments": "slices",
            "grid": "ints",
            "block": "ints",
            "shared_bytes": "int",
            "order_dependence": "str?",
        },
    ),
    "copy": (CopyThunk, {"source": "slice", "destination": "slice"}),
    "memset": (MemsetThunk, {"destination": "slice", "value": "int", "width": "int"}),
    "sequential": (SequentialThunk, {"thunks": "thunks"}),
    "while": (
        WhileThunk,
        {"condition": "thunks", "predicate": "slice", "body": "thunks", "trip_count": "int?"},
    ),
    "conditional": (
        ConditionalThunk,
        {"selector": "slice", "selector_type": "str", "branches": "branches"},
    ),
    "library_call": (
        LibraryCallThunk,
        {
            "library": "str",
            "operation": "str",
            "arguments": "slices",
            "attributes": "object",
            "fallback": "thunks",
            "fallback_emitter": "str",
        },
    ),
    "custom_call": (
        CustomCallThunk,
        {
            "target": "str",
            "name": "str",
            "computation": "str",
            "operands": "slices",
            "operand_shapes": "strs",
            "results": "slices",
            "result_shape": "str",
            "backend_config": "str",
            "opaque": "str",
            "api_version": "str",
        },
    ),
    "command_buffer": (CommandBufferThunk, {"thunks": "thunks"}),
}


#: Fields an artefact may leave out (added after format version 1 was fixed): read as None.
_OPTIONAL = frozenset({"order_dependence"})


def _read_field(how: str, value: Json, where: str, depth: int) -> Any:
    if how == "str" and isinstance(value, str):
        return value
    if how == "int" and _is_int(value):
        return value
    if how == "int?" and (value is None or _is_int(value)):
        return value
    if how == "str?" and (value is None or isinstance(value, str)):
        return value
    if how == "ints" and isinstance(value, list) and all(_is_int(v) for v in value):
        return tuple(value)
    if how == "strs" and isinstance(value, list) and all(isinstance(v, str) for v in value):
        return tuple(value)
    if how == "slice":
        return BufferSlice.from_json(value, where)
    if how == "slices" and isinstance(value, list):
        return tuple(BufferSlice.from_json(v, f"{where}[{i}]") for i, v in enumerate(value))
    if how == "thunks" and isinstance(value, list):
        return tuple(_from_json(v, f"{where}[{i}]", depth + 1) for i, v in enumerate(value))
    if how == "branches" and isinstance(value, list):
        return tuple(_read_field("thunks", b, f"{where}[{i}]", depth) for i, b in enumerate(value))
    if how == "object" and isinstance(value, dict):
        return value
    expected = {
        "str": "a string",
        "int": "an integer",
        "int?": "an integer or null",
        "str?": "a string or null",
        "ints": "a list of integers",
        "strs": "a list of strings",
        "slices": "a list of slices",
        "thunks": "a list of thunks",
        "branches": "a list of thunk lists",
        "object": "an object",
    }[how]
    raise ThunkError(f"{where}: expected {expected}, got {value!r:.80}")


def _from_json(value: Json, where: str, depth: int) -> Thunk:
    if depth > MAX_NESTING:
        raise ThunkError(f"{where}: thunks nested more than {MAX_NESTING} levels")
    if not isinstance(value, dict) or not isinstance(value.get("kind"), str):
        raise ThunkError(f"{where}: a thunk is an object with a 'kind', got {value!r:.80}")
    kind = value["kind"]
    if kind not in _FIELDS:
        raise ThunkError(f"{where}: unknown thunk kind {kind!r} (known: {', '.join(_FIELDS)})")
    cls, fields = _FIELDS[kind]
    where = f"{where} ({kind})"
    missing = sorted(set(fields) - set(value) - _OPTIONAL)
    extra = sorted(set(value) - set(fields) - {"kind"})
    if missing or extra:
        raise ThunkError(
            f"{where}: "
            + "; ".join(
                part
                for part in (
                    f"missing {', '.join(missing)}" if missing else "",
                    f"unknown {', '.join(extra)}" if extra else "",
                )
                if part
            )
        )
    arguments = {
        name: _read_field(how, value[name], f"{where}.{name}", depth)
        for name, how in fields.items()
        if name in value
    }
    try:
        return cls(**arguments)
    except ThunkError as error:
        raise ThunkError(f"{where}: {error}") from None


def thunk_from_json(value: Json) -> Thunk:
    """The thunk ``to_json`` wrote; raises :class:`ThunkError` naming what is malformed."""
    return _from_json(value, "thunk", 0)


def program_to_json(thunks: Sequence[Thunk]) -> Json:
    """A thunk sequence (an executable's program) as a JSON-compatible value."""
    return {"thunks": [t.to_json() for t in thunks]}


def program_from_json(value: Json) -> tuple[Thunk, ...]:
    """The thunk sequence :func:`program_to_json` wrote."""
    if not isinstance(value, dict) or set(value) != {"thunks"}:
        raise ThunkError(f"program: expected an object with 'thunks' only, got {value!r:.80}")
    return _read_field("thunks", value["thunks"], "program.thunks", 0)


# -- checks over a program -------------------------------------------------------------


def walk(thunks: Sequence[Thunk]) -> Iterator[Thunk]:
    """Every thunk of ``thunks`` and of the thunks nested in them, parents first."""
    for thunk in thunks:
        yield thunk
        yield from walk(tuple(thunk.children()))


def check_slices(thunks: Sequence[Thunk], allocation_sizes: Sequence[int]) -> None:
    """Raise :class:`ThunkError` unless every slice lies inside an existing allocation."""
    for thunk in walk(thunks):
        for piece in thunk.slices():
            if piece.allocation >= len(allocation_sizes):
                raise ThunkError(
                    f"{thunk.kind} thunk: slice {piece} names allocation {piece.allocation},"
                    f" but there are {len(allocation_sizes)}"
                )
            size = allocation_sizes[piece.allocation]
            if piece.end > size:
                raise ThunkError(
                    f"{thunk.kind} thunk: slice {piece} ends at byte {piece.end}, past the end"
                    f" of allocation {piece.allocation} ({size} bytes)"
                )


def order_dependent_kernels(program: Sequence[Thunk]) -> list[tuple[str, str]]:
    """``(kernel name, why)`` of each distinct kernel whose result may change from run to run.

    What the compiler recorded on its kernel thunks (:attr:`KernelThunk.order_dependence`):
    an artefact compiled with ``--deterministic`` has none.
    """
    found: dict[str, str] = {}
    for thunk in walk(program):
        if isinstance(thunk, KernelThunk) and thunk.order_dependence is not None:
            found.setdefault(thunk.kernel_name, thunk.order_dependence)
    return sorted(found.items())
