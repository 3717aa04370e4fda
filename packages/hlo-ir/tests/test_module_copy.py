"""``Module.copy``: an independent copy, as ``copy.deepcopy`` makes, field by field."""

from __future__ import annotations

import copy
from pathlib import Path

import attrs
import numpy as np
import pytest

from heron.hlo.attributes import ComputationRef
from heron.hlo.ir import Computation, Instruction, Module
from heron.hlo.parser import parse_module
from heron.hlo.printer import print_module

ROOT = Path(__file__).resolve().parents[3]
PROGRAMS = sorted((ROOT / "programs").glob("*/module.hlo"))

TEXT = """
HloModule m, entry_computation_layout={(f32[4]{0}, s32[])->(f32[4]{0}, s32[])}

add {
  a = f32[] parameter(0)
  b = f32[] parameter(1)
  ROOT s = f32[] add(a, b)
}

cond {
  p = (f32[4]{0}, s32[]) parameter(0)
  i = s32[] get-tuple-element(p), index=1
  n = s32[] constant(3)
  ROOT lt = pred[] compare(i, n), direction=LT
}

body {
  p = (f32[4]{0}, s32[]) parameter(0)
  x = f32[4]{0} get-tuple-element(p), index=0
  i = s32[] get-tuple-element(p), index=1
  one = s32[] constant(1)
  j = s32[] add(i, one)
  c = f32[4]{0} constant({1, 2, 3, 4})
  y = f32[4]{0} add(x, c)
  ROOT t = (f32[4]{0}, s32[]) tuple(y, j)
}

ENTRY main {
  x = f32[4]{0} parameter(0)
  i = s32[] parameter(1)
  t = (f32[4]{0}, s32[]) tuple(x, i)
  w = (f32[4]{0}, s32[]) while(t), condition=cond, body=body
  y = f32[4]{0} get-tuple-element(w), index=0
  zero = f32[] constant(0)
  r = f32[] reduce(y, zero), dimensions={0}, to_apply=add
  b = f32[4]{0} broadcast(r), dimensions={}
  j = s32[] get-tuple-element(w), index=1
  ROOT out = (f32[4]{0}, s32[]) tuple(b, j)
}
"""

#: What each field of the copy is: the original's own value (immutable, or a plain
#: copy of a container) or something rebuilt, checked by :func:`_check_copied`.
_SHARED_OR_EQUAL = {
    Instruction: {"name", "opcode", "shape", "parameter_number", "location"},
    Computation: {"name", "is_entry", "location", "trailing_attributes"},
    Module: {
        "name",
        "header",
        "sections",
        "fusion_under_test",
        "source",
        "layouts_assigned",
        "names_elsewhere",
    },
}
_REBUILT = {
    Instruction: {"operands", "attributes", "literal", "parent"},
    Computation: {"instructions", "root"},
    Module: {"computations"},
}


def test_every_field_is_accounted_for():
    """A field added to the IR must be copied by ``Module.copy`` and listed here."""
    for cls in (Instruction, Computation, Module):
        names = {field.name for field in attrs.fields(cls)}
        assert names == _SHARED_OR_EQUAL[cls] | _REBUILT[cls], cls.__name__


def _check_copied(original: Module, clone: Module) -> None:
    assert clone is not original and clone == original
    assert print_module(clone) == print_module(original)
    for name in _SHARED_OR_EQUAL[Module]:
        assert getattr(clone, name) == getattr(original, name)
    assert clone.header is not original.header and clone.sections is not original.sections
    copies = dict(zip(original.computations, clone.computations, strict=True))
    for comp, twin in copies.items():
        assert twin is not comp
        for name in _SHARED_OR_EQUAL[Computation]:
            assert getattr(twin, name) == getattr(comp, name)
        assert twin.instructions is not comp.instructions
        assert (twin.root is None) == (comp.root is None)
        for inst, other in zip(comp.instructions, twin.instructions, strict=True):
            assert other is not inst and other.parent is twin
            for name in _SHARED_OR_EQUAL[Instruction]:
                assert getattr(other, name) == getattr(inst, name)
            assert [o.name for o in other.operands] == [o.name for o in inst.operands]
            assert all(o.parent is twin for o in other.operands)
            assert other.attributes is not inst.attributes
            for key, value in inst.attributes.items():
                if isinstance(value, ComputationRef):
                    assert other.attributes[key] is not value
                    assert other.attributes[key].computation is copies[value.computation]
            for called in other.called_computations():
                assert called in copies.values()
            if isinstance(inst.literal, np.ndarray):
                assert other.literal is not inst.literal
                np.testing.assert_array_equal(other.literal, inst.literal)
        if comp.root is not None:
            assert twin.root is twin.instructions[comp.instructions.index(comp.root)]


def test_a_module_with_loops_and_reducers_is_copied_independently():
    original = parse_module(TEXT)
    clone = original.copy()
    _check_copied(original, clone)
    # Changing the copy leaves the original as it was.
    before = print_module(original)
    entry = clone.entry
    entry.root.operands.reverse()
    clone.computation("body").instructions[5].literal[0] = 100.0
    clone.computation("add").root.opcode = "multiply"
    assert print_module(original) == before


@pytest.mark.parametrize("path", PROGRAMS, ids=[p.parent.name for p in PROGRAMS])
def test_corpus_programs_copy_as_deepcopy_does(path):
    original = parse_module(path.read_text())
    clone = original.copy()
    _check_copied(original, clone)
    assert clone == copy.deepcopy(original)
