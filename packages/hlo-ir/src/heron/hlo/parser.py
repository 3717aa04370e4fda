"""The HLO text parser: modules as XLA and JAX print them, and the corpus form.

Grammar (one function per rule below; ``_ModuleParser`` holds them)::

    module       ::= [header] section* computation*
    header       ::= 'HloModule' name (',' attribute)*
    section      ::= ('FileNames' | 'FunctionNames' | 'FileLocations' | 'StackFrames')
                     NEWLINE (line NEWLINE)* (blank line)
    computation  ::= ['ENTRY'] name [signature] [',' attribute (',' attribute)*]
                     '{' instruction* '}'
    signature    ::= '(' [name ':' shape (',' name ':' shape)*] ')' '->' shape
    instruction  ::= ['ROOT'] name '=' [shape] opcode '(' operands ')' (',' attribute)*
    operands     ::= [[shape] name (',' [shape] name)*]     (constant: a literal,
                                                             parameter: a number)
    (literals: see heron.hlo.literals; a shape may be left out where XLA allows
    it, e.g. ``t = tuple(a, b)``: heron.hlo.shape_inference fills it in.)
    attribute    ::= attribute_name '=' value    (value grammar: attribute_syntax)
    shape        ::= '(' [shape (',' shape)*] ')'
                   | element_type '[' [dim (',' dim)*] ']' [layout]
    dim          ::= integer | '<=' integer
    layout       ::= '{' [integer (',' integer)*] [':' suffix] '}'   (right after ']')

Names may carry a ``%`` prefix; ``//`` and ``/* */`` comments are skipped
anywhere whitespace may go; instructions may break across lines.

Speed. Most instruction lines of real dumps are one line in one of a few
shapes, so before running the grammar functions on an instruction the parser
tries one compiled regular expression on its line (``_FAST_LINE``) and parses
the pieces through caches keyed by their text (shapes, attribute values and
small constants repeat a lot). Anything the fast path does not fully
understand (comments, multi-line instructions, unusual attribute values, any
error) is left to the grammar functions, which are the reference: they alone
report errors, so every error carries the exact file:line:col. Operands and
computations are resolved by name after each computation (operands may be
used before they are defined) and after the module (computations too).

Corpus form (XLA's emitter tests): text with computations but no ENTRY. The
last computation is the fusion under test; the parser appends an ENTRY
computation (named ``main`` unless taken) with one parameter per fusion
parameter (same numbers, names and shapes) and a ``ROOT`` ``fusion``
instruction (``kind=kLoop, calls=<fusion>``), and sets
``Module.fusion_under_test``. The printer writes such a module back in corpus
form, so the round trip keeps it.
"""

from __future__ import annotations

import gc
import re
from pathlib import Path
from typing import Any

import numpy as np

from heron.hlo.attribute_syntax import (
    ATTRIBUTES,
    HEADER_ATTRIBUTES,
    PADDING,
    RAW,
    AttributeSyntax,
)
from heron.hlo.attributes import ComputationRef, InstructionRefs, RawAttribute, Window
from heron.hlo.errors import HloParseError, SourceLocation
from heron.hlo.input_output_alias import check_input_output_alias
from heron.hlo.ir import Computation, Instruction, Module
from heron.hlo.lexer import ATTRIBUTE_NAME, Cursor, line_starts_of
from heron.hlo.literals import parse_literal
from heron.hlo.opcodes import OPCODES, closest_opcode
from heron.hlo.shape_syntax import parse_shape, parse_shape_at  # noqa: F401 - re-exported
from heron.hlo.shapes import Shape, TupleShape
from heron.hlo.spelling import closest

#: Debug sections of recent dumps, kept verbatim in ``Module.sections``.
SECTION_TITLES = ("FileNames", "FunctionNames", "FileLocations", "StackFrames")

#: Tests switch this off to check that the fast path and the grammar agree.
_USE_FAST_PATH = True

_SHAPE_START = re.compile(r"\(|[a-z][a-z0-9]*\[")
_OPCODE = re.compile(r"[a-z][a-z0-9\-]*")
_MODULE_NAME = re.compile(r"[A-Za-z0-9_.\-]+")
#: An opcode right after '=': the instruction's shape is left out.
_SHAPELESS = re.compile(r"[a-z][a-z0-9\-]*[ \t]*\(")

# -- the fast path's patterns ----------------------------------------------------------

_ARRAY_SHAPE_TEXT = r"[a-z][a-z0-9]*+\[[^\]\s]*+\](?:\{[^}\s]*+\})?"
_FAST_NAME = r"%?[A-Za-z_][A-Za-z0-9_.\-]*+"
_FAST_NAME_LIST = rf"[ \t]*{_FAST_NAME}[ \t]*+(?:,[ \t]*{_FAST_NAME}[ \t]*+)*+"
#: One whole instruction line: ROOT, name, shape, opcode, then the text inside
#: the parentheses -- a plain operand list (group 5) or anything else (group 6:
#: literals, operands with shapes) -- and the rest of the line (attributes).
_FAST_LINE = re.compile(
    r"[ \t]*(ROOT[ \t]+)?"
    r"(%?[A-Za-z_][A-Za-z0-9_.\-]*+)[ \t]*=[ \t]*"
    rf"({_ARRAY_SHAPE_TEXT}|\([^=\n]*?\))"
    rf"[ \t]+([a-z][a-z0-9\-]*+)\((?:({_FAST_NAME_LIST})|([^()\n]*+))\)"
    r"([^\n]*+)"
)
# Possessive quantifiers (``*+``, ``++``): no backtracking into scanned text.
_STR = r'"(?:[^"\\\n]++|\\.)*+"'
_BRACED_1 = rf'\{{(?:[^{{}}"\n]++|{_STR})*+\}}'
_BRACED_2 = rf'\{{(?:[^{{}}"\n]++|{_STR}|{_BRACED_1})*+\}}'
_FAST_ATTRIBUTE = re.compile(
    r",[ \t]*([A-Za-z_][A-Za-z0-9_.\-]*+)="
    rf'({_BRACED_2}|{_STR}|[^,{{}}()\[\]"\s]*+)'
    r"[ \t]*"
)
_FAST_OPERAND = re.compile(
    rf"[ \t]*(?:({_ARRAY_SHAPE_TEXT})[ \t]+)?(%?[A-Za-z_][A-Za-z0-9_.\-]*+)[ \t]*(?:,|$)"
)


# -- public API ------------------------------------------------------------------------


def parse_module(text: str, source: str = "<string>") -> Module:
    """Parse HLO text (a module, or the corpus form without ENTRY).

    ``source`` names the text in error messages; when the text has no
    ``HloModule`` line the module is named after its file stem.
    """
    # Parsing makes many long-lived objects; the cyclic collector would walk them
    # again and again as they pile up (a third of the time on large modules), and
    # they hold no cycles worth collecting before the parse ends.
    was_enabled = gc.isenabled()
    gc.disable()
    try:
        return _ModuleParser(text, source).parse()
    finally:
        if was_enabled:
            gc.enable()


def parse_module_file(path: str | Path) -> Module:
    """Parse the HLO file at ``path`` (UTF-8; HloParseError at the first byte that is not)."""
    path = Path(path)
    return parse_module(read_hlo_text(path), source=str(path))


def read_hlo_text(path: str | Path) -> str:
    """The text of an HLO file: UTF-8, else HloParseError at the line and column of the bad byte."""
    from heron.hlo import memory_budget

    path = Path(path)
    # The bytes and their decoded text, before the parser's own objects.
    memory_budget.check(2 * path.stat().st_size, f"reading {path}")
    return decode_hlo_text(path.read_bytes(), str(path))


def decode_hlo_text(data: bytes, source: str) -> str:
    """``data`` decoded as UTF-8; HloParseError pointing at the first invalid byte."""
    try:
        return data.decode("utf-8")
    except UnicodeDecodeError as exc:
        bad = exc.start
    line_start = data.rfind(b"\n", 0, bad) + 1
    line_end = data.find(b"\n", bad)
    line_bytes = data[line_start : len(data) if line_end < 0 else line_end]
    before = data[line_start:bad].decode("utf-8", errors="replace")
    location = SourceLocation(
        source,
        data.count(b"\n", 0, bad) + 1,
        len(before) + 1,
        line_bytes.decode("utf-8", errors="replace"),
    )
    raise HloParseError(f"invalid UTF-8: byte 0x{data[bad]:02x} (HLO text must be UTF-8)", location)


# -- the module parser -----------------------------------------------------------------


class _ComputationBuilder:
    """Instructions of one computation while it is being read."""

    __slots__ = ("name", "instructions", "operand_names", "by_name", "root", "root_retracted")

    def __init__(self, name: str):
        self.name = name
        self.instructions: list[Instruction] = []
        self.operand_names: list[list[str]] = []
        self.by_name: dict[str, Instruction] = {}
        self.root: Instruction | None = None
        #: The root was taken back by ``_retract_last``: its ROOT keyword is not
        #: in front of the cursor when the instruction is read again.
        self.root_retracted = False


class _ModuleParser:
    def __init__(self, text: str, source: str):
        if "\r" in text:
            text = text.replace("\r\n", "\n").replace("\r", "\n")
        self.text = text
        self.source = source
        self.lines = text.split("\n")
        self.line_starts = line_starts_of(text, self.lines)
        self.cur = Cursor(text, source, 0, self.line_starts, self.lines)
        self.fast = _USE_FAST_PATH
        # Caches of the fast path, per parse (text -> parsed value).
        self.shape_cache: dict[str, Shape] = {}
        self.attribute_cache: dict[tuple[str, str], Any] = {}
        self.literal_cache: dict[tuple[str, str], np.ndarray] = {}
        self.tail_cache: dict[str, tuple[dict[str, Any], list[tuple[str, Any]]]] = {}
        # Computation references to resolve at the end: (instruction, attribute name).
        self.references: list[tuple[Instruction, str]] = []
        # Instructions written without a shape (``t = tuple(a, b)``), inferred at the end.
        self.shapeless: list[Instruction] = []
        # Where the header's input_output_alias is written (its refusals point there).
        self.alias_location: SourceLocation | None = None

    # module ::= [header] section* computation*
    def parse(self) -> Module:
        cur = self.cur
        name, header = self._header()
        module = Module(name=name, header=header, source=self.source)
        module.sections = self._sections()
        computations: list[Computation] = []
        seen: dict[str, Computation] = {}
        entry: Computation | None = None
        while not cur.at_end():
            comp = self._computation()
            if comp.name in seen:
                first = seen[comp.name].location
                raise HloParseError(
                    f"duplicate computation name '{comp.name}'"
                    + (f" (first defined at line {first.line})" if first else ""),
                    comp.location,
                )
            if comp.is_entry:
                if entry is not None:
                    raise HloParseError(
                        f"second ENTRY computation '{comp.name}' (the first is '{entry.name}')",
                        comp.location,
                    )
                entry = comp
            seen[comp.name] = comp
            computations.append(comp)
        if not computations:
            raise cur.error("no computations in the module (expected 'name {' or 'ENTRY')")
        module.computations = computations
        if entry is None:
            fusion = computations[-1]
            computations.append(synthesise_entry(computations, fusion))
            module.fusion_under_test = fusion.name
        self._resolve_computations(module, seen)
        if self.shapeless:
            self._infer_missing_shapes()
        check_input_output_alias(module, self.alias_location)
        return module

    # header ::= 'HloModule' name (',' attribute)*
    def _header(self) -> tuple[str, dict[str, Any]]:
        cur = self.cur
        if not cur.accept_word("HloModule"):
            return _default_module_name(self.source), {}
        name = cur.require(_MODULE_NAME, "a module name after 'HloModule'").group(0)
        header: dict[str, Any] = {}
        while cur.accept(","):
            attr_pos = cur.skip()
            key = cur.require(ATTRIBUTE_NAME, "a module attribute name").group(0)
            if key in header:
                raise cur.error(f"module attribute '{key}' given twice", attr_pos)
            cur.expect("=", f"after module attribute '{key}'")
            header[key] = HEADER_ATTRIBUTES.get(key, RAW).parse(cur)
            if key == "input_output_alias":
                self.alias_location = cur.location(attr_pos)
        return name, header

    # section ::= title NEWLINE line* blank-line
    def _sections(self) -> list[tuple[str, tuple[str, ...]]]:
        cur = self.cur
        sections: list[tuple[str, tuple[str, ...]]] = []
        while True:
            pos = cur.skip()
            index = cur.line_index(pos)
            title = self.lines[index].strip() if index < len(self.lines) else ""
            if title not in SECTION_TITLES:
                return sections
            entries: list[str] = []
            index += 1
            while index < len(self.lines) and self.lines[index].strip():
                if self.lines[index].strip() in SECTION_TITLES:
                    break
                entries.append(self.lines[index].strip())
                index += 1
            sections.append((title, tuple(entries)))
            cur.pos = self.line_starts[index] if index < len(self.line_starts) else len(self.text)

    # computation ::= ['ENTRY'] name [signature] [',' attributes] '{' instruction* '}'
    def _computation(self) -> Computation:
        cur = self.cur
        start = cur.skip()
        is_entry = cur.accept_word("ENTRY")
        first = cur.peek()
        if not (first == "%" or first == "_" or first.isalpha()):
            raise cur.error(
                "expected a computation ('name {' or 'ENTRY name {') or the end of the file,"
                f" found {cur.describe_next()}"
            )
        name, name_pos = cur.name("a computation name")
        location = cur.location(name_pos)
        if cur.peek() == "(":
            self._signature(name)
        trailing = ""
        if cur.accept(","):
            trailing = self._computation_attributes()
        open_pos = cur.skip()
        if not cur.text.startswith("{", open_pos):
            hint = ""
            if not is_entry and start == name_pos and cur.peek() == "=":
                hint = " (an instruction outside any computation?)"
            raise cur.error(
                f"expected '{{' to open computation '{name}', found {cur.describe_next()}{hint}",
                open_pos,
            )
        cur.pos = open_pos + 1
        builder = _ComputationBuilder(name)
        self._body(builder, location)
        if not builder.instructions:
            raise HloParseError(f"computation '{name}' has no instructions", location)
        self._resolve_operands(builder)
        root = builder.root if builder.root is not None else builder.instructions[-1]
        comp = Computation(
            name=name,
            instructions=builder.instructions,
            root=root,
            is_entry=is_entry,
            location=location,
            trailing_attributes=trailing,
        )
        for inst in builder.instructions:
            inst.parent = comp
        return comp

    # signature ::= '(' [name ':' shape (',' name ':' shape)*] ')' '->' shape
    def _signature(self, name: str) -> None:
        cur = self.cur
        open_pos = cur.expect("(")
        if not cur.accept(")"):
            while True:
                if cur.at_end():
                    raise cur.error(
                        f"unexpected end of file in the signature of '{name}': the '(' at"
                        f" line {cur.location(open_pos).line} is never closed"
                    )
                cur.name("a parameter name")
                cur.expect(":", "between a parameter name and its shape")
                parse_shape_at(cur)
                if cur.accept(")"):
                    break
                cur.expect(",", f"or ')' in the signature of '{name}'")
        cur.expect("->", f"after the parameters of '{name}'")
        parse_shape_at(cur)

    def _computation_attributes(self) -> str:
        """``, execution_thread="x"`` after a signature: kept as text."""
        cur = self.cur
        start = cur.skip()
        while True:
            cur.require(ATTRIBUTE_NAME, "a computation attribute name")
            cur.expect("=", "after a computation attribute name")
            cur.raw_value()
            end = cur.pos
            if not cur.accept(","):
                return cur.text[start:end]

    # instruction* '}'
    def _body(self, builder: _ComputationBuilder, location: SourceLocation) -> None:
        """Read instructions up to the computation's '}'.

        Two modes: in line mode (the cursor is at the start of line ``i``) each
        line is first offered to the fast path; anything else goes to the
        grammar (``_instruction``) from the cursor, which returns to line mode as
        soon as the next instruction starts a line.
        """
        cur = self.cur
        text = self.text
        lines = self.lines
        line_starts = self.line_starts
        n_lines = len(lines)
        fast_match = _FAST_LINE.match if self.fast else None
        fast_instruction = self._fast_instruction
        add = self._add
        by_name = builder.by_name
        instructions = builder.instructions
        operand_names = builder.operand_names
        line_mode = False
        grammar_next = False  # the line was refused by the fast path: use the grammar
        i = 0
        while True:
            if line_mode:
                if i >= n_lines:
                    line_mode = False
                    cur.pos = len(text)
                    continue
                line = lines[i]
                m = fast_match(line)
                if m is not None:
                    built = fast_instruction(m, i)
                    if built is not None:
                        inst = built[0]
                        if built[2] or inst.name in by_name or builder.root_retracted:
                            add(builder, *built)  # the checks for roots and duplicates
                        else:
                            by_name[inst.name] = inst
                            instructions.append(inst)
                            operand_names.append(built[1])
                        i += 1
                        continue
                stripped = line.lstrip()
                if not stripped or stripped.startswith("//"):
                    i += 1
                    continue
                if stripped[0] == "," and builder.instructions:
                    # The previous line's instruction goes on here: read it again.
                    self._retract_last(builder)
                else:
                    cur.pos = line_starts[i]
                line_mode = False
                grammar_next = True
                continue
            pos = cur.skip()
            if pos >= len(text):
                raise cur.error(
                    f"unexpected end of file: computation '{builder.name}' (line"
                    f" {location.line}) is not closed with '}}'",
                    pos,
                )
            if text[pos] == "}":
                cur.pos = pos + 1
                return
            if fast_match is not None and not grammar_next:
                j = cur.line_index(pos)
                if pos == line_starts[j] or text[line_starts[j] : pos].isspace():
                    i = j
                    line_mode = True
                    continue
            add(builder, *self._instruction())
            grammar_next = False

    def _retract_last(self, builder: _ComputationBuilder) -> None:
        """Undo the last instruction and put the cursor back at its name (the
        fast path took one line for the whole instruction, but it goes on)."""
        inst = builder.instructions.pop()
        builder.operand_names.pop()
        del builder.by_name[inst.name]
        if builder.root is inst:
            builder.root = None
            builder.root_retracted = True
        self.references = [r for r in self.references if r[0] is not inst]
        loc = inst.location
        self.cur.pos = self.line_starts[loc.line - 1] + loc.column - 1

    def _add(
        self,
        builder: _ComputationBuilder,
        inst: Instruction,
        operand_names: list[str],
        is_root: bool,
    ) -> None:
        first = builder.by_name.get(inst.name)
        if first is not None:
            where = f" (first defined at line {first.location.line})" if first.location else ""
            raise HloParseError(
                f"duplicate instruction name '{inst.name}' in computation '{builder.name}'" + where,
                inst.location,
            )
        builder.by_name[inst.name] = inst
        builder.instructions.append(inst)
        builder.operand_names.append(operand_names)
        if builder.root_retracted:
            builder.root_retracted = False
            is_root = True
        if is_root:
            if builder.root is not None:
                raise HloParseError(
                    f"second ROOT in computation '{builder.name}' (the first is"
                    f" '{builder.root.name}' at line {builder.root.location.line})",
                    inst.location,
                )
            builder.root = inst

    # instruction ::= ['ROOT'] name '=' shape opcode '(' operands ')' (',' attribute)*
    def _instruction(
        self, positions: dict[str, Any] | None = None
    ) -> tuple[Instruction, list[str], bool]:
        """The grammar's instruction rule. ``positions`` (if given) receives where
        each operand and attribute value starts, for error messages."""
        cur = self.cur
        is_root = cur.accept_word("ROOT")
        name, name_pos = cur.name("an instruction name ('name = shape opcode(...)')")
        location = cur.location(name_pos)
        cur.expect("=", f"after instruction name '{name}'")
        if cur.at_end():
            raise cur.error(f"unexpected end of file in instruction '{name}'")
        shape_pos = cur.skip()
        shape: Shape | None = None
        if _SHAPELESS.match(cur.text, shape_pos) is None:
            shape = parse_shape_at(cur)
        op_pos = cur.skip()
        m = cur.match(_OPCODE)
        if m is None:
            raise cur.error(
                f"expected an opcode after the shape of '{name}', found {cur.describe_next()}",
                op_pos,
            )
        opcode = m.group(0)
        if opcode not in OPCODES:
            close = closest_opcode(opcode)
            hint = f" (did you mean '{close}'?)" if close else ""
            raise cur.error(f"unknown opcode '{opcode}'{hint}", op_pos)
        if shape is None and opcode in ("constant", "parameter"):
            raise cur.error(f"a {opcode} needs its shape ('{name} = f32[] {opcode}(...)')", op_pos)
        cur.expect("(", f"after opcode '{opcode}'")
        literal = None
        parameter_number = None
        operand_names: list[str] = []
        if opcode == "constant":
            literal = parse_literal(cur, shape)
            cur.expect(")", f"to close the constant '{name}'")
        elif opcode == "parameter":
            parameter_number = cur.integer("a parameter number")
            cur.expect(")", f"to close parameter '{name}'")
        else:
            operand_names = self._operands(name, positions)
        attributes: dict[str, Any] = {}
        while cur.accept(","):
            attr_pos = cur.skip()
            key = cur.require(ATTRIBUTE_NAME, "an attribute name").group(0)
            if key in attributes:
                raise cur.error(f"attribute '{key}' given twice in '{name}'", attr_pos)
            cur.expect("=", f"after attribute '{key}'")
            before = cur.pos
            value_pos = cur.skip()
            cur.pos = before  # an empty value (padding=) must not eat the line break
            if value_pos >= len(cur.text):
                raise cur.error(f"unexpected end of file: attribute '{key}' has no value")
            syntax = ATTRIBUTES.get(key, RAW)
            attributes[key] = syntax.parse(cur)
            if positions is not None:
                positions["attribute:" + key] = value_pos
        _imply_attributes(opcode, attributes)
        inst = Instruction(name, opcode, shape, [], attributes, literal, parameter_number, location)
        self._note_references(inst, attributes)
        if shape is None and positions is None:
            self.shapeless.append(inst)
        return inst, operand_names, is_root

    # operands ::= [[shape] name (',' [shape] name)*] ')'
    def _operands(self, name: str, positions: dict[str, Any] | None) -> list[str]:
        cur = self.cur
        open_pos = cur.pos - 1
        names: list[str] = []
        if cur.accept(")"):
            return names
        while True:
            pos = cur.skip()
            if pos >= len(cur.text):
                raise cur.error(
                    f"unexpected end of file in the operands of '{name}': the '(' at line"
                    f" {cur.location(open_pos).line} is never closed"
                )
            if _SHAPE_START.match(cur.text, pos):
                parse_shape_at(cur)
            operand, operand_pos = cur.name("an operand name")
            # XLA 0.12's `%t#1`: element 1 of tuple t; `%t#0#1`: element 1 of element 0.
            while cur.text.startswith("#", cur.pos):
                digits = re.match(r"#(\d+)", cur.text[cur.pos :])
                if digits is None:
                    raise cur.error(f"expected a tuple index after '{operand}#'", cur.pos)
                cur.pos += len(digits.group(0))
                operand = f"{operand}#{digits.group(1)}"
            if positions is not None:
                positions.setdefault("operands", []).append(operand_pos)
            names.append(operand)
            if cur.accept(")"):
                return names
            if cur.at_end():
                raise cur.error(
                    f"unexpected end of file in the operands of '{name}': the '(' at line"
                    f" {cur.location(open_pos).line} is never closed"
                )
            cur.expect(",", f"or ')' between the operands of '{name}'")

    def _note_references(self, inst: Instruction, attributes: dict[str, Any]) -> None:
        for key, value in attributes.items():
            if isinstance(value, ComputationRef) or (
                isinstance(value, tuple) and value and isinstance(value[0], ComputationRef)
            ):
                self.references.append((inst, key))

    # -- the fast path -----------------------------------------------------------------
    def _fast_instruction(
        self, m: re.Match[str], i: int
    ) -> tuple[Instruction, list[str], bool] | None:
        """Build an instruction from line ``i``, which the fast pattern matched, or None."""
        root, name, shape_text, opcode, name_list, operand_text, tail = m.groups()
        if name_list is not None:
            operand_text = name_list
        elif "/*" in operand_text:
            return None
        if name == "ROOT":  # 'ROOT = ...' is no instruction name
            return None
        shape = self.shape_cache.get(shape_text)
        if shape is None:
            try:
                shape = parse_shape(shape_text)
            except HloParseError:
                return None
            self.shape_cache[shape_text] = shape
        if opcode not in OPCODES:
            return None
        literal = None
        parameter_number = None
        operand_names: list[str] = []
        if opcode == "constant":
            literal = self._fast_literal(shape_text, shape, operand_text)
            if literal is None:
                return None
        elif opcode == "parameter":
            number = operand_text.strip()
            if not number.isdigit():
                return None
            parameter_number = int(number)
        elif "[" in operand_text:
            operand_names = self._fast_operands_with_shapes(operand_text)
            if operand_names is None:
                return None
        elif name_list is not None:
            operand_names = name_list.replace("%", "").replace(" ", "").split(",")
            if "\t" in name_list:
                operand_names = [o.strip() for o in operand_names]
        elif operand_text and not operand_text.isspace():
            return None  # not a plain list of names: the grammar will say what it is
        references = None
        if not tail or tail.isspace():
            attributes = {}
        else:
            cached = self.tail_cache.get(tail)
            if cached is None:
                cached = self._fast_attributes(tail)
                if cached is None:
                    return None
                self.tail_cache[tail] = cached
            base, references = cached
            attributes = base.copy()
            if references:
                for key, reference in references:
                    attributes[key] = (
                        ComputationRef(reference)
                        if reference.__class__ is str
                        else tuple([ComputationRef(r) for r in reference])
                    )
        if name[0] == "%":
            name = name[1:]
        location = SourceLocation(self.source, i + 1, m.start(2) + 1, self.lines[i])
        _imply_attributes(opcode, attributes)
        inst = Instruction(name, opcode, shape, [], attributes, literal, parameter_number, location)
        if references:
            for key, _ in references:
                self.references.append((inst, key))
        return inst, operand_names, root is not None

    def _fast_literal(self, shape_text: str, shape: Shape, text: str) -> Any:
        key = (shape_text, text)
        cached = self.literal_cache.get(key)
        if cached is not None:
            return cached.copy()
        sub = Cursor(text, self.source)
        try:
            value = parse_literal(sub, shape)
            if not sub.at_end() or value is None:
                return None
        except HloParseError:
            return None
        if len(text) <= 48 and isinstance(value, np.ndarray):
            self.literal_cache[key] = value.copy()
        return value

    def _fast_operands_with_shapes(self, text: str) -> list[str] | None:
        names = []
        pos = 0
        n = len(text)
        while pos < n:
            m = _FAST_OPERAND.match(text, pos)
            if m is None:
                return None
            shape_text, name = m.groups()
            if shape_text is not None and shape_text not in self.shape_cache:
                try:
                    self.shape_cache[shape_text] = parse_shape(shape_text)
                except HloParseError:
                    return None
            names.append(name[1:] if name[0] == "%" else name)
            pos = m.end()
        return names

    def _fast_attributes(self, tail: str) -> tuple[dict[str, Any], list[tuple[str, Any]]] | None:
        """The attributes of a one-line instruction, or None.

        Returns the attribute dict (immutable values, shared by every
        instruction with the same attribute text; computation attributes hold a
        placeholder) and the (name, computation name or names) pairs for which
        each instruction gets fresh ComputationRefs.
        """
        if "//" in tail or "/*" in tail:
            return None
        base: dict[str, Any] = {}
        references: list[tuple[str, Any]] = []
        cache = self.attribute_cache
        end = len(tail.rstrip())
        pos = 0
        match = _FAST_ATTRIBUTE.match
        while pos < end:
            m = match(tail, pos)
            if m is None:
                return None
            key, value_text = m.groups()
            pos = m.end()
            if key in base:
                return None
            syntax = ATTRIBUTES.get(key, RAW)
            if not value_text and syntax is not PADDING:
                return None
            if not syntax.cacheable:
                value = _parse_value_text(syntax, value_text, self.source)
                if value is None:
                    return None
                base[key] = None
                if isinstance(value, ComputationRef):
                    references.append((key, value.name))
                else:
                    references.append((key, tuple(ref.name for ref in value)))
                continue
            value = cache.get((key, value_text))
            if value is None:
                value = _parse_value_text(syntax, value_text, self.source)
                if value is None:
                    return None
                cache[(key, value_text)] = value
            base[key] = value
        return base, references

    # -- resolution --------------------------------------------------------------------
    def _resolve_operands(self, builder: _ComputationBuilder) -> None:
        by_name = builder.by_name
        elements: dict[str, Instruction] = {}
        for inst, names in list(zip(builder.instructions, builder.operand_names)):
            if names:
                if any("#" in n for n in names):
                    names = [self._tuple_element(builder, inst, n, elements) for n in names]
                try:
                    inst.operands = [by_name[n] for n in names]
                except KeyError:
                    self._undefined_operand(builder, inst, names)
            refs = inst.attributes.get("control-predecessors")
            if isinstance(refs, InstructionRefs):
                for ref in refs.names:
                    if ref not in by_name:
                        self._undefined_control_predecessor(builder, inst, ref)

    def _tuple_element(
        self,
        builder: _ComputationBuilder,
        user: Instruction,
        operand: str,
        elements: dict[str, Instruction],
    ) -> str:
        """The name of a get-tuple-element standing for XLA's ``t#k`` operand (made once).

        ``t#0#1`` (element 1 of element 0 of a nested tuple) is element 1 of the
        get-tuple-element ``t#0`` stands for.
        """
        if "#" not in operand:
            return operand
        made = elements.get(operand)
        if made is not None:
            return made.name
        outer, index_text = operand.rsplit("#", 1)
        base = self._tuple_element(builder, user, outer, elements)
        tuple_inst = builder.by_name.get(base)
        if tuple_inst is None:
            return base  # reported as an undefined operand
        index = int(index_text)
        shape = tuple_inst.shape
        if not isinstance(shape, TupleShape) or index >= len(shape.elements):
            raise HloParseError(
                f"operand '{operand}' of '{user.name}': '{outer}' has shape {shape},"
                f" which has no tuple element {index}",
                user.location,
            )
        name, n = f"{base}.element.{index}", 0
        while name in builder.by_name:
            n += 1
            name = f"{base}.element.{index}.{n}"
        element = Instruction(
            name,
            "get-tuple-element",
            shape.elements[index],
            [tuple_inst],
            {"index": index},
            location=user.location,
        )
        builder.by_name[name] = element
        builder.instructions.insert(builder.instructions.index(tuple_inst) + 1, element)
        builder.operand_names.insert(builder.instructions.index(element), [])
        elements[operand] = element
        return name

    def _reparse(self, inst: Instruction) -> dict[str, Any]:
        """Run the grammar on an instruction again to learn where its pieces are."""
        positions: dict[str, Any] = {}
        loc = inst.location
        if loc is None:
            return positions
        saved = self.cur.pos
        self.cur.pos = self.line_starts[loc.line - 1] + loc.column - 1
        self._instruction(positions)  # raises if the text has a syntax error
        self.cur.pos = saved
        return positions

    def _undefined_operand(
        self, builder: _ComputationBuilder, inst: Instruction, names: list[str]
    ) -> None:
        positions = self._reparse(inst)
        for k, operand in enumerate(names):
            if operand in builder.by_name:
                continue
            close = closest(operand, builder.by_name)
            hint = f" (did you mean '{close}'?)" if close else ""
            message = (
                f"undefined operand '{operand}' of '{inst.name}' in computation"
                f" '{builder.name}'{hint}"
            )
            pos_list = positions.get("operands", [])
            if k < len(pos_list):
                raise self.cur.error(message, pos_list[k])
            raise HloParseError(message, inst.location)

    def _undefined_control_predecessor(
        self, builder: _ComputationBuilder, inst: Instruction, ref: str
    ) -> None:
        positions = self._reparse(inst)
        message = (
            f"undefined control predecessor '{ref}' of '{inst.name}' in computation"
            f" '{builder.name}'"
        )
        pos = positions.get("attribute:control-predecessors")
        raise (
            self.cur.error(message, pos)
            if pos is not None
            else HloParseError(message, inst.location)
        )

    def _resolve_computations(self, module: Module, by_name: dict[str, Computation]) -> None:
        for inst, key in self.references:
            value = inst.attributes[key]
            refs = value if isinstance(value, tuple) else (value,)
            for ref in refs:
                comp = by_name.get(ref.name)
                if comp is None:
                    self._undefined_computation(inst, key, ref.name, list(by_name))
                ref.computation = comp

    def _infer_missing_shapes(self) -> None:
        """Infer shapes left out of the text, operands first (iteratively: no
        recursion, and a cycle of shape-less instructions is an error)."""
        done: set[int] = set()
        for start in self.shapeless:
            if id(start) in done:
                continue
            stack = [start]
            on_stack = {id(start)}
            while stack:
                inst = stack[-1]
                pending = [op for op in inst.operands if op.shape is None and id(op) not in done]
                if pending:
                    op = pending[0]
                    if id(op) in on_stack:
                        raise HloParseError(
                            f"cannot infer the shape of '{op.name}': it depends on itself"
                            f" through '{inst.name}'",
                            op.location,
                        )
                    stack.append(op)
                    on_stack.add(id(op))
                    continue
                stack.pop()
                on_stack.discard(id(inst))
                _infer_missing_shape(inst)
                done.add(id(inst))

    def _undefined_computation(
        self, inst: Instruction, key: str, name: str, known: list[str]
    ) -> None:
        close = closest(name, known)
        hint = f" (did you mean '{close}'?)" if close else ""
        message = f"undefined computation '{name}' in {key}= of '{inst.name}'{hint}"
        pos = self._reparse(inst).get("attribute:" + key)
        if pos is not None:
            raise self.cur.error(message, pos)
        raise HloParseError(message, inst.location)


#: Ops whose ``window`` XLA's parser makes optional, taking an empty window (no
#: dimensions) when the text leaves it out.
_WINDOWED = frozenset({"convolution", "reduce-window", "select-and-scatter"})


def _imply_attributes(opcode: str, attributes: dict[str, Any]) -> None:
    """Fill in what the text may leave out, so that no pass meets an instruction without
    it: a broadcast's ``dimensions`` (XLA's parser makes it optional for a scalar
    operand, and XLA's own test corpus leaves it out; the algebraic simplifier failed on
    such a broadcast), and the ``window`` of a convolution, reduce-window or
    select-and-scatter (XLA's parser takes an empty window; heron's evaluator refused a
    scalar reduce-window without one, and its emitter failed on it). An operand whose
    rank needs what is filled in (a non-scalar broadcast operand, a windowed operand of
    rank > 0, a convolution with spatial dimensions) is refused by shape inference,
    which names the rank.

    Other attributes XLA's parser makes optional are left out of the IR, and every
    consumer reads them with XLA's default (``attributes.get(name, default)``): a dot's
    batch and contracting dimensions ({}), feature_group_count and batch_group_count
    (1), is_stable, indices_are_sorted, unique_indices, constrain_layout and
    use_global_device_ids (false), topk's largest (true), replica_groups ({}), a
    compare's type (from the element type)."""
    if opcode == "broadcast" and "dimensions" not in attributes:
        attributes["dimensions"] = ()
    elif opcode in _WINDOWED and "window" not in attributes:
        attributes["window"] = Window(())


def _infer_missing_shape(inst: Instruction) -> None:
    """Fill in the shape of an instruction written without one (XLA allows it for
    ops whose shape follows from operands and attributes, e.g. ``tuple``)."""
    try:
        from heron.hlo.shape_inference import infer_shape

        shape = infer_shape(inst)
    except Exception as error:  # any failure to infer is the same parse error
        detail = getattr(error, "detail", None) or str(error)
        raise HloParseError(
            f"'{inst.name}' ({inst.opcode}) is written without a shape and heron cannot"
            f" infer it: {detail}",
            inst.location,
        ) from None
    if shape is None:
        raise HloParseError(
            f"'{inst.name}' ({inst.opcode}) is written without a shape; {inst.opcode} needs"
            " an explicit shape",
            inst.location,
        )
    inst.shape = shape


def _parse_value_text(syntax: AttributeSyntax, text: str, source: str) -> Any:
    """Parse one attribute value from its own text; None if it is not exactly one value."""
    sub = Cursor(text, source)
    if syntax is RAW:
        try:
            raw = sub.raw_value()
        except HloParseError:
            return None
        return RawAttribute(raw) if sub.at_end() else None
    try:
        value = syntax.parse(sub)
        if not sub.at_end():
            return None
    except HloParseError:
        return None
    return value


def _default_module_name(source: str) -> str:
    if not source or source.startswith("<"):
        return "module"
    stem = Path(source).stem
    stem = re.sub(r"[^A-Za-z0-9_.\-]", "_", stem)
    return stem or "module"


# -- the corpus form -------------------------------------------------------------------


def synthesise_entry(computations: list[Computation], fusion: Computation) -> Computation:
    """The ENTRY for the corpus form: parameters, then ``ROOT fusion(...)`` of ``fusion``."""
    taken = {c.name for c in computations}
    name = "main"
    k = 1
    while name in taken:
        name = f"main.{k}"
        k += 1
    entry = Computation(name=name, is_entry=True)
    parameters = []
    for p in fusion.parameters:
        parameters.append(
            entry.add(
                Instruction(p.name, "parameter", p.shape, parameter_number=p.parameter_number)
            )
        )
    fusion_name = "fusion"
    k = 1
    names = {p.name for p in parameters}
    while fusion_name in names:
        fusion_name = f"fusion.{k}"
        k += 1
    root = entry.add(
        Instruction(
            fusion_name,
            "fusion",
            fusion.root_instruction.shape,
            operands=list(parameters),
            attributes={"kind": "kLoop", "calls": ComputationRef(fusion.name, fusion)},
        )
    )
    entry.root = root
    return entry
