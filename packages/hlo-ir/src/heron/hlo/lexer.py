"""A cursor over HLO text: position tracking, whitespace/comment skipping, errors.

The HLO grammar is small enough that heron parses it without a separate token
stream: each grammar rule (in ``parser``, ``literals`` and ``attribute_syntax``)
asks the cursor for the next piece it expects with a compiled regular
expression. The cursor's one job is to know where it is, so that every error
reads ``file:line:col: error: ...`` with the offending line and a caret.
Line numbers are computed only when something asks for a location (errors, and
the locations the parser records), from a table of line start offsets.
"""

from __future__ import annotations

import bisect
import re
from itertools import accumulate

from heron.hlo.errors import HloParseError, SourceLocation

#: Whitespace and both comment styles, any number of them.
_SKIP = re.compile(r"(?:[ \t\r\n]++|//[^\n]*+|/\*(?:[^*]++|\*(?!/))*+\*/)*+")
#: A name, with or without its ``%``: a letter or '_', then letters, digits, '_', '.', '-'.
NAME = re.compile(r"%?[A-Za-z_][A-Za-z0-9_.\-]*")
#: An attribute name (``control-predecessors`` has a hyphen).
ATTRIBUTE_NAME = re.compile(r"[A-Za-z_][A-Za-z0-9_.\-]*")
#: A bare word value: ``kLoop``, ``GT``, ``rng_uniform``.
WORD = re.compile(r"[A-Za-z0-9_.\-]+")
INTEGER = re.compile(r"[-+]?[0-9]+")
#: A double-quoted string with C escapes.
STRING = re.compile(r'"(?:[^"\\\n]++|\\.)*+"')
#: A token, for messages that say what was found instead.
_ANY_TOKEN = re.compile(r'[A-Za-z0-9_.%\-]+|"[^"\n]{0,30}"?|\S')


def line_starts_of(text: str, lines: list[str] | None = None) -> list[int]:
    """Offsets at which each line of ``text`` starts (line 1 at index 0).

    ``lines`` is ``text.split("\\n")`` when the caller already has it.
    """
    if lines is None:
        lines = text.split("\n")
    return list(accumulate([len(line) + 1 for line in lines[:-1]], initial=0))


class Cursor:
    """A position in a text, with the operations every grammar rule needs.

    ``lines`` and ``line_starts`` may be passed in when the caller already
    split the text (the module parser does, for its fast path).
    """

    __slots__ = ("text", "pos", "source", "_line_starts", "_lines")

    def __init__(
        self,
        text: str,
        source: str = "<string>",
        pos: int = 0,
        line_starts: list[int] | None = None,
        lines: list[str] | None = None,
    ):
        self.text = text
        self.pos = pos
        self.source = source
        self._line_starts = line_starts
        self._lines = lines

    # -- locations -----------------------------------------------------------
    @property
    def line_starts(self) -> list[int]:
        if self._line_starts is None:
            self._line_starts = line_starts_of(self.text)
        return self._line_starts

    @property
    def lines(self) -> list[str]:
        if self._lines is None:
            self._lines = self.text.split("\n")
        return self._lines

    def line_index(self, pos: int) -> int:
        """0-based index of the line holding offset ``pos``."""
        return bisect.bisect_right(self.line_starts, pos) - 1

    def location(self, pos: int | None = None) -> SourceLocation:
        if pos is None:
            pos = self.pos
        if pos >= len(self.text):
            # The end of the file: point just after its last visible character.
            pos = len(self.text.rstrip())
        pos = max(0, pos)
        index = self.line_index(pos)
        column = pos - self.line_starts[index] + 1
        return SourceLocation(self.source, index + 1, column, self.lines[index])

    def error(self, message: str, pos: int | None = None) -> HloParseError:
        """An error at ``pos`` (default: here), to be raised by the caller."""
        return HloParseError(message, self.location(pos))

    # -- scanning ------------------------------------------------------------
    def skip(self) -> int:
        """Skip whitespace and comments; return the new position."""
        pos = _SKIP.match(self.text, self.pos).end()
        if self.text.startswith("/*", pos):
            raise self.error("unterminated comment: '/*' without '*/'", pos)
        self.pos = pos
        return pos

    def at_end(self) -> bool:
        return self.skip() >= len(self.text)

    def peek(self) -> str:
        """The next significant character, or '' at the end."""
        pos = self.skip()
        return self.text[pos : pos + 1]

    def startswith(self, prefix: str) -> bool:
        return self.text.startswith(prefix, self.skip())

    def accept(self, literal: str) -> bool:
        """Consume ``literal`` if it comes next."""
        pos = self.skip()
        if self.text.startswith(literal, pos):
            self.pos = pos + len(literal)
            return True
        return False

    def expect(self, literal: str, context: str = "") -> int:
        """Consume ``literal`` or fail; returns its position."""
        pos = self.skip()
        if self.text.startswith(literal, pos):
            self.pos = pos + len(literal)
            return pos
        where = f" {context}" if context else ""
        raise self.error(f"expected '{literal}'{where}, found {self.describe_next()}", pos)

    def match(self, pattern: re.Pattern[str]) -> re.Match[str] | None:
        """Match a compiled pattern at the next significant character."""
        m = pattern.match(self.text, self.skip())
        if m is not None:
            self.pos = m.end()
        return m

    def require(self, pattern: re.Pattern[str], what: str) -> re.Match[str]:
        m = self.match(pattern)
        if m is None:
            raise self.error(f"expected {what}, found {self.describe_next()}")
        return m

    def accept_word(self, word: str) -> bool:
        """Consume a keyword only when it is a whole word (``ROOT`` not ``ROOTS``)."""
        pos = self.skip()
        end = pos + len(word)
        if self.text.startswith(word, pos):
            nxt = self.text[end : end + 1]
            if not (nxt.isalnum() or nxt in "_.-%"):
                self.pos = end
                return True
        return False

    def describe_next(self) -> str:
        pos = self.skip()
        if pos >= len(self.text):
            return "end of file"
        m = _ANY_TOKEN.match(self.text, pos)
        token = m.group(0) if m else self.text[pos]
        return f"'{token}'"

    # -- small grammar pieces ------------------------------------------------
    def name(self, what: str = "a name") -> tuple[str, int]:
        """A ``%name`` or bare name, without its ``%``; returns (name, position)."""
        m = self.require(NAME, what)
        text = m.group(0)
        return (text[1:] if text[0] == "%" else text), m.start()

    def integer(self, what: str = "an integer") -> int:
        return int(self.require(INTEGER, what).group(0))

    def string(self) -> str:
        """A double-quoted string, unescaped."""
        pos = self.skip()
        if not self.text.startswith('"', pos):
            raise self.error(f"expected a quoted string, found {self.describe_next()}", pos)
        m = STRING.match(self.text, pos)
        if m is None:
            raise self.error("unterminated string: no closing '\"' on this line", pos)
        self.pos = m.end()
        return unescape(m.group(0)[1:-1])

    def raw_value(self, what: str = "a value") -> str:
        """Text up to the next top-level ',' (or closing bracket, or whitespace).

        Brackets of all three kinds must balance and strings must close; the
        text is returned exactly as written, for ``RawAttribute``.
        """
        text = self.text
        start = pos = self.skip()
        n = len(text)
        stack: list[tuple[str, int]] = []
        special = _RAW_SPECIAL.search
        while True:
            m = special(text, pos)
            if m is None:
                pos = n
                break
            pos = m.start()
            c = text[pos]
            if c == '"':
                sm = STRING.match(text, pos)
                if sm is None:
                    raise self.error("unterminated string: no closing '\"' on this line", pos)
                pos = sm.end()
                continue
            if c in _CLOSERS:
                stack.append((_CLOSERS[c], pos))
            elif c in "})]":
                if not stack:
                    break
                expected, open_pos = stack.pop()
                if c != expected:
                    raise self.error(
                        f"'{c}' does not match the '{text[open_pos]}' opened at"
                        f" column {self.location(open_pos).column}",
                        pos,
                    )
            elif not stack:  # ',' or whitespace at depth 0
                break
            pos += 1
        if stack:
            _, open_pos = stack[-1]
            loc = self.location(open_pos)
            raise self.error(
                f"unexpected end of file: '{text[open_pos]}' opened at line {loc.line}"
                f" column {loc.column} is never closed",
                n,
            )
        if pos == start:
            raise self.error(f"expected {what}, found {self.describe_next()}", start)
        self.pos = pos
        return text[start:pos]


_CLOSERS = {"{": "}", "(": ")", "[": "]"}
_RAW_SPECIAL = re.compile(r'["{}()\[\],\s]')


# -- string escapes ------------------------------------------------------------

_SIMPLE_ESCAPES = {
    "n": "\n",
    "t": "\t",
    "r": "\r",
    '"': '"',
    "'": "'",
    "\\": "\\",
    "?": "?",
    "a": "\a",
    "b": "\b",
    "f": "\f",
    "v": "\v",
}
_ESCAPE = re.compile(r"\\(?:([0-7]{1,3})|x([0-9a-fA-F]{1,2})|(.))", re.S)


def unescape(body: str) -> str:
    """Undo C escapes. Octal/hex escapes are bytes, decoded as UTF-8.

    XLA escapes every byte outside printable ASCII as octal, so a UTF-8
    character arrives as several ``\\ooo`` escapes; bytes that are not valid
    UTF-8 survive as surrogates (``escape`` writes them back as the same bytes).
    """
    if "\\" not in body:
        return body
    out = bytearray()
    last = 0
    for m in _ESCAPE.finditer(body):
        out += body[last : m.start()].encode("utf-8", "surrogateescape")
        octal, hexa, other = m.groups()
        if octal is not None:
            out.append(int(octal, 8) & 0xFF)
        elif hexa is not None:
            out.append(int(hexa, 16))
        else:
            out += _SIMPLE_ESCAPES.get(other, "\\" + other).encode("utf-8", "surrogateescape")
        last = m.end()
    out += body[last:].encode("utf-8", "surrogateescape")
    return out.decode("utf-8", "surrogateescape")


_PRINTABLE = re.compile(r"[ !#-\[\]-~\u00a0-\ud7ff\ue000-\U0010ffff]*")


def escape(text: str) -> str:
    """C-escape a string for printing between double quotes.

    Printable characters (non-ASCII ones included) are written as they are;
    quotes, backslashes and control characters are escaped.
    """
    if _PRINTABLE.fullmatch(text):
        return text
    parts: list[str] = []
    for ch in text:
        if ch == '"':
            parts.append('\\"')
        elif ch == "\\":
            parts.append("\\\\")
        elif ch == "\n":
            parts.append("\\n")
        elif ch == "\t":
            parts.append("\\t")
        elif ch == "\r":
            parts.append("\\r")
        elif " " <= ch <= "~" or ("\u00a0" <= ch and not "\ud800" <= ch <= "\udfff"):
            parts.append(ch)
        else:
            for byte in ch.encode("utf-8", "surrogateescape"):
                parts.append(f"\\{byte:03o}")
    return "".join(parts)
