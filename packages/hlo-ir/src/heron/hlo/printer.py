"""Canonical HLO text, in the style of XLA's current optimized dumps.

::

    HloModule name, attr=value, ...

    FileNames                      (debug sections, when the module has them)
    1 "file.py"

    %comp (p0: f32[4], p1: f32[]) -> f32[4] {
      %p0 = f32[4]{0} parameter(0)
      ROOT %add = f32[4]{0} add(%p0, %p0), metadata={op_name="x"}
    }

    ENTRY %main (...) -> ... {
      ...
    }

Signatures list the parameters in parameter-number order with shapes without
layouts, as XLA prints them; operands are printed without their shapes.
Every instruction gets ``ROOT`` when it is its computation's root. Constants
print in full (see ``heron.hlo.literals`` for how values stay bit-exact).

A module parsed from the corpus form (no ENTRY; ``fusion_under_test`` set)
prints back in corpus form, without the ENTRY computation the parser added,
as long as that ENTRY is still exactly what the parser synthesised; otherwise
the ENTRY is printed and the text no longer says which fusion is under test.
"""

from __future__ import annotations

from heron.hlo.attribute_syntax import HEADER_ATTRIBUTES, format_attribute
from heron.hlo.attributes import ComputationRef
from heron.hlo.ir import Computation, Instruction, Module, structural_difference
from heron.hlo.literals import format_literal
from heron.hlo.parser import synthesise_entry
from heron.hlo.shapes import Shape


def print_module(module: Module) -> str:
    """The module as HLO text that ``parse_module`` reads back to an equal module."""
    header = "HloModule " + module.name
    for key, value in module.header.items():
        header += ", " + format_attribute(key, value, HEADER_ATTRIBUTES)
    parts = [header, ""]
    for title, lines in module.sections:
        parts.append(title)
        parts.extend(lines)
        parts.append("")
    computations = module.computations
    if _entry_is_synthesised(module):
        computations = [c for c in computations if not c.is_entry]
    printer = _Printer()
    for comp in computations:
        parts.append(printer.computation(comp))
        parts.append("")
    return "\n".join(parts)


def print_computation(comp: Computation) -> str:
    """``[ENTRY ]%name (params) -> shape {`` + instruction lines + ``}``."""
    return _Printer().computation(comp)


def print_instruction(inst: Instruction) -> str:
    """One instruction's text (``ROOT`` first when it is its computation's root)."""
    is_root = inst.parent is not None and inst.parent.root is inst
    return _Printer().instruction(inst, is_root)


class _Printer:
    """Printing state: the text of shapes and attribute values already printed.

    Parsed modules share shape and attribute value objects between
    instructions, so the caches are keyed by object identity (the objects stay
    alive while the module is printed).
    """

    def __init__(self) -> None:
        self.shapes: dict[int, str] = {}
        self.attributes: dict[tuple[str, int], str] = {}

    def computation(self, comp: Computation) -> str:
        lines = [_computation_header(comp)]
        root = comp.root
        for inst in comp.instructions:
            lines.append("  " + self.instruction(inst, inst is root))
        lines.append("}")
        return "\n".join(lines)

    def instruction(self, inst: Instruction, is_root: bool) -> str:
        opcode = inst.opcode
        if opcode == "constant":
            inside = format_literal(inst.literal, inst.shape)
        elif opcode == "parameter":
            inside = str(inst.parameter_number)
        else:
            inside = ", ".join(["%" + op.name for op in inst.operands])
        shape = inst.shape
        shape_text = self.shapes.get(id(shape))
        if shape_text is None:
            shape_text = self.shapes[id(shape)] = str(shape)
        text = f"%{inst.name} = {shape_text} {opcode}({inside})"
        if inst.attributes:
            cache = self.attributes
            parts = []
            for key, value in inst.attributes.items():
                cache_key = (key, id(value))
                attribute = cache.get(cache_key)
                if attribute is None:
                    attribute = format_attribute(key, value)
                    if not isinstance(value, (ComputationRef, tuple)):  # refs: made per use
                        cache[cache_key] = attribute
                parts.append(attribute)
            text += ", " + ", ".join(parts)
        return "ROOT " + text if is_root else text


def _computation_header(comp: Computation) -> str:
    params = ", ".join(f"{p.name}: {_shape_without_layout(p.shape)}" for p in comp.parameters)
    result = _shape_without_layout(comp.root.shape) if comp.root is not None else "()"
    text = f"%{comp.name} ({params}) -> {result}"
    if comp.trailing_attributes:
        text += ", " + comp.trailing_attributes
    text += " {"
    return "ENTRY " + text if comp.is_entry else text


def _shape_without_layout(shape: Shape) -> str:
    return str(shape.without_layout())


def _entry_is_synthesised(module: Module) -> bool:
    """True when the module came from the corpus form and its ENTRY is untouched."""
    if module.fusion_under_test is None or not module.computations:
        return False
    entry = module.computations[-1]
    if not entry.is_entry or sum(c.is_entry for c in module.computations) != 1:
        return False
    others = module.computations[:-1]
    if not others or others[-1].name != module.fusion_under_test:
        return False
    expected = synthesise_entry(others, others[-1])
    return (
        structural_difference(Module(module.name, [expected]), Module(module.name, [entry])) is None
    )
