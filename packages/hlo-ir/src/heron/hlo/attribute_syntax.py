"""How each instruction attribute is spelled: a table name -> (parse, print).

``ATTRIBUTES`` maps an attribute name to the grammar rule that reads its value
(into the typed values of ``heron.hlo.attributes``) and the function that
writes it back. A name missing from the table is kept as a ``RawAttribute``
with its exact text, so unknown attributes never stop a parse and always print
back. ``format_attribute`` falls back on the value's Python type when a name
is not in the table (passes may add attributes heron does not list).
"""

from __future__ import annotations

import re
from collections.abc import Callable
from typing import Any

import attrs

from heron.hlo.attributes import (
    COMPUTATION_ATTRIBUTES,
    COMPUTATION_LIST_ATTRIBUTES,
    ComputationRef,
    ConvDimensionNumbers,
    InstructionRefs,
    KeyValueList,
    PadDim,
    PaddingConfig,
    QuotedString,
    RawAttribute,
    SliceRange,
    Window,
    WindowDim,
)
from heron.hlo.element_types import ElementType
from heron.hlo.float_text import format_float
from heron.hlo.input_output_alias import (
    InputOutputAlias,
    format_input_output_alias,
    parse_input_output_alias,
)
from heron.hlo.lexer import WORD, Cursor, escape, unescape


@attrs.frozen
class AttributeSyntax:
    """The grammar rule for one attribute's value, and its printer.

    ``cacheable``: the parsed value is immutable, so the parser may reuse it
    for every instruction that spells the value the same way.
    """

    parse: Callable[[Cursor], Any]
    print: Callable[[Any], str]
    #: The Python type(s) ``parse`` returns; ``print`` is used for those only.
    types: tuple[type, ...]
    cacheable: bool = True


# -- grammar rules ---------------------------------------------------------------

_BOOL = re.compile(r"(true|false)(?![A-Za-z0-9_])")
_FLOAT = re.compile(
    r"[-+]?(?:inf|nan|(?:[0-9]+(?:\.[0-9]*)?|\.[0-9]+)(?:[eE][-+]?[0-9]+)?)(?![A-Za-z0-9_.])"
)
_PAD_DIM = r"[-+]?[0-9]+_[-+]?[0-9]+(?:_[-+]?[0-9]+)?"
_PADDING = re.compile(rf"{_PAD_DIM}(?:x{_PAD_DIM})*")
_DIM_LABELS = re.compile(r"([0-9a-z]+)_([0-9a-z]+)->([0-9a-z]+)")
_X_INTS = re.compile(r"[-+]?[0-9]+(?:x[-+]?[0-9]+)*")
_X_PADS = re.compile(r"[-+]?[0-9]+_[-+]?[0-9]+(?:x[-+]?[0-9]+_[-+]?[0-9]+)*")
_KEY = re.compile(r"[A-Za-z_][A-Za-z0-9_.\-]*")


def parse_int(cur: Cursor) -> int:
    return cur.integer()


def parse_bool(cur: Cursor) -> bool:
    return cur.require(_BOOL, "true or false").group(1) == "true"


def parse_word(cur: Cursor) -> str:
    return cur.require(WORD, "a word").group(0)


def parse_quoted(cur: Cursor) -> QuotedString:
    return QuotedString(cur.string())


def parse_float(cur: Cursor) -> float:
    return float(cur.require(_FLOAT, "a number").group(0))


def parse_raw(cur: Cursor) -> RawAttribute:
    return RawAttribute(cur.raw_value())


def _braced_list(cur: Cursor, item: Callable[[Cursor], Any], what: str) -> list[Any]:
    """``{a, b, c}`` (possibly empty) with ``item`` reading each element."""
    open_pos = cur.expect("{", f"to start {what}")
    items: list[Any] = []
    if cur.accept("}"):
        return items
    while True:
        items.append(item(cur))
        if cur.accept("}"):
            return items
        if cur.at_end():
            raise cur.error(
                f"unexpected end of file inside {what}: the '{{' at line"
                f" {cur.location(open_pos).line} is never closed"
            )
        cur.expect(",", f"or '}}' in {what}")


def parse_int_list(cur: Cursor) -> tuple[int, ...]:
    return tuple(_braced_list(cur, lambda c: c.integer(), "a list of integers"))


def _slice_range(cur: Cursor) -> SliceRange:
    cur.expect("[", "to start a slice range [start:limit]")
    start = cur.integer("the slice start")
    cur.expect(":", "in a slice range [start:limit]")
    limit = cur.integer("the slice limit")
    stride = 1
    if cur.accept(":"):
        stride = cur.integer("the slice stride")
    cur.expect("]", "to end a slice range")
    return SliceRange(start, limit, stride)


def parse_slice(cur: Cursor) -> tuple[SliceRange, ...]:
    return tuple(_braced_list(cur, _slice_range, "slice ranges"))


def parse_padding(cur: Cursor) -> PaddingConfig:
    """``0_0x1_2_1``; empty for a scalar (``padding=`` then ',' or the line end)."""
    pos = cur.pos
    text = cur.text
    while pos < len(text) and text[pos] in " \t":
        pos += 1
    m = _PADDING.match(text, pos)
    if m is None:
        if pos >= len(text) or text[pos] in ",\n\r}":
            cur.pos = pos
            return PaddingConfig(())
        raise cur.error(
            f"expected a padding config like 0_0x1_2_1, found {cur.describe_next()}", pos
        )
    cur.pos = m.end()
    dims = []
    for part in m.group(0).split("x"):
        numbers = [int(n) for n in part.split("_")]
        dims.append(PadDim(*numbers))
    return PaddingConfig(tuple(dims))


_WINDOW_KEYS = ("size", "stride", "pad", "lhs_dilate", "rhs_dilate", "rhs_reversal")


def parse_window(cur: Cursor) -> Window:
    """``{size=3x3 stride=2x2 pad=1_1x1_1 lhs_dilate=1x1 rhs_dilate=1x1 rhs_reversal=0x0}``."""
    open_pos = cur.expect("{", "to start a window")
    fields: dict[str, list[Any]] = {}
    while not cur.accept("}"):
        if cur.at_end():
            raise cur.error(
                "unexpected end of file inside window={...}: the '{' at line"
                f" {cur.location(open_pos).line} is never closed"
            )
        cur.accept(",")
        key_pos = cur.skip()
        key = cur.require(_KEY, "a window field (size, stride, pad, ...)").group(0)
        if key not in _WINDOW_KEYS:
            raise cur.error(
                f"unknown window field '{key}' (expected one of {', '.join(_WINDOW_KEYS)})",
                key_pos,
            )
        if key in fields:
            raise cur.error(f"window field '{key}' given twice", key_pos)
        cur.expect("=", f"after window field '{key}'")
        if key == "pad":
            text = cur.require(_X_PADS, "window padding like 1_1x0_0").group(0)
            fields[key] = [tuple(int(v) for v in p.split("_")) for p in text.split("x")]
        else:
            text = cur.require(_X_INTS, f"window {key} like 3x3").group(0)
            fields[key] = [int(v) for v in text.split("x")]
        fields[key + "@"] = [key_pos]
    if not fields:
        return Window(())
    if "size" not in fields:
        raise cur.error("window has no size", open_pos)
    rank = len(fields["size"])
    for key in _WINDOW_KEYS:
        if key in fields and len(fields[key]) != rank:
            raise cur.error(
                f"window {key} has {len(fields[key])} dimensions, size has {rank}",
                fields[key + "@"][0],
            )
    dims = []
    for i in range(rank):
        pad = fields.get("pad", [(0, 0)] * rank)[i]
        dims.append(
            WindowDim(
                size=fields["size"][i],
                stride=fields.get("stride", [1] * rank)[i],
                pad_low=pad[0],
                pad_high=pad[1],
                window_dilation=fields.get("rhs_dilate", [1] * rank)[i],
                base_dilation=fields.get("lhs_dilate", [1] * rank)[i],
                window_reversal=bool(fields.get("rhs_reversal", [0] * rank)[i]),
            )
        )
    return Window(tuple(dims))


def parse_dim_labels(cur: Cursor) -> ConvDimensionNumbers:
    """``b01f_01io->b01f``: one letter per dimension, digits for spatial ones."""
    pos = cur.skip()
    m = cur.require(_DIM_LABELS, "convolution dim_labels like b01f_01io->b01f")
    lhs, rhs, out = m.groups()

    def decode(labels: str, major: str, minor: str, what: str) -> tuple[int, int, tuple[int, ...]]:
        spatial = sorted((c, i) for i, c in enumerate(labels) if c.isdigit())
        letters = sorted(c for c in labels if not c.isdigit())
        if letters != sorted(major + minor) or [c for c, _ in spatial] != [
            str(k) for k in range(len(spatial))
        ]:
            raise cur.error(
                f"bad {what} dim_labels '{labels}': expected '{major}', '{minor}' and"
                " spatial digits 0, 1, ... once each",
                pos,
            )
        return labels.index(major), labels.index(minor), tuple(i for _, i in spatial)

    ib, if_, ispatial = decode(lhs, "b", "f", "input")
    ki, ko, kspatial = decode(rhs, "i", "o", "kernel")
    ob, of, ospatial = decode(out, "b", "f", "output")
    if not len(ispatial) == len(kspatial) == len(ospatial):
        raise cur.error(f"dim_labels '{m.group(0)}' disagree on the number of spatial dims", pos)
    return ConvDimensionNumbers(ib, if_, ispatial, ki, ko, kspatial, ob, of, ospatial)


def _computation_name(cur: Cursor) -> ComputationRef:
    return ComputationRef(cur.name("a computation name")[0])


def parse_computation(cur: Cursor) -> ComputationRef | tuple[ComputationRef, ...]:
    """``%name``; a braced list is accepted too (``calls={%a, %b}``)."""
    if cur.peek() == "{":
        return parse_computation_list(cur)
    return _computation_name(cur)


def parse_computation_list(cur: Cursor) -> tuple[ComputationRef, ...]:
    return tuple(_braced_list(cur, _computation_name, "a list of computations"))


def parse_instruction_refs(cur: Cursor) -> InstructionRefs:
    names = _braced_list(cur, lambda c: c.name("an instruction name")[0], "instruction names")
    return InstructionRefs(tuple(names))


_KV_ITEM = re.compile(
    r'[\s,]*+([A-Za-z_][A-Za-z0-9_.\-]*+)=(?:"((?:[^"\\\n]++|\\.)*+)"|([^\s,{}()\[\]"]++))'
)
_CLOSE = re.compile(r"\s*+\}")


def parse_key_values(cur: Cursor) -> KeyValueList:
    """``{key=value key2="text"}``; ',' and/or spaces separate the items.

    Values are quoted strings (``QuotedString``) or the raw text up to the
    next separator at bracket depth 0 (``str``, e.g. ``source_line=3`` or
    ``profile_type={relative}``). The common case (no brackets in values) is
    read with one regular expression per item; anything else goes through the
    general rule below, which also gives the precise error.
    """
    start = cur.skip()
    text = cur.text
    if text.startswith("{", start):
        items: list[tuple[str, Any]] = []
        pos = start + 1
        match = _KV_ITEM.match
        while True:
            m = match(text, pos)
            if m is None:
                break
            key, quoted, plain = m.groups()
            items.append((key, QuotedString(unescape(quoted)) if quoted is not None else plain))
            pos = m.end()
        close = _CLOSE.match(text, pos)
        if close is not None:
            cur.pos = close.end()
            return KeyValueList(tuple(items))
    return _parse_key_values_general(cur)


def _parse_key_values_general(cur: Cursor) -> KeyValueList:
    open_pos = cur.expect("{", "to start a {key=value ...} list")
    items: list[tuple[str, Any]] = []
    while True:
        if cur.accept("}"):
            return KeyValueList(tuple(items))
        if cur.at_end():
            raise cur.error(
                "unexpected end of file inside {key=value ...}: the '{' at line"
                f" {cur.location(open_pos).line} is never closed"
            )
        if items:
            cur.accept(",")
        key = cur.require(_KEY, "a key (key=value)").group(0)
        cur.expect("=", f"after '{key}'")
        if cur.peek() == '"':
            items.append((key, QuotedString(cur.string())))
        else:
            items.append((key, cur.raw_value(f"a value for '{key}'")))


# -- printers --------------------------------------------------------------------


def format_bool(value: bool) -> str:
    return "true" if value else "false"


def format_float_value(value: float) -> str:
    if value != value:
        return "nan"
    return format_float(float(value), ElementType.F64)


def format_quoted(value: QuotedString) -> str:
    return '"' + escape(value.text) + '"'


def format_int_list(value: tuple[int, ...]) -> str:
    return "{" + ",".join(str(v) for v in value) + "}"


def format_slice(value: tuple[SliceRange, ...]) -> str:
    parts = []
    for r in value:
        stride = f":{r.stride}" if r.stride != 1 else ""
        parts.append(f"[{r.start}:{r.limit}{stride}]")
    return "{" + ", ".join(parts) + "}"


def format_padding(value: PaddingConfig) -> str:
    interior = any(d.interior for d in value.dims)
    return "x".join(
        f"{d.low}_{d.high}" + (f"_{d.interior}" if interior else "") for d in value.dims
    )


def format_window(value: Window) -> str:
    dims = value.dims
    if not dims:
        return "{}"
    parts = ["size=" + "x".join(str(d.size) for d in dims)]
    if any(d.stride != 1 for d in dims):
        parts.append("stride=" + "x".join(str(d.stride) for d in dims))
    if any(d.pad_low or d.pad_high for d in dims):
        parts.append("pad=" + "x".join(f"{d.pad_low}_{d.pad_high}" for d in dims))
    if any(d.base_dilation != 1 for d in dims):
        parts.append("lhs_dilate=" + "x".join(str(d.base_dilation) for d in dims))
    if any(d.window_dilation != 1 for d in dims):
        parts.append("rhs_dilate=" + "x".join(str(d.window_dilation) for d in dims))
    if any(d.window_reversal for d in dims):
        parts.append("rhs_reversal=" + "x".join(str(int(d.window_reversal)) for d in dims))
    return "{" + " ".join(parts) + "}"


def format_dim_labels(value: ConvDimensionNumbers) -> str:
    def encode(major: int, minor: int, spatial: tuple[int, ...], a: str, b: str) -> str:
        labels = [""] * (2 + len(spatial))
        labels[major] = a
        labels[minor] = b
        for k, dim in enumerate(spatial):
            labels[dim] = str(k)
        return "".join(labels)

    v = value
    lhs = encode(v.input_batch, v.input_feature, v.input_spatial, "b", "f")
    rhs = encode(v.kernel_input_feature, v.kernel_output_feature, v.kernel_spatial, "i", "o")
    out = encode(v.output_batch, v.output_feature, v.output_spatial, "b", "f")
    return f"{lhs}_{rhs}->{out}"


def format_computation(value: ComputationRef | tuple[ComputationRef, ...]) -> str:
    if isinstance(value, tuple):
        return format_computation_list(value)
    return "%" + value.name


def format_computation_list(value: tuple[ComputationRef, ...]) -> str:
    return "{" + ", ".join("%" + ref.name for ref in value) + "}"


def format_instruction_refs(value: InstructionRefs) -> str:
    return "{" + ", ".join("%" + name for name in value.names) + "}"


def _format_kv_value(value: Any) -> str:
    if isinstance(value, QuotedString):
        return format_quoted(value)
    return format_value(value)


def key_values_printer(separator: str) -> Callable[[KeyValueList], str]:
    def format_key_values(value: KeyValueList) -> str:
        return "{" + separator.join(f"{k}={_format_kv_value(v)}" for k, v in value.items) + "}"

    return format_key_values


def format_value(value: Any) -> str:
    """Print any attribute value from its Python type (see heron.hlo.attributes)."""
    if isinstance(value, bool):
        return format_bool(value)
    if isinstance(value, int):
        return str(value)
    if isinstance(value, float):
        return format_float_value(value)
    if isinstance(value, str):
        return value
    if isinstance(value, QuotedString):
        return format_quoted(value)
    if isinstance(value, RawAttribute):
        return value.text
    if isinstance(value, ComputationRef):
        return format_computation(value)
    if isinstance(value, PaddingConfig):
        return format_padding(value)
    if isinstance(value, Window):
        return format_window(value)
    if isinstance(value, ConvDimensionNumbers):
        return format_dim_labels(value)
    if isinstance(value, InstructionRefs):
        return format_instruction_refs(value)
    if isinstance(value, KeyValueList):
        return key_values_printer(",")(value)
    if isinstance(value, tuple):
        if all(isinstance(v, ComputationRef) for v in value) and value:
            return format_computation_list(value)
        if all(isinstance(v, SliceRange) for v in value) and value:
            return format_slice(value)
        if all(isinstance(v, int) and not isinstance(v, bool) for v in value):
            return format_int_list(value)
        if all(isinstance(v, bool) for v in value):
            return "{" + ",".join(format_bool(v) for v in value) + "}"
    raise TypeError(f"cannot print attribute value {value!r} ({type(value).__name__})")


# -- the table -------------------------------------------------------------------

INT = AttributeSyntax(parse_int, str, (int,))
BOOL = AttributeSyntax(parse_bool, format_bool, (bool,))
WORD_VALUE = AttributeSyntax(parse_word, str, (str,))
QUOTED = AttributeSyntax(parse_quoted, format_quoted, (QuotedString,))
FLOAT = AttributeSyntax(parse_float, format_float_value, (float,))
INT_LIST = AttributeSyntax(parse_int_list, format_int_list, (tuple,))
SLICE = AttributeSyntax(parse_slice, format_slice, (tuple,))
PADDING = AttributeSyntax(parse_padding, format_padding, (PaddingConfig,))
WINDOW = AttributeSyntax(parse_window, format_window, (Window,))
DIM_LABELS = AttributeSyntax(parse_dim_labels, format_dim_labels, (ConvDimensionNumbers,))
COMPUTATION = AttributeSyntax(
    parse_computation, format_computation, (ComputationRef, tuple), cacheable=False
)
COMPUTATION_LIST = AttributeSyntax(
    parse_computation_list, format_computation_list, (tuple,), cacheable=False
)
INSTRUCTION_REFS = AttributeSyntax(
    parse_instruction_refs, format_instruction_refs, (InstructionRefs,)
)
METADATA = AttributeSyntax(parse_key_values, key_values_printer(" "), (KeyValueList,))
KEY_VALUES = AttributeSyntax(parse_key_values, key_values_printer(","), (KeyValueList,))
RAW = AttributeSyntax(parse_raw, format_value, (RawAttribute,))


def _names(syntax: AttributeSyntax, names: str) -> dict[str, AttributeSyntax]:
    return {name: syntax for name in names.split()}


#: Attribute name -> syntax. Names not listed are RawAttribute.
ATTRIBUTES: dict[str, AttributeSyntax] = {
    **_names(
        INT,
        "index iota_dimension feature_group_count batch_group_count exponent_bits"
        " mantissa_bits index_vector_dim channel_id feature_index k",
    ),
    **_names(
        BOOL,
        "is_stable indices_are_sorted unique_indices largest constrain_layout"
        " use_global_device_ids is_host_transfer left_side lower unit_diagonal"
        " custom_call_has_side_effect",
    ),
    **_names(
        WORD_VALUE,
        "kind direction type distribution fft_type algorithm transpose_a"
        " custom_call_schedule api_version",
    ),
    **_names(
        QUOTED,
        "custom_call_target async_execution_thread infeed_config outfeed_config opaque",
    ),
    **_names(
        INT_LIST,
        "dimensions slice_sizes dynamic_slice_sizes lhs_batch_dims lhs_contracting_dims"
        " rhs_batch_dims rhs_contracting_dims offset_dims collapsed_slice_dims"
        " start_index_map operand_batching_dims start_indices_batching_dims"
        " update_window_dims inserted_window_dims scatter_dims_to_operand_dims"
        " input_batching_dims scatter_indices_batching_dims fft_length"
        " lhs_ragged_dims rhs_group_dims",
    ),
    "epsilon": FLOAT,
    "slice": SLICE,
    "padding": PADDING,
    "window": WINDOW,
    "dim_labels": DIM_LABELS,
    **{name: COMPUTATION for name in COMPUTATION_ATTRIBUTES},
    **{name: COMPUTATION_LIST for name in COMPUTATION_LIST_ATTRIBUTES},
    "control-predecessors": INSTRUCTION_REFS,
    "metadata": METADATA,
    "frontend_attributes": KEY_VALUES,
    "statistics": KEY_VALUES,
}

#: Attributes of the ``HloModule`` line that heron reads; the rest stay raw.
HEADER_ATTRIBUTES: dict[str, AttributeSyntax] = {
    "is_scheduled": BOOL,
    "replica_count": INT,
    "num_partitions": INT,
    "frontend_attributes": KEY_VALUES,
    "input_output_alias": AttributeSyntax(
        parse_input_output_alias, format_input_output_alias, (InputOutputAlias,)
    ),
}


def syntax_of(name: str, table: dict[str, AttributeSyntax] = ATTRIBUTES) -> AttributeSyntax:
    return table.get(name, RAW)


def format_attribute(name: str, value: Any, table: dict[str, AttributeSyntax] = ATTRIBUTES) -> str:
    """``name=value`` text for one attribute.

    The table's printer is used when the value has the type that the table's
    parser gives; any other value (a pass may store what it likes) prints by
    its Python type.
    """
    syntax = table.get(name, RAW)
    if (
        isinstance(value, syntax.types)
        and not (isinstance(value, bool) and bool not in syntax.types)
        and not (isinstance(value, tuple) and not _tuple_fits(syntax, value))
    ):
        return f"{name}={syntax.print(value)}"
    return f"{name}={format_value(value)}"


def _tuple_fits(syntax: AttributeSyntax, value: tuple[Any, ...]) -> bool:
    if syntax is INT_LIST:
        return all(isinstance(v, int) and not isinstance(v, bool) for v in value)
    if syntax is SLICE:
        return all(isinstance(v, SliceRange) for v in value)
    return all(isinstance(v, ComputationRef) for v in value)
