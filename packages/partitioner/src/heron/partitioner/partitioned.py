"""The partitioner's result: subgraphs, which one computes what, and who calls whom."""

from __future__ import annotations

import attrs

from heron.hlo.ir import Computation, Instruction
from heron.partitioner.subgraph import Subgraph

__all__ = ["PartitionedComputation"]


@attrs.frozen(eq=False)
class PartitionedComputation:
    """A fused computation cut into functions.

    ``subgraphs`` holds the main subgraphs (every partitioned instruction not
    only in an epilogue, exactly once) followed by the epilogues.
    ``root_subgraphs`` are the subgraphs that compute the fusion's outputs, in
    root order (an epilogue where a root comes after a hero); an output that is
    a fusion parameter itself has none: it is a ``tensor.extract`` of the
    parameter at the output's indices. ``duplicated``
    names the instructions computed both in a main subgraph and in an epilogue.
    Parameters are function arguments and a root tuple is the kernel's ABI, so
    neither is in any subgraph.
    """

    computation: Computation
    subgraphs: tuple[Subgraph, ...]
    instruction_to_subgraph: dict[Instruction, Subgraph]
    instruction_to_epilogue: dict[Instruction, Subgraph]
    root_subgraphs: tuple[Subgraph, ...]
    heroes: tuple[Instruction, ...] = ()

    @property
    def main_subgraphs(self) -> tuple[Subgraph, ...]:
        return tuple(s for s in self.subgraphs if not s.is_epilogue)

    @property
    def epilogues(self) -> tuple[Subgraph, ...]:
        return tuple(s for s in self.subgraphs if s.is_epilogue)

    @property
    def duplicated(self) -> frozenset[Instruction]:
        return frozenset(self.instruction_to_subgraph) & frozenset(self.instruction_to_epilogue)

    def subgraph_of(self, instruction: Instruction | str) -> Subgraph:
        """The subgraph that computes ``instruction`` (by object or name).

        A duplicated instruction answers with its main subgraph (the one other
        functions call); ``epilogue_of`` gives the epilogue copy.
        """
        inst = self._resolve(instruction)
        found = self.instruction_to_subgraph.get(inst) or self.instruction_to_epilogue.get(inst)
        if found is None:
            raise KeyError(
                f"'{inst.name}' ({inst.opcode}) is in no subgraph of '{self.computation.name}'"
                " (parameters and a root tuple never are)"
            )
        return found

    def epilogue_of(self, instruction: Instruction | str) -> Subgraph | None:
        """The epilogue that computes ``instruction``, if any."""
        return self.instruction_to_epilogue.get(self._resolve(instruction))

    def epilogues_of_hero(self, hero: Instruction | str) -> tuple[Subgraph, ...]:
        """The epilogues ``hero`` is injected into (one per connected group of roots after it)."""
        inst = self._resolve(hero)
        return tuple(s for s in self.epilogues if any(inst is h for h in s.injected))

    def subgraph(self, name: str) -> Subgraph:
        for sub in self.subgraphs:
            if sub.name == name:
                return sub
        raise KeyError(f"no subgraph '{name}' in the partitioning of '{self.computation.name}'")

    def callees(self, subgraph: Subgraph) -> tuple[Subgraph, ...]:
        """The subgraphs ``subgraph`` calls: those whose roots its instructions read.

        Injected heroes are arguments, not calls; parameters are tensors.
        """
        members = set(subgraph.instructions)
        injected = set(subgraph.injected)
        result: list[Subgraph] = []
        for inst in subgraph.instructions:
            for operand in inst.operands:
                if operand in members or operand in injected or operand.opcode == "parameter":
                    continue
                callee = self.instruction_to_subgraph[operand]
                if callee is not subgraph and not any(callee is r for r in result):
                    result.append(callee)
        return tuple(result)

    def describe(self) -> str:
        """Every subgraph as text, with its callees; for debugging and tests."""
        lines = [f"PartitionedComputation {self.computation.name}:"]
        if self.heroes:
            lines.append(f"  heroes: {', '.join(h.name for h in self.heroes)}")
        for sub in self.subgraphs:
            lines.append(sub.format(indent=2))
            callees = self.callees(sub)
            if callees:
                lines.append(f"  calls: {', '.join(c.name for c in callees)}")
        if self.duplicated:
            names = sorted(i.name for i in self.duplicated)
            lines.append(f"  duplicated in epilogues: {', '.join(names)}")
        return "\n".join(lines)

    def _resolve(self, instruction: Instruction | str) -> Instruction:
        if isinstance(instruction, str):
            return self.computation.instruction(instruction)
        return instruction
