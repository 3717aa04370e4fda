"""Parse the seeds' text form of indexing maps (and bare affine expressions).

The text is what ``IndexingMap.format`` prints and what XLA writes in
``#xla_gpu.indexing_map<"...">``::

    (th_x, bl_x)[vector_index]{rt0} -> (bl_x floordiv 4096, th_x * 4 + vector_index),
    domain: th_x in [0, 127], bl_x in [0, 24575], vector_index in [0, 3], rt0 in [0, 5],
    th_x + rt0 in [0, 100]

Parsing is a small hand-written recursive descent so that every error can say
*where* the text went wrong and *what* was expected there: indexing maps are
written by hand in tests and in emitter snapshots, and a bare "syntax error"
would be useless. Expressions are built with the folding constructors of
``heron.indexing.affine``, which is what makes ``parse(map.format()) == map``
hold for maps built by those same constructors.
"""

from __future__ import annotations

import functools
import re
from collections.abc import Sequence

import attrs

from heron.indexing.affine import (
    AffineExpr,
    BinaryKind,
    Constant,
    Dim,
    Symbol,
    build,
    mul,
)
from heron.indexing.indexing_map import IndexingError, IndexingMap, Variable
from heron.indexing.interval import Interval

_TOKEN = re.compile(r"(?P<int>\d+)|(?P<ident>[A-Za-z_][A-Za-z0-9_]*)|(?P<punct>->|[-+*()\[\]{},:])")

_DIVISIONS = {
    "floordiv": BinaryKind.FLOORDIV,
    "ceildiv": BinaryKind.CEILDIV,
    "mod": BinaryKind.MOD,
}


@attrs.frozen
class _Token:
    kind: str  # "int", "ident", "punct" or "end"
    text: str
    pos: int


def _tokenize(text: str) -> list[_Token]:
    tokens: list[_Token] = []
    pos = 0
    while True:
        while pos < len(text) and text[pos].isspace():
            pos += 1
        if pos == len(text):
            tokens.append(_Token("end", "end of input", pos))
            return tokens
        match = _TOKEN.match(text, pos)
        if match is None or match.end() == pos:
            raise IndexingError(f"unexpected character {text[pos]!r} at position {pos} in {text!r}")
        kind = match.lastgroup
        assert kind is not None
        tokens.append(_Token(kind, match.group(kind), match.start(kind)))
        pos = match.end()


class _Parser:
    """Token cursor plus the grammar; names are resolved against the current scope."""

    def __init__(self, text: str) -> None:
        self.text = text
        self.tokens = _tokenize(text)
        self.index = 0
        self.names: dict[str, AffineExpr] = {}

    # -- cursor -----------------------------------------------------------------
    @property
    def peek(self) -> _Token:
        return self.tokens[self.index]

    def next(self) -> _Token:
        token = self.tokens[self.index]
        if token.kind != "end":
            self.index += 1
        return token

    def error(self, expected: str, token: _Token | None = None) -> IndexingError:
        token = token or self.peek
        found = token.text if token.kind == "end" else repr(token.text)
        return IndexingError(
            f"expected {expected} at position {token.pos}, found {found}, in {self.text!r}"
        )

    def at(self, text: str) -> bool:
        token = self.peek
        return token.kind in ("punct", "ident") and token.text == text

    def accept(self, text: str) -> bool:
        if self.at(text):
            self.next()
            return True
        return False

    def expect(self, text: str) -> _Token:
        if not self.at(text):
            raise self.error(repr(text))
        return self.next()

    def expect_end(self) -> None:
        if self.peek.kind != "end":
            raise self.error("end of input")

    # -- pieces -----------------------------------------------------------------
    def integer(self) -> int:
        negative = self.accept("-")
        token = self.peek
        if token.kind != "int":
            raise self.error("an integer")
        self.next()
        return -int(token.text) if negative else int(token.text)

    def name_list(self, close: str, what: str) -> list[str]:
        names: list[str] = []
        if self.accept(close):
            return names
        while True:
            token = self.peek
            if token.kind != "ident" or token.text in _DIVISIONS:
                raise self.error(f"a {what} name")
            if token.text in self.names or token.text in names:
                raise IndexingError(
                    f"variable {token.text!r} declared twice (position {token.pos}) in "
                    f"{self.text!r}"
                )
            names.append(self.next().text)
            if self.accept(close):
                return names
            if not self.at(","):
                raise self.error(f"',' or {close!r}")
            self.next()

    def interval(self) -> Interval:
        start = self.expect("[")
        lower = self.integer()
        self.expect(",")
        upper = self.integer()
        self.expect("]")
        if lower > upper:
            raise IndexingError(
                f"empty range [{lower}, {upper}] at position {start.pos} in {self.text!r}: "
                "the lower bound is above the upper bound"
            )
        return Interval(lower, upper)

    # -- expressions ------------------------------------------------------------
    def expr(self) -> AffineExpr:
        result = self.term()
        while self.at("+") or self.at("-"):
            op = self.next().text
            rhs = self.term()
            result = result + rhs if op == "+" else result - rhs
        return result

    def term(self) -> AffineExpr:
        result = self.factor()
        while True:
            token = self.peek
            if token.kind == "punct" and token.text == "*":
                self.next()
                result = mul(result, self.factor())
            elif token.kind == "ident" and token.text in _DIVISIONS:
                self.next()
                rhs = self.factor()
                if isinstance(rhs, Constant) and rhs.value == 0:
                    raise IndexingError(
                        f"{token.text} by zero at position {token.pos} in {self.text!r}"
                    )
                result = build(_DIVISIONS[token.text], result, rhs)
            else:
                return result

    def factor(self) -> AffineExpr:
        token = self.peek
        if token.kind == "punct" and token.text == "-":
            self.next()
            return mul(self.factor(), Constant(-1))
        if token.kind == "int":
            self.next()
            return Constant(int(token.text))
        if token.kind == "punct" and token.text == "(":
            self.next()
            inner = self.expr()
            self.expect(")")
            return inner
        if token.kind == "ident" and token.text not in _DIVISIONS:
            self.next()
            if token.text not in self.names:
                known = ", ".join(self.names) or "none"
                raise IndexingError(
                    f"unknown variable {token.text!r} at position {token.pos} in "
                    f"{self.text!r} (known: {known})"
                )
            return self.names[token.text]
        raise self.error("an expression (integer, variable or '(')")

    def expr_list(self) -> list[AffineExpr]:
        self.expect("(")
        exprs: list[AffineExpr] = []
        if self.accept(")"):
            return exprs
        while True:
            exprs.append(self.expr())
            if self.accept(")"):
                return exprs
            if not self.at(","):
                raise self.error("',' or ')'")
            self.next()

    # -- maps -------------------------------------------------------------------
    def header(self) -> tuple[list[str], list[str], list[str], list[AffineExpr]]:
        """``(dims)[symbols]{runtime} -> (results)``; fills ``self.names``."""
        self.expect("(")
        dims = self.name_list(")", "dimension")
        self.names.update({n: Dim(i) for i, n in enumerate(dims)})
        symbols: list[str] = []
        runtime: list[str] = []
        if self.accept("["):
            symbols = self.name_list("]", "symbol")
            self.names.update({n: Symbol(i) for i, n in enumerate(symbols)})
        if self.accept("{"):
            runtime = self.name_list("}", "runtime variable")
            self.names.update({n: Symbol(len(symbols) + i) for i, n in enumerate(runtime)})
        self.expect("->")
        results = self.expr_list()
        return dims, symbols, runtime, results

    def indexing_map(self) -> IndexingMap:
        dims, symbols, runtime, results = self.header()
        all_names = [*dims, *symbols, *runtime]
        bounds: dict[str, Interval] = {}
        constraints: list[tuple[AffineExpr, Interval]] = []
        if self.accept(","):
            self.expect("domain")
            self.expect(":")
            while True:
                token = self.peek
                following = self.tokens[self.index + 1]
                if (
                    not constraints
                    and token.kind == "ident"
                    and token.text in self.names
                    and token.text not in bounds
                    and following.kind == "ident"
                    and following.text == "in"
                ):
                    self.next()
                    self.next()
                    bounds[token.text] = self.interval()
                else:
                    missing = [n for n in all_names if n not in bounds]
                    if missing:
                        raise self.error(f"the range of {missing[0]!r} ('... in [lo, hi]')")
                    expr = self.expr()
                    self.expect("in")
                    constraints.append((expr, self.interval()))
                if not self.accept(","):
                    break
        missing = [n for n in all_names if n not in bounds]
        if missing:
            raise self.error(
                "', domain: ' with the range of every variable (missing: "
                + ", ".join(missing)
                + ")"
            )
        self.expect_end()

        def variables(names: Sequence[str]) -> tuple[Variable, ...]:
            return tuple(Variable(n, bounds[n]) for n in names)

        return IndexingMap(
            variables(dims),
            tuple(results),
            variables(symbols),
            variables(runtime),
            tuple(constraints),
        )


#: Maps by the text :func:`format_indexing_map` gave them, and that text by the map,
#: bounded (cleared when full).
_FORMATTED: dict[str, IndexingMap] = {}
_TEXTS: dict[IndexingMap, str] = {}
_FORMATTED_KEPT = 1 << 14


def format_indexing_map(indexing_map: IndexingMap) -> str:
    """``indexing_map``'s text form, which :func:`parse_indexing_map` then answers with
    the map itself: an emitter writes each map it builds into an MLIR attribute as
    text, and every pass after it reads that text back (a map parses to an equal one,
    so parsing it again only cost the time). Memoised by the map: the passes write
    the same access map at many places of a kernel."""
    text = _TEXTS.get(indexing_map)
    if text is not None:
        return text
    text = indexing_map.format()
    if len(_FORMATTED) >= _FORMATTED_KEPT:
        _FORMATTED.clear()
        _TEXTS.clear()
    _FORMATTED[text] = indexing_map
    _TEXTS[indexing_map] = text
    return text


def parse_indexing_map(text: str) -> IndexingMap:
    """An ``IndexingMap`` from its text form; ``IndexingError`` saying where and what otherwise.

    Memoised by the text (maps are frozen values): the MLIR passes read the same
    ``#heron_gpu.indexing_map`` attributes back many times per kernel, most of them
    written by :func:`format_indexing_map`."""
    known = _FORMATTED.get(text)
    if known is not None:
        return known
    return _parse_text(text)


@functools.lru_cache(maxsize=4096)
def _parse_text(text: str) -> IndexingMap:
    return _Parser(text).indexing_map()


def forget_parsed() -> None:
    """Forget the parsed and formatted maps (``heron.indexing.forget_memos``)."""
    _parse_text.cache_clear()
    _FORMATTED.clear()
    _TEXTS.clear()


def parse_affine_expr(
    text: str, dim_names: Sequence[str] = (), symbol_names: Sequence[str] = ()
) -> AffineExpr:
    """One expression over the named dimensions and symbols (``d0 * 4 + s0``)."""
    parser = _Parser(text)
    parser.names.update({n: Dim(i) for i, n in enumerate(dim_names)})
    parser.names.update({n: Symbol(i) for i, n in enumerate(symbol_names)})
    result = parser.expr()
    parser.expect_end()
    return result


def parse_map_header(text: str) -> tuple[list[str], list[str], list[str], list[AffineExpr]]:
    """Names and results of ``(dims)[symbols]{runtime} -> (results)`` alone (no domain).

    Shared with ``mlir_text``: an MLIR ``affine_map`` is exactly this header.
    """
    parser = _Parser(text)
    header = parser.header()
    parser.expect_end()
    return header
