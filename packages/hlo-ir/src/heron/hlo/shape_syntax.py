"""HLO shape text: ``f32[8,4]{1,0}``, ``bf16[<=16,?]``, ``(s32[], token[])``.

The grammar the module parser, the literal parser (an old dump's
``constant(f32[2] {1, 2})``) and the thunk and artefact readers share; it
depends on the lexer alone, so none of them imports another to read a shape.
"""

from __future__ import annotations

import re

from heron.hlo.element_types import ElementType
from heron.hlo.lexer import Cursor
from heron.hlo.shapes import MAX_ELEMENTS, ArrayShape, Layout, Shape, TupleShape
from heron.hlo.spelling import closest

__all__ = ["MAX_TUPLE_NESTING", "parse_shape", "parse_shape_at"]

_ELEMENT_TYPE_NAMES = [t.value for t in ElementType]
_TYPE_WORD = re.compile(r"[a-z][a-z0-9]*")
_DIM = re.compile(r"(<=)?([0-9]+)|\?")


def parse_shape(text: str) -> Shape:
    """Parse one shape (``f32[8,4]{1,0}``, ``(s32[], token[])``...)."""
    cur = Cursor(text, "<shape>")
    shape = parse_shape_at(cur)
    if not cur.at_end():
        raise cur.error(f"unexpected text after the shape: {cur.describe_next()}")
    return shape


# -- shapes ----------------------------------------------------------------------------


#: How deep tuple shapes may nest. XLA sets no limit (its parser recurses on
#: the C++ stack); heron's parser, printer, verifier and evaluator recurse on
#: shapes in Python, so an absurd depth is refused here, located, rather than
#: ending in a RecursionError anywhere downstream. Real modules nest a few levels.
MAX_TUPLE_NESTING = 64


def parse_shape_at(cur: Cursor, depth: int = 0) -> Shape:
    """shape ::= tuple_shape | array_shape (at the cursor)."""
    start = cur.skip()
    if cur.text.startswith("(", start):
        return _tuple_shape(cur, start, depth + 1)
    return _array_shape(cur, start)


def _tuple_shape(cur: Cursor, start: int, depth: int) -> TupleShape:
    if depth > MAX_TUPLE_NESTING:
        raise cur.error(f"tuple shapes nested more than {MAX_TUPLE_NESTING} deep", start)
    cur.pos = start + 1
    elements: list[Shape] = []
    if cur.accept(")"):
        return TupleShape(())
    while True:
        if cur.at_end():
            raise cur.error(
                "unexpected end of file inside a tuple shape: the '(' at line"
                f" {cur.location(start).line} is never closed"
            )
        elements.append(parse_shape_at(cur, depth))
        if cur.accept(")"):
            return TupleShape(tuple(elements))
        if cur.at_end():
            raise cur.error(
                "unexpected end of file inside a tuple shape: the '(' at line"
                f" {cur.location(start).line} is never closed"
            )
        cur.expect(",", "or ')' in a tuple shape")


def _array_shape(cur: Cursor, start: int) -> ArrayShape:
    text = cur.text
    m = _TYPE_WORD.match(text, start)
    if m is None:
        raise cur.error(f"expected a shape, found {cur.describe_next()}", start)
    type_name = m.group(0)
    try:
        element_type = ElementType.parse(type_name)
    except ValueError:
        close = closest(type_name, _ELEMENT_TYPE_NAMES)
        hint = f" (did you mean '{close}'?)" if close else ""
        raise cur.error(f"unknown element type '{type_name}'{hint}", start) from None
    cur.pos = m.end()
    cur.expect("[", f"after element type '{type_name}'")
    dims: list[int] = []
    dynamic: list[bool] = []
    if not cur.accept("]"):
        while True:
            dim_pos = cur.skip()
            dm = cur.match(_DIM)
            if dm is None:
                raise cur.error(
                    f"expected a dimension size in shape, found {cur.describe_next()}", dim_pos
                )
            if dm.group(0) == "?":
                raise cur.error(
                    "unbounded dynamic dimensions ('?') are not supported; give a bound ('<=N')",
                    dim_pos,
                )
            dims.append(int(dm.group(2)))
            dynamic.append(dm.group(1) is not None)
            if cur.accept("]"):
                break
            cur.expect(",", "or ']' in the dimensions of a shape")
    if element_type is ElementType.TOKEN and dims:
        raise cur.error("a token shape has no dimensions: write token[]", start)
    count = 1
    for d in dims:
        count *= d
    if count > MAX_ELEMENTS:
        raise cur.error(
            f"shape {type_name}[{','.join(map(str, dims))}] has {count} elements, more than"
            f" the {MAX_ELEMENTS} (2^48) heron accepts",
            start,
        )
    layout = None
    if text.startswith("{", cur.pos):
        layout = _layout(cur, len(dims))
    return ArrayShape(element_type, tuple(dims), layout, tuple(dynamic) if any(dynamic) else ())


def _layout(cur: Cursor, rank: int) -> Layout:
    """layout ::= '{' [int (',' int)*] [':' suffix] '}' -- the suffix kept verbatim."""
    text = cur.text
    open_pos = cur.pos
    cur.pos += 1
    order: list[int] = []
    suffix = ""
    if not cur.accept("}"):
        if not cur.startswith(":"):
            while True:
                order.append(cur.integer("a dimension number in the layout"))
                if not cur.accept(","):
                    break
        if cur.accept(":"):
            start = cur.pos
            depth = 0
            pos = start
            while pos < len(text):
                c = text[pos]
                if c in "([":
                    depth += 1
                elif c in ")]":
                    depth -= 1
                elif c == "}" and depth <= 0:
                    break
                elif c == "\n":
                    break
                pos += 1
            suffix = text[start:pos].strip()
            cur.pos = pos
        if cur.pos >= len(text):
            raise cur.error(
                "unexpected end of file inside a layout: the '{' is never closed", open_pos
            )
        cur.expect("}", "to close the layout")
    if sorted(order) != list(range(rank)):
        body = text[open_pos : cur.pos]
        raise cur.error(
            f"bad layout {body}: minor-to-major must list each of the {rank} dimensions"
            f" 0..{rank - 1} once",
            open_pos,
        )
    return Layout(tuple(order), suffix)
