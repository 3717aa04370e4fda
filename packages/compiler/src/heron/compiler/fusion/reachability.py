"""Which instructions of a computation depend on which: the cycle check of every merge.

Merging two instructions into one fusion creates a cycle exactly when a path
leads from one of them to an operand of the other through an instruction that
stays outside. ``Reachability`` answers "does ``a`` reach ``b``" in constant
time from bitsets of ancestors, built once per graph version.
"""

from __future__ import annotations

from heron.hlo.ir import Computation, Instruction

__all__ = ["Reachability"]


class Reachability:
    def __init__(self, computation: Computation) -> None:
        self._index: dict[int, int] = {}
        self._ancestors: list[int] = []
        for position, inst in enumerate(computation.post_order()):
            self._index[id(inst)] = position
            bits = 0
            for operand in inst.operands:
                k = self._index[id(operand)]
                bits |= self._ancestors[k] | (1 << k)
            self._ancestors.append(bits)

    def reaches(self, a: Instruction, b: Instruction) -> bool:
        """Whether ``b`` depends on ``a`` (transitively; not ``a is b``)."""
        return bool(self._ancestors[self._index[id(b)]] >> self._index[id(a)] & 1)

    def independent(self, a: Instruction, b: Instruction) -> bool:
        return not self.reaches(a, b) and not self.reaches(b, a)

    def position(self, inst: Instruction) -> int:
        return self._index[id(inst)]
