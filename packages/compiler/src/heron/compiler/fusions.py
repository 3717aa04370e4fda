"""Which fusions a module asks to compile.

A module's kernels are the fusion instructions of its entry computation, in
text order. Corpus files without an ENTRY parse to a synthesised ENTRY that
calls the fusion under test once (``heron.hlo.parser``), so they have one.
A module whose entry computation has no fusion at all (a hand-written module,
or corpus files such as ``gather_start_index_map.hlo``) is read the way XLA's
``fusion_to_mlir`` reads it: the entry computation is the one fusion, named
after it.
"""

from __future__ import annotations

from heron.hlo.attributes import ComputationRef
from heron.hlo.errors import UnsupportedError
from heron.hlo.ir import Instruction, Module

__all__ = ["find_fusion", "fusions_of"]


def fusions_of(module: Module) -> list[Instruction]:
    """Every fusion instruction of the entry computation, in order.

    Without any, one fusion instruction (not added to the module) that calls
    the entry computation itself with its parameters.
    """
    entry = module.entry
    found = [inst for inst in entry.instructions if inst.opcode == "fusion"]
    if found:
        return found
    return [
        Instruction(
            entry.name,
            "fusion",
            entry.root_instruction.shape,
            operands=list(entry.parameters),
            attributes={"kind": "kLoop", "calls": ComputationRef(entry.name, entry)},
            location=entry.location,
        )
    ]


def find_fusion(module: Module, name: str) -> Instruction:
    """The entry's fusion named ``name`` (its instruction or its fused computation's name)."""
    fusions = fusions_of(module)
    for fusion in fusions:
        if name in (fusion.name, fusion.called("calls").name):
            return fusion
    known = ", ".join(f.name for f in fusions) or "none"
    raise UnsupportedError(f"no fusion named '{name}' in {module.source} (fusions: {known})")


def selected_fusions(module: Module, name: str | None) -> list[Instruction]:
    """The fusion ``name``, or every fusion."""
    if name is not None:
        return [find_fusion(module, name)]
    return fusions_of(module)
