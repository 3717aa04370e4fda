"""Deterministic mutants of the corpus: each takes valid HLO and breaks one thing.

Every mutator is ``(text, rng) -> (text, description)`` working on the text,
not on a parsed module, so that it can produce what heron's parser must
refuse (a bad token, a wrong rank) as well as what parses and must then be
refused or handled further down (a zero-size dimension, a huge shape, an
opcode on the wrong types). Byte-level mutators work on the encoded bytes to
reach invalid UTF-8 and truncated tokens.
"""

from __future__ import annotations

import random
import re
from collections.abc import Callable
from pathlib import Path

DTYPES = (
    "pred s2 s4 s8 s16 s32 s64 u2 u4 u8 u16 u32 u64 f16 bf16 f32 f64 c64 c128 "
    "f8e4m3fn f8e5m2 f8e4m3fnuz f8e5m2fnuz f4e2m1fn token tuple"
).split()
OPCODES = (
    "add subtract multiply divide maximum minimum power remainder and or xor negate abs "
    "exponential log tanh sqrt rsqrt sine cosine floor ceil sign not convert bitcast "
    "bitcast-convert reshape transpose broadcast reduce slice concatenate pad reverse "
    "dynamic-slice dynamic-update-slice scatter gather iota constant select compare clamp "
    "dot copy tuple get-tuple-element parameter fusion reduce-window sort atan2 "
    "shift-left shift-right-logical popcnt clz round-nearest-even is-finite real imag bogus"
).split()
EDGE_NUMBERS = (
    "0 1 -1 2 3 7 8 31 32 127 128 255 256 1023 1024 65535 65536 2147483647 2147483648 "
    "4294967296 9223372036854775807 18446744073709551616 1000000000000 -2147483649"
).split()
EDGE_FLOATS = "nan -nan inf -inf 1e308 -1e308 1e-45 0.0 -0.0 3.4e38 65504".split()

_DTYPE_RE = re.compile(r"\b(" + "|".join(sorted(DTYPES, key=len, reverse=True)) + r")\[")
_SHAPE_RE = re.compile(r"\b(?:[a-z]+\d*[a-z0-9]*)\[([0-9,]*)\]")
_LAYOUT_RE = re.compile(r"\]\{([0-9,]*)(?::[^}]*)?\}")
_OPCODE_RE = re.compile(r"\}?\s([a-z][a-z0-9-]*)\(")
_NUMBER_RE = re.compile(r"(?<![A-Za-z_.\d])-?\d+(?:\.\d+)?(?:e-?\d+)?")
_ATTR_RE = re.compile(
    r"\b(dimensions|slice|padding|window|index_vector_dim|"
    r"update_window_dims|inserted_window_dims|offset_dims|"
    r"collapsed_slice_dims|start_index_map|lhs_contracting_dims|"
    r"rhs_contracting_dims|direction|kind|to_apply|calls|"
    r"scatter_dims_to_operand_dims|slice_sizes)="
)

Mutator = Callable[[str, random.Random], tuple[str, str]]


def _replace_match(text: str, match: re.Match, group: int, new: str) -> str:
    return text[: match.start(group)] + new + text[match.end(group) :]


def _pick(pattern: re.Pattern, text: str, rng: random.Random) -> re.Match | None:
    matches = list(pattern.finditer(text))
    return rng.choice(matches) if matches else None


def change_dtype(text: str, rng: random.Random) -> tuple[str, str]:
    """One element type replaced: sub-byte, complex, f8 and token types reach rare paths."""
    match = _pick(_DTYPE_RE, text, rng)
    if match is None:
        return text, "dtype: none"
    new = rng.choice(DTYPES)
    everywhere = rng.random() < 0.3
    if everywhere:  # the same type everywhere keeps the module consistent: it then verifies
        old = match.group(1)
        return re.sub(rf"\b{old}\[", f"{new}[", text), f"dtype: every {old} -> {new}"
    return _replace_match(text, match, 1, new), f"dtype: {match.group(1)} -> {new} @{match.start()}"


def change_dims(text: str, rng: random.Random) -> tuple[str, str]:
    """One shape's dimensions changed: zero, one, huge, one more or one fewer."""
    match = _pick(_SHAPE_RE, text, rng)
    if match is None:
        return text, "dims: none"
    dims = [d for d in match.group(1).split(",") if d]
    choice = rng.randrange(5)
    if choice == 0 and dims:
        dims[rng.randrange(len(dims))] = rng.choice(["0", "1", "2", "3"])
    elif choice == 1 and dims:
        dims[rng.randrange(len(dims))] = rng.choice(["2147483648", "1000000", "65537", "100000"])
    elif choice == 2:
        dims.insert(rng.randrange(len(dims) + 1), str(rng.choice([1, 2, 5, 32])))
    elif choice == 3 and dims:
        dims.pop(rng.randrange(len(dims)))
    else:
        dims = [str(max(0, int(d) + rng.choice([-1, 1]))) for d in dims]
    new = ",".join(dims)
    return _replace_match(text, match, 1, new), f"dims: [{match.group(1)}] -> [{new}]"


def change_dims_everywhere(text: str, rng: random.Random) -> tuple[str, str]:
    """One dimension size replaced in every shape: keeps the module consistent (a
    zero-size or huge version of a valid fusion) so it gets past the verifier."""
    sizes = sorted({d for m in _SHAPE_RE.finditer(text) for d in m.group(1).split(",") if d})
    if not sizes:
        return text, "dims-all: none"
    old = rng.choice(sizes)
    new = rng.choice(["0", "1", "3", "65536", "2147483648", "100000000"])

    def sub(m: re.Match) -> str:
        dims = [new if d == old else d for d in m.group(1).split(",")]
        return m.group(0)[: m.start(1) - m.start(0)] + ",".join(dims) + "]"

    return _SHAPE_RE.sub(sub, text), f"dims-all: {old} -> {new}"


def change_layout(text: str, rng: random.Random) -> tuple[str, str]:
    """A layout permuted, shortened, made invalid, or given tiles."""
    match = _pick(_LAYOUT_RE, text, rng)
    if match is None:
        return text, "layout: none"
    dims = [d for d in match.group(1).split(",") if d]
    choice = rng.randrange(5)
    if choice == 0:
        rng.shuffle(dims)
        new = ",".join(dims)
    elif choice == 1:
        new = ",".join(dims[:-1])
    elif choice == 2:
        new = ",".join(dims + [str(len(dims))])
    elif choice == 3:
        new = ",".join(dims) + rng.choice([":T(8,128)", ":E(4)", ":T(2)(1)", ":S(1)", ":E(99)"])
    else:
        new = ",".join(str(rng.choice([0, 1, 7, -1])) for _ in dims)
    return (
        text[: match.start()] + "]{" + new + "}" + text[match.end() :],
        f"layout: {{{match.group(1)}}} -> {{{new}}}",
    )


def change_opcode(text: str, rng: random.Random) -> tuple[str, str]:
    """One instruction's opcode replaced: the verifier and the emitters must refuse it."""
    match = _pick(_OPCODE_RE, text, rng)
    if match is None:
        return text, "opcode: none"
    new = rng.choice(OPCODES)
    return _replace_match(text, match, 1, new), f"opcode: {match.group(1)} -> {new}"


def change_attribute(text: str, rng: random.Random) -> tuple[str, str]:
    """An attribute's value replaced with another of its kind or garbage."""
    match = _pick(_ATTR_RE, text, rng)
    if match is None:
        return change_number(text, rng)
    end = match.end()
    # The value runs to the next ',' or ')' at depth 0 of braces.
    depth, stop = 0, end
    while stop < len(text):
        ch = text[stop]
        if ch in "{[":
            depth += 1
        elif ch in "}]":
            depth -= 1
        if depth < 0 or (depth == 0 and ch in ",)\n"):
            break
        stop += 1
        if depth == 0 and text[stop - 1] in "}]":
            break
    choices = [
        "{}",
        "{0}",
        "{1,0}",
        "{0,0}",
        "{5}",
        "{-1}",
        "{[0:1]}",
        "{[0:0:1],[2:1:1]}",
        "{[0:100000:0]}",
        "LT",
        "kInput",
        "kLoop",
        "kCustom",
        "nosuchcomputation",
        "0_0x0_0",
        "-1",
    ]
    new = rng.choice(choices)
    return text[:end] + new + text[stop:], f"attribute: {match.group(1)}={text[end:stop]} -> {new}"


def change_number(text: str, rng: random.Random) -> tuple[str, str]:
    """One number (a constant, an index, a size) replaced with an edge value."""
    match = _pick(_NUMBER_RE, text, rng)
    if match is None:
        return text, "number: none"
    new = rng.choice(EDGE_FLOATS if "." in match.group(0) else EDGE_NUMBERS + EDGE_FLOATS)
    return (
        text[: match.start()] + new + text[match.end() :],
        f"number: {match.group(0)} -> {new} @{match.start()}",
    )


def change_line(text: str, rng: random.Random) -> tuple[str, str]:
    """A line deleted, duplicated or swapped with the next: dangling names, duplicate names."""
    lines = text.split("\n")
    i = rng.randrange(len(lines))
    choice = rng.randrange(3)
    if choice == 0:
        del lines[i]
        what = "deleted"
    elif choice == 1:
        lines.insert(i, lines[i])
        what = "duplicated"
    else:
        j = min(i + 1, len(lines) - 1)
        lines[i], lines[j] = lines[j], lines[i]
        what = "swapped with the next"
    return "\n".join(lines), f"line {i + 1} {what}"


def mutate_bytes(data: bytes, rng: random.Random) -> tuple[bytes, str]:
    """Byte-level damage: flips, insertions, deletions, truncation, invalid UTF-8."""
    buf = bytearray(data)
    choice = rng.randrange(6)
    pos = rng.randrange(len(buf) + 1)
    if choice == 0 and buf:
        pos = min(pos, len(buf) - 1)
        buf[pos] ^= 1 << rng.randrange(8)
        return bytes(buf), f"bytes: bit flip @{pos}"
    if choice == 1:
        junk = bytes(rng.randrange(256) for _ in range(rng.randint(1, 8)))
        return bytes(buf[:pos] + junk + buf[pos:]), f"bytes: insert {junk.hex()} @{pos}"
    if choice == 2:
        n = rng.randint(1, 16)
        return bytes(buf[:pos] + buf[pos + n :]), f"bytes: delete {n} @{pos}"
    if choice == 3:
        return bytes(buf[:pos]), f"bytes: truncate @{pos}"
    bad = rng.choice([b"\xff", b"\xfe\xff", b"\xc3", b"\xe2\x82", b"\xed\xa0\x80", b"\x80", b"\0"])
    return bytes(buf[:pos] + bad + buf[pos:]), f"bytes: invalid utf-8 {bad.hex()} @{pos}"


TEXT_MUTATORS: dict[str, Mutator] = {
    "dtype": change_dtype,
    "dims": change_dims,
    "dims-all": change_dims_everywhere,
    "layout": change_layout,
    "opcode": change_opcode,
    "attribute": change_attribute,
    "number": change_number,
    "line": change_line,
}
#: Mutations after which `heron run` is worth its time: sizes and types reach the budget.
RUN_AFTER = {"dtype", "dims", "dims-all", "number"}


def corpus_files(corpus: Path) -> list[Path]:
    """The corpus's .hlo files in a stable order (the seed picks among them)."""
    return sorted(corpus.rglob("*.hlo"))


def mutate(source: bytes, rng: random.Random) -> tuple[bytes, list[str], bool]:
    """One to three mutations of ``source``; returns the mutant, what was done, and
    whether `heron run` should follow (the mutation touched sizes or types)."""
    data, done, run = source, [], False
    for _ in range(rng.choice((1, 1, 1, 2, 3))):
        name = rng.choice([*TEXT_MUTATORS, "bytes"])
        if name == "bytes":
            data, what = mutate_bytes(data, rng)
        else:
            text, what = TEXT_MUTATORS[name](data.decode("utf-8", "surrogateescape"), rng)
            data = text.encode("utf-8", "surrogateescape")
            run = run or name in RUN_AFTER
        done.append(what)
    return data, done, run
