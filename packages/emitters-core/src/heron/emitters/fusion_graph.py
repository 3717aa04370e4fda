"""A fused computation as hero selection walks it: its roots, and who uses what inside it.

This is XLA's ``HloFusionAdaptor`` for a single fusion: a fusion parameter is
*outside* the fusion (hero searches stop there) and the root tuple is not a
user (its operands are the roots). The users map is built once, when the
graph is built; the graph is built once per fusion analysis and lives on it
(``FusionAnalysis.graph``), so it can never outlive or disagree with the
computation it describes.

"The roots of a fusion" and the outputs each fills are
``heron.hlo.fusion_outputs``'s ``fusion_roots`` and ``output_positions``
(re-exported here); emitters read both from the analysis instead of
recomputing them.
"""

from __future__ import annotations

from heron.hlo.fusion_outputs import fusion_roots, output_positions
from heron.hlo.ir import Computation, Instruction

__all__ = ["FusionGraph", "fusion_roots", "output_positions"]


class FusionGraph:
    """Users inside a fused computation, as ``HloFusionAdaptor`` sees them."""

    def __init__(self, computation: Computation) -> None:
        self.computation = computation
        root = computation.root_instruction
        self.root_tuple = root if root.opcode == "tuple" else None
        self.roots = fusion_roots(computation)
        self._users: dict[Instruction, list[Instruction]] = {}
        #: The opcodes inside: a hero search for one that is absent need not walk.
        self.opcodes = frozenset(inst.opcode for inst in computation.instructions)
        for inst in computation.instructions:
            if inst is self.root_tuple:
                continue
            for operand in inst.operands:
                users = self._users.setdefault(operand, [])
                # an instruction reading a value twice is one user; its reads come in a row
                if not users or users[-1] is not inst:
                    users.append(inst)

    def users(self, inst: Instruction) -> list[Instruction]:
        """The instructions inside the fusion that read ``inst`` (not the root tuple)."""
        return self._users.get(inst, [])

    @staticmethod
    def inside(inst: Instruction) -> bool:
        """Whether a hero search may step onto ``inst`` (parameters are outside)."""
        return inst.opcode != "parameter"
