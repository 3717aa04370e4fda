"""Who uses what, and which names are taken, kept current while fusions are installed.

Installing a fusion touches a handful of instructions, but finding them by
scanning (``replace_all_uses``, "is this member still used", "which names
are free", a fresh post-order) costs the whole computation, and a pass that
installs a fusion per few instructions becomes quadratic. A
:class:`FusionGraph` is built once per pass run and kept current by
:func:`heron.compiler.fusion.builder.install_fusion`: users per instruction
(in instruction order), the names taken in the module and in the
computation, and an order rank per instruction. A pass that installs through
it calls :meth:`FusionGraph.finish` when it is done.
"""

from __future__ import annotations

import itertools
from collections import Counter

from heron.hlo.ir import Computation, Instruction, Module
from heron.hlo.passes.rewrite import CONTROL

__all__ = ["FusionGraph", "TakenNames"]


class TakenNames:
    """Names with how many instructions or computations hold each, and the first free
    ``name``, ``name.1``, ``name.2``... (XLA's numbering of fusions) without counting up
    from 1 every time: a module fused layer by layer holds thousands of
    ``loop_add_fusion.N`` at once, and the count made installing quadratic.

    ``_lowest[name]`` is never above the lowest free suffix of ``name``: raised past the
    suffixes a search finds taken, lowered when a name is released.
    """

    def __init__(self) -> None:
        self._counts: Counter[str] = Counter()
        self._lowest: dict[str, int] = {}

    def count(self, name: str) -> int:
        return self._counts.get(name, 0)

    def take(self, name: str) -> None:
        self._counts[name] += 1

    def release(self, name: str) -> None:
        left = self._counts.get(name, 0) - 1
        if left > 0:
            self._counts[name] = left
        else:
            self._counts.pop(name, None)
            base, dot, suffix = name.rpartition(".")
            if dot and suffix.isdigit() and base in self._lowest:
                self._lowest[base] = min(self._lowest[base], int(suffix))

    def first_free(self, name: str, itself: int = 0) -> str:
        """``name``, else the lowest free ``name.N``; ``name`` counts as taken when more
        than ``itself`` instructions or computations hold it (the one being renamed)."""
        if self.count(name) <= itself:
            return name
        n = self._lowest.get(name, 1)
        while self.count(f"{name}.{n}") > 0:
            n += 1
        self._lowest[name] = n
        return f"{name}.{n}"


class FusionGraph:
    def __init__(self, module: Module, computation: Computation) -> None:
        self.module = module
        self.computation = computation
        #: id -> {id(user): user}, each user once.
        self._users: dict[int, dict[int, Instruction]] = {}
        #: id -> (rank, sequence): instruction order; a fusion ranks with its last member.
        self._rank: dict[int, tuple[int, int]] = {}
        self._sequence = itertools.count()
        #: Every instruction and computation name of the module, with multiplicity
        #: (fused bodies repeat their parameters' names).
        self.module_names = TakenNames()
        #: The names of ``computation``'s instructions.
        self.names = TakenNames()
        for c in module.computations:
            self.module_names.take(c.name)
            for inst in c.instructions:
                self.module_names.take(inst.name)
        for position, inst in enumerate(computation.instructions):
            self._rank[id(inst)] = (position, next(self._sequence))
            self.names.take(inst.name)
            self._register(inst)
        #: Whether an instruction of the computation must come after another (control
        #: edges, which XLA's optimized modules carry and JAX's seldom do): a fusion
        #: only inherits its members' edges, so without any none appear, and an install
        #: need not look for edges naming the members it removed.
        self.has_control_edges = any(CONTROL in i.attributes for i in computation.instructions)

    # -- queries -------------------------------------------------------------
    def users(self, inst: Instruction) -> list[Instruction]:
        """The instructions reading ``inst``, each once, in instruction order."""
        found = self._users.get(id(inst))
        if not found:
            return []
        rank = self._rank
        return sorted(found.values(), key=lambda user: rank[id(user)])

    def used(self, inst: Instruction) -> bool:
        return bool(self._users.get(id(inst)))

    def rank(self, inst: Instruction) -> tuple[int, int]:
        """A key in instruction order (ties between fusions in install order)."""
        return self._rank[id(inst)]

    def alive(self, inst: Instruction) -> bool:
        return id(inst) in self._rank

    # -- edits ---------------------------------------------------------------
    def _register(self, inst: Instruction) -> None:
        for operand in inst.operands:
            self._users.setdefault(id(operand), {})[id(inst)] = inst

    def add(self, inst: Instruction, after: Instruction | None = None) -> None:
        """Record ``inst``, which the caller put into the computation (ranked with ``after``)."""
        rank = self._rank[id(after)][0] if after is not None else len(self._rank)
        self._rank[id(inst)] = (rank, next(self._sequence))
        self.names.take(inst.name)
        self.module_names.take(inst.name)
        self._register(inst)

    def rename(self, inst: Instruction, name: str) -> None:
        for names in (self.names, self.module_names):
            names.release(inst.name)
            names.take(name)
        inst.name = name

    def replace(self, old: Instruction, new: Instruction) -> None:
        """Every user of ``old`` (and the root) reads ``new`` instead."""
        if old is new:
            return
        users = self._users.pop(id(old), {})
        targets = self._users.setdefault(id(new), {})
        for key, user in users.items():
            user.operands = [new if operand is old else operand for operand in user.operands]
            targets[key] = user
        if self.computation.root is old:
            self.computation.root = new

    def remove(self, inst: Instruction) -> None:
        """Take ``inst`` (which nothing uses) out of the computation."""
        for operand in inst.operands:
            users = self._users.get(id(operand))
            if users is not None:
                users.pop(id(inst), None)
        self._users.pop(id(inst), None)
        del self._rank[id(inst)]
        self.names.release(inst.name)
        self.module_names.release(inst.name)
        self.computation.instructions.remove(inst)

    def add_computation(self, body: Computation) -> None:
        self.module.computations.insert(self.module.computations.index(self.computation), body)
        self.module_names.take(body.name)
        for inst in body.instructions:
            self.module_names.take(inst.name)

    def remove_computation(self, body: Computation) -> None:
        self.module.computations.remove(body)
        self.module_names.release(body.name)
        for inst in body.instructions:
            self.module_names.release(inst.name)

    def rename_computation(self, body: Computation, name: str) -> None:
        self.module_names.release(body.name)
        self.module_names.take(name)
        body.name = name

    def finish(self) -> None:
        """Leave the text order a definition order (a user of an output may have come
        before the fusion); the post-order also proves there is no cycle."""
        self.computation.instructions = self.computation.post_order()
