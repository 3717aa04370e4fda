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

The graph also holds the edits to the computation's instruction list and the
module's list of computations until :meth:`FusionGraph.sync` makes them (each
list edit scans its list: ``index``, ``remove``, 2 s of the 10,000 fusions of
a GPT-2 training step). Between two syncs those lists are out of date: a pass
that reads them while it installs syncs first (:meth:`FusionGraph.instructions`).
"""

from __future__ import annotations

import heapq
import itertools
from collections import Counter
from collections.abc import Iterable

from heron.hlo.ir import Computation, Instruction, Module
from heron.hlo.passes.rewrite import CONTROL

__all__ = ["FusionGraph", "TakenNames"]

#: Held list edits up to which a sync makes them one by one (an install makes a few);
#: more (priority fusion's thousands between syncs) rebuild the list once.
_EDITS_MADE_ONE_BY_ONE = 32


class TakenNames:
    """Names with how many instructions or computations hold each, and the first free
    ``name``, ``name.1``, ``name.2``... (XLA's numbering of fusions) without counting up
    from 1 every time: a module fused layer by layer holds thousands of
    ``loop_add_fusion.N`` at once, and the count made installing quadratic.

    Per name searched: ``_scanned[name]``, below which every suffix was seen taken by
    a search, and ``_released[name]``, a heap holding every suffix below it released
    since (and some taken again, dropped when met). The lowest free suffix is the
    heap's least live one, else the first free from ``_scanned`` up. (A lower bound
    that a release lowered sent the next search over every suffix taken above it:
    40 names tried per fusion of a GPT-2 training step.)
    """

    def __init__(self, elsewhere: frozenset[str] = frozenset()) -> None:
        self._counts: Counter[str] = Counter()
        self._scanned: dict[str, int] = {}
        self._released: dict[str, list[int]] = {}
        #: Names held once each outside what is counted (:attr:`Module.names_elsewhere`).
        self._elsewhere = elsewhere

    def count(self, name: str) -> int:
        return self._counts.get(name, 0) + (name in self._elsewhere)

    def take_all(self, names: Iterable[str]) -> None:
        """:meth:`take` each of ``names`` (counted at C speed: a graph is made for every
        fusion pass over every computation control-flow fusion visits)."""
        self._counts.update(names)

    def take(self, name: str) -> None:
        self._counts[name] += 1

    def release(self, name: str) -> None:
        left = self._counts.get(name, 0) - 1
        if left > 0:
            self._counts[name] = left
        else:
            self._counts.pop(name, None)
            base, dot, suffix = name.rpartition(".")
            if dot and suffix.isdigit() and int(suffix) < self._scanned.get(base, 0):
                heapq.heappush(self._released.setdefault(base, []), int(suffix))

    def first_free(self, name: str, itself: int = 0) -> str:
        """``name``, else the lowest free ``name.N``; ``name`` counts as taken when more
        than ``itself`` instructions or computations hold it (the one being renamed)."""
        if self.count(name) <= itself:
            return name
        released = self._released.get(name)
        while released:
            if self.count(f"{name}.{released[0]}") == 0:
                return f"{name}.{released[0]}"
            heapq.heappop(released)  # taken again since
        n = self._scanned.get(name, 1)
        while self.count(f"{name}.{n}") > 0:
            n += 1
        self._scanned[name] = n
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
        self.module_names = TakenNames(module.names_elsewhere)
        #: The names of ``computation``'s instructions.
        self.names = TakenNames()
        self.module_names.take_all(c.name for c in module.computations)
        self.module_names.take_all(i.name for c in module.computations for i in c.instructions)
        self.names.take_all(inst.name for inst in computation.instructions)
        for position, inst in enumerate(computation.instructions):
            self._rank[id(inst)] = (position, next(self._sequence))
            self._register(inst)
        #: Whether an instruction of the computation must come after another (control
        #: edges, which XLA's optimized modules carry and JAX's seldom do): a fusion
        #: only inherits its members' edges, so without any none appear, and an install
        #: need not look for edges naming the members it removed.
        self.has_control_edges = any(CONTROL in i.attributes for i in computation.instructions)
        #: List edits not made yet (:meth:`sync`), in the order asked, each holding the
        #: instructions it names: ("after", anchor, inst), ("last", inst, None),
        #: ("out", inst, None).
        self._edits: list[tuple[str, Instruction, Instruction | None]] = []
        #: Bodies added and taken out since the last sync (as dicts: in order, unique).
        self._bodies_added: dict[Computation, None] = {}
        self._bodies_taken_out: dict[Computation, None] = {}

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

    def insert_after(self, anchor: Instruction, inst: Instruction) -> None:
        """Put ``inst`` into the computation's list just after ``anchor`` (what
        ``list.insert`` at ``anchor``'s place plus one does), at the next sync."""
        inst.parent = self.computation
        self._edits.append(("after", anchor, inst))

    def append(self, inst: Instruction) -> None:
        """Put ``inst`` at the end of the computation's list (``Computation.add``), at
        the next sync."""
        inst.parent = self.computation
        self._edits.append(("last", inst, None))

    def sync(self) -> None:
        """Make the list edits held since the last sync: the computation's instructions
        and the module's computations as each edit, made on its own, would leave them."""
        if self._edits:
            if len(self._edits) <= _EDITS_MADE_ONE_BY_ONE:
                self._make_each()
            else:
                self.computation.instructions = self._edited_instructions()
            self._edits = []
        added, gone = self._bodies_added, self._bodies_taken_out
        if len(added) + len(gone) <= _EDITS_MADE_ONE_BY_ONE:
            computations = self.module.computations
            for body in gone:
                computations.remove(body)
            if added:
                at = computations.index(self.computation)
                computations[at:at] = added
        else:
            kept = [c for c in self.module.computations if c not in gone]
            at = next(n for n, c in enumerate(kept) if c is self.computation)
            kept[at:at] = added
            self.module.computations = kept
        self._bodies_added, self._bodies_taken_out = {}, {}

    def _make_each(self) -> None:
        """The few edits of one install, each a list operation (a scan of the list in C,
        cheaper than rebuilding it in Python: multi-output fusion syncs after each)."""
        instructions = self.computation.instructions
        for edit, inst, new in self._edits:
            if edit == "after":
                instructions.insert(instructions.index(inst) + 1, new)
            elif edit == "last":
                instructions.append(inst)
            else:
                instructions.remove(inst)

    def _edited_instructions(self) -> list[Instruction]:
        """The list with every held edit made, in one pass: an instruction put after
        another comes just after it, before those put there earlier, and after them
        whatever was put after it in turn (the order one ``list.insert`` after another
        makes); one taken out leaves what was put after it in place."""
        put_after: dict[Instruction, list[Instruction]] = {}
        put_last: list[Instruction] = []
        taken_out: set[Instruction] = set()  # instructions hash by identity (eq=False)
        for edit, inst, new in self._edits:
            if edit == "after":
                put_after.setdefault(inst, []).append(new)
            elif edit == "last":
                put_last.append(inst)
            else:
                taken_out.add(inst)
        edited: list[Instruction] = []
        stack: list[Instruction] = []
        for start in [*self.computation.instructions, *put_last]:
            stack.append(start)
            while stack:
                inst = stack.pop()
                if inst not in taken_out:
                    edited.append(inst)
                later = put_after.get(inst)
                if later:
                    stack.extend(later)  # the latest pops first
        return edited

    def instructions(self) -> list[Instruction]:
        """The computation's instructions as they are now (synced)."""
        self.sync()
        return self.computation.instructions

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
        self._edits.append(("out", inst, None))  # out of the list at the next sync

    def add_computation(self, body: Computation) -> None:
        """Put ``body`` into the module's computations, before the one fused (at the
        next sync)."""
        self._bodies_added[body] = None
        self.module_names.take(body.name)
        for inst in body.instructions:
            self.module_names.take(inst.name)

    def remove_computation(self, body: Computation) -> None:
        if body in self._bodies_added:
            del self._bodies_added[body]
        else:
            self._bodies_taken_out[body] = None
        self.module_names.release(body.name)
        for inst in body.instructions:
            self.module_names.release(inst.name)

    def regrow_computation(
        self, body: Computation, name: str, released: list[str], taken: list[str]
    ) -> None:
        """``body``, a computation of the module grown in place for a fusion that replaces
        the one calling it, as :meth:`add_computation` puts a new one in and
        :meth:`remove_computation` takes the old out: moved before the one fused (at
        the next sync), under ``name``; its instructions no longer hold ``released``
        and now hold ``taken``."""
        if body in self._bodies_added:
            del self._bodies_added[body]
        else:
            self._bodies_taken_out[body] = None
        self._bodies_added[body] = None
        names = self.module_names
        names.take(name)
        for taken_name in taken:
            names.take(taken_name)
        names.release(body.name)
        for released_name in released:
            names.release(released_name)
        body.name = name

    def rename_computation(self, body: Computation, name: str) -> None:
        self.module_names.release(body.name)
        self.module_names.take(name)
        body.name = name

    def finish(self) -> None:
        """Make the held list edits and leave the text order a definition order (a user
        of an output may have come before the fusion); the post-order also proves there
        is no cycle."""
        self.sync()
        self.computation.instructions = self.computation.post_order()
