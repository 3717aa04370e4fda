"""Copy insertion: make every buffer the dataflow shares safe to share.

:mod:`heron.hlo.buffers.dataflow` puts values in one buffer where an
instruction works in place: a ``while`` keeps its state in its init values'
bytes, ``dynamic-update-slice`` / ``scatter`` (unfused, or as a fusion's root)
write into their operand, a ``conditional`` or ``call`` result lives where its
branch roots do. That is only right when nothing still needs the old bytes,
and when no parameter or constant gets written. This pass makes it right, as
XLA's CopyInsertion does, by adding a ``copy`` where sharing is unsafe and
control predecessors (``control-predecessors``) where sharing is safe only if
every reader of the old value runs before the writer; the scheduler honours
them. The rules, per sequential computation (callers first):

1. A while's init: each element must be a value of its own (a multi-output
   fusion's leaf, a finished loop's element), in the init tuple once, which
   only the while uses; other instructions may read it if they can run before
   the loop (they are ordered so). A parameter (or a parameter's element) the
   body passes through unchanged and nobody reads from the loop's result stays
   uncopied: the loop only reads it. Otherwise the element is copied.
2. A while body: root element ``i`` goes back into state buffer ``i``. It may
   be the parameter's element ``i`` itself, an in-place chain on it, or a
   value of its own (then it runs after every reader of the old element
   ``i``); anything else, or an ordering that is impossible, gets a copy. The
   value's own instruction may read the old element only where it writes each
   element over the one it reads (:func:`reads_in_place`, XLA's
   ``CanShareOperandBufferWithUser`` for elementwise users): a kernel that
   reads the old element at another index (a reverse, a transpose, a
   reduction) would read bytes it has already overwritten, so its result gets
   a copy, which runs after it.
3. An in-place update of ``x``: allowed when ``x`` is a value of its own (a
   multi-output fusion's leaf included, or a while body's parameter element)
   that no output, loop, other in-place update or view escaping to the root
   holds; every other reader of ``x`` runs first. Parameters, constants and
   loop results are copied first.
4. The roots of the entry, of branches and of calls: every leaf a distinct
   value of its own; parameters, constants, views of them and repeats are
   copied (an output must not be the caller's argument or a constant, except
   the argument donated to that very output).

5. Donation (the module's ``input_output_alias``, :meth:`_Inserter.run_donating`):
   an aliased output goes into its parameter's bytes, as a body root element goes
   into its state (rule 2). It may be the parameter itself, unchanged (no copy);
   a while's result whose init element is the parameter, read by nothing else (the
   loop runs in the caller's bytes); a chain of in-place updates of the parameter
   (rule 3 then lets the first update write it, every other reader first); or a
   value of its own (or a multi-output fusion's leaf, several leaves of one fusion
   each into its own parameter) whose instruction runs after every reader of the
   parameter and reads it only element by element; in a multi-output fusion, read
   by that leaf's root alone, or by several roots of a loop fusion of elementwise
   ops whose emitter computes every root of an element before storing any
   (:data:`~heron.hlo.fusion_outputs.OUTPUTS_WRITTEN_TOGETHER`). Anything
   else gets a copy that runs last. ``may-alias`` and ``must-alias`` are the same
   here: the alias is always honoured. Parameters not aliased are never written.

It runs after fusion (it needs the fusions' in-place roots) and before the
scheduler.
"""

from __future__ import annotations

from collections.abc import Callable
from functools import partial

from heron.hlo.attributes import InstructionRefs
from heron.hlo.buffers.dataflow import (
    VIEW_OPCODES,
    in_place_operands,
    sequential_callees,
    sequential_computations,
)
from heron.hlo.builder import NameUniquer
from heron.hlo.errors import UnsupportedError
from heron.hlo.fusion_outputs import OUTPUTS_WRITTEN_TOGETHER, fusion_roots
from heron.hlo.input_output_alias import AliasEntry, input_output_aliases
from heron.hlo.ir import Computation, Instruction, Module
from heron.hlo.opcodes import is_elementwise
from heron.hlo.passes.loop_state import state_element
from heron.hlo.passes.registry import hlo_pass
from heron.hlo.passes.rewrite import module_names
from heron.hlo.shapes import ArrayShape, TupleShape

__all__ = ["insert_copies", "reads_in_place"]

#: Results that are not a value of their own: views, the caller's bytes, loaded data, loop state.
_NOT_OWN = VIEW_OPCODES | {"parameter", "constant", "while"}

#: Results in their operands' bytes: views, and a loop (its state is its init's elements, and
#: so is its result: a reader of the result reads them).
_SAME_BYTES = VIEW_OPCODES | {"while"}


@hlo_pass(
    "copy-insertion",
    "copies and control predecessors that make in-place updates and loop state safe",
)
def insert_copies(module: Module) -> bool:
    """Add the copies and orderings buffer sharing needs; True when the module changed."""
    roles: dict[int, str] = {id(module.entry): "entry"}
    computations = sequential_computations(module)
    for computation in computations:
        for inst in computation.instructions:
            callees = sequential_callees(inst)
            for callee in callees:
                roles[id(callee)] = "branch"
            if inst.opcode == "while":
                roles[id(callees[0])] = "condition"
                roles[id(callees[1])] = "body"
    inserter = _Inserter(module_names(module))
    donations = input_output_aliases(module)
    for computation in computations:
        if computation is module.entry and donations:
            inserter.run_donating(computation, donations)
        else:
            inserter.run(computation, roles[id(computation)])
    return inserter.changed


class _Donation:
    """One input_output_alias entry in the entry: the output's path in the root, and the
    instructions that read the donated parameter leaf (the parameter itself, or the
    get-tuple-elements of a tuple parameter's element)."""

    def __init__(self, alias: AliasEntry, group: list[Instruction]) -> None:
        self.alias = alias
        self.path = alias.output_index
        self.group = group
        #: "unchanged" (the output is the parameter), "loop" (a while runs in its bytes),
        #: "chain" (in-place updates of the parameter), "written" (a value written into it).
        self.state = "written"


class _Inserter:
    def __init__(self, names: NameUniquer) -> None:
        self.names = names
        self.changed = False
        self._users: dict[int, dict[Instruction, list[Instruction]]] = {}

    def users(self, computation: Computation) -> dict[Instruction, list[Instruction]]:
        """``computation.users()``, kept until an instruction is added (the only edit that
        changes operands here: every operand rewrite follows the insertion of its new operand)."""
        cached = self._users.get(id(computation))
        if cached is None:
            cached = self._users[id(computation)] = computation.users()
        return cached

    # -- graph helpers -----------------------------------------------------------------
    def copy(
        self, computation: Computation, value: Instruction, before: Instruction
    ) -> Instruction:
        if not isinstance(value.shape, ArrayShape):
            raise UnsupportedError(f"copy insertion cannot copy tuple value '{value.name}'")
        copy = Instruction(self.names.unique("copy"), "copy", value.shape, [value])
        self._insert(computation, copy, before)
        return copy

    def new(
        self,
        computation: Computation,
        opcode: str,
        shape: ArrayShape | TupleShape,
        operands: list[Instruction],
        before: Instruction | None,
        **attributes: object,
    ) -> Instruction:
        inst = Instruction(self.names.unique(opcode), opcode, shape, operands, dict(attributes))
        self._insert(computation, inst, before)
        return inst

    def _insert(
        self, computation: Computation, inst: Instruction, before: Instruction | None
    ) -> None:
        inst.parent = computation
        index = len(computation.instructions)
        if before is not None:
            index = next(i for i, x in enumerate(computation.instructions) if x is before)
        computation.instructions.insert(index, inst)
        self._users.clear()
        self.changed = True

    def order_after(
        self, computation: Computation, writer: Instruction, readers: list[Instruction]
    ) -> bool:
        """Make ``writer`` run after all ``readers``; False (and no change) if impossible."""
        if all(r is writer for r in readers):
            return True
        graph = _Graph(computation)
        later = graph.descendants(writer)
        if any(id(r) in later for r in readers if r is not writer):
            return False
        earlier = graph.ancestors(writer)
        missing = [r for r in readers if r is not writer and id(r) not in earlier]
        if missing:
            refs = writer.attributes.get("control-predecessors")
            names = list(refs.names) if isinstance(refs, InstructionRefs) else []
            names.extend(r.name for r in missing if r.name not in names)
            writer.attributes["control-predecessors"] = InstructionRefs(tuple(names))
            self.changed = True
        return True

    # -- the rules ---------------------------------------------------------------------
    def run(self, computation: Computation, role: str) -> None:
        for inst in list(computation.instructions):
            if inst.opcode == "while":
                self.while_init(computation, inst)
        groups: dict[int, list[Instruction]] = {}
        if role == "body":
            groups = self.body_groups(computation)
            self.body_root_copies(computation, groups)
        for inst in computation.post_order():
            for _, operand in in_place_operands(inst):
                if not self.can_update(computation, inst, operand, groups):
                    inst.operands[operand] = self.copy(computation, inst.operands[operand], inst)
        if role == "body":
            self.body_root_order(computation, groups)
        if role in ("entry", "branch"):
            root = computation.root_instruction
            owned = self.own_leaves(computation, root, set(), root)
            if owned is not root:
                computation.root = owned

    def while_init(
        self, computation: Computation, loop: Instruction, keep: frozenset[int] = frozenset()
    ) -> None:
        """Rule 1; ``keep``: ids of init elements that stay (donated parameters the loop's
        result gives back into their own bytes, :meth:`donated_carries`)."""
        init = loop.operands[0]
        users = self.users(computation)
        if isinstance(init.shape, ArrayShape):
            if not (_own(init) and users[init] == [loop] and computation.root is not init):
                loop.operands[0] = self.copy(computation, init, loop)
            return
        _flat_state(loop)
        if init.opcode != "tuple" or users[init] != [loop] or computation.root is init:
            parts = [
                self.new(computation, "get-tuple-element", shape, [init], loop, index=k)
                for k, shape in enumerate(init.shape.elements)  # type: ignore[union-attr]
            ]
            init = self.new(computation, "tuple", init.shape, parts, loop)
            loop.operands[0] = init
            users = self.users(computation)
        for k, element in enumerate(init.operands):
            alone = users[element] == [init] and init.operands.count(element) == 1
            if alone and id(element) in keep:
                continue
            own = _own(element) or _sole_leaf(element, users)
            first = init.operands.index(element) == k  # a repeat gets a copy
            if own and first and computation.root is not element:
                if self.read_before_loop(computation, loop, element):
                    continue
            if first and self.only_read_by_loop(computation, loop, element, k):
                continue
            init.operands[k] = self.copy(computation, element, init)

    def only_read_by_loop(
        self, computation: Computation, loop: Instruction, element: Instruction, k: int
    ) -> bool:
        """Rule 1 for a parameter's bytes the loop only reads (a scan's inputs and
        weights): the body passes element ``k`` through unchanged, so no iteration writes
        it (an in-place update of it would reach the root, which rule 3 refuses), and
        nothing reads the loop's element ``k``, so the bytes never leave through its
        result. Then the loop runs on the caller's bytes: no copy (XLA's copy removal
        finds the same: the live ranges never interfere)."""
        reads_parameter = element.opcode == "parameter" or (
            element.opcode == "get-tuple-element" and element.operands[0].opcode == "parameter"
        )
        if not reads_parameter:
            return False
        body = loop.called("body")
        root = body.root_instruction
        (state,) = body.parameters
        if root.opcode != "tuple" or state_element(root.operands[k], state) != k:
            return False
        return not any(state_element(user, loop) == k for user in self.users(computation)[loop])

    def read_before_loop(
        self, computation: Computation, loop: Instruction, element: Instruction
    ) -> bool:
        """Rule 1 for an element other instructions read too: the loop may run in its
        bytes when each of them reads it directly (not through a view, not into a tuple
        or another loop), writes nothing into it, and can run before the loop (ordered
        so here). Copies of it for repeats in the init read it before the loop anyway."""
        init = loop.operands[0]
        readers = [u for u in self.users(computation)[element] if u is not init]
        for reader in readers:
            if reader.opcode in _SAME_BYTES or any(o is element for _, o in _updates(reader)):
                return False
        return self.order_after(computation, loop, readers)

    def body_groups(self, body: Computation) -> dict[int, list[Instruction]]:
        """State element -> the instructions that read it from the body's parameter."""
        (param,) = body.parameters
        if isinstance(param.shape, ArrayShape):
            return {0: [param]}
        users = self.users(body)
        strays = [u for u in users[param] if u.opcode != "get-tuple-element"]
        if strays or body.root is param:
            parts = [
                self.new(body, "get-tuple-element", shape, [param], None, index=k)
                for k, shape in enumerate(param.shape.elements)  # type: ignore[union-attr]
            ]
            whole = self.new(body, "tuple", param.shape, parts, None)
            for user in strays:
                user.operands = [whole if o is param else o for o in user.operands]
            if body.root is param:
                body.root = whole
        root = body.root_instruction
        if root.opcode != "tuple":
            parts = [
                self.new(body, "get-tuple-element", shape, [root], None, index=k)
                for k, shape in enumerate(root.shape.elements)  # type: ignore[union-attr]
            ]
            body.root = self.new(body, "tuple", root.shape, parts, None)
        groups: dict[int, list[Instruction]] = {}
        for user in self.users(body)[param]:
            groups.setdefault(int(user.attr("index")), []).append(user)
        return groups

    def _root_elements(self, body: Computation) -> list[Instruction]:
        root = body.root_instruction
        return [root] if isinstance(root.shape, ArrayShape) else list(root.operands)

    def _set_root_element(self, body: Computation, k: int, value: Instruction) -> None:
        root = body.root_instruction
        if isinstance(root.shape, ArrayShape):
            body.root = value
        else:
            root.operands[k] = value

    def body_root_copies(self, body: Computation, groups: dict[int, list[Instruction]]) -> None:
        """Rule 2, before in-place updates are decided: copy what cannot go back in place."""
        seen: set[tuple[int, int | None]] = set()
        for k, element in enumerate(self._root_elements(body)):
            origin = _chain_origin(element)
            leaf = _leaf_of(element)
            key = _bytes_key(element)
            carried = element in groups.get(k, []) or origin in groups.get(k, [])
            if (carried or _own(origin) or leaf is not None) and key not in seen:
                seen.add(key)
                continue
            self._set_root_element(body, k, self.copy(body, element, body.root_instruction))

    def body_root_order(self, body: Computation, groups: dict[int, list[Instruction]]) -> None:
        """Rule 2, after in-place updates: the writer of element k runs after its old readers."""
        for k, element in enumerate(self._root_elements(body)):
            chain = _chain_from(groups.get(k, []), self.users(body))
            if element in chain:
                continue
            self.write_after_readers(body, element, chain, partial(self._set_root_element, body, k))

    def can_update(
        self,
        computation: Computation,
        inst: Instruction,
        operand: int,
        groups: dict[int, list[Instruction]],
    ) -> bool:
        """Rule 3: may ``inst`` write its operand ``operand`` in place (ordering what needs it)?"""
        target = inst.operands[operand]
        if inst.operands.count(target) > 1:
            return False
        users = self.users(computation)
        if _own(target) or (_fusion_leaf(target) is not None and _sole_leaf(target, users)):
            origin = [target]  # a multi-output fusion's leaf: its own bytes too
        elif target.opcode == "get-tuple-element" or target.opcode == "parameter":
            origin = next((g for g in groups.values() if target in g), [])
            if not origin:
                return False
        else:
            return False
        root = computation.root_instruction
        users = self.users(computation)
        if any(_reaches(o, users, root) for o in origin):
            return False
        readers = _readers(set(origin), users, skip={inst})
        same_bytes = {id(v) for v in (*origin, *readers) if v in origin or v.opcode in VIEW_OPCODES}
        if any(id(o) in same_bytes for r in readers for _, o in _updates(r)):
            return False  # a second in-place update of the same bytes
        return self.order_after(computation, inst, readers)

    def own_leaves(
        self,
        computation: Computation,
        value: Instruction,
        seen: set[tuple[int, int]],
        before: Instruction,
        keep: dict[tuple[int, ...], list[Instruction]] | None = None,
        path: tuple[int, ...] = (),
    ) -> Instruction:
        """Rule 4: ``value`` with every leaf a distinct value of its own (copies where not).

        ``keep``: output path -> the donated parameter leaf's readers; an output that
        is its own donated parameter, unchanged, stays (its bytes are already there).
        """
        if isinstance(value.shape, TupleShape):
            if value.opcode == "tuple":
                parts = list(value.operands)
            else:
                parts = [
                    self.new(computation, "get-tuple-element", shape, [value], before, index=k)
                    for k, shape in enumerate(value.shape.elements)
                ]
            owned = [
                self.own_leaves(computation, part, seen, before, keep, (*path, k))
                for k, part in enumerate(parts)
            ]
            if value.opcode == "tuple" and all(a is b for a, b in zip(owned, value.operands)):
                return value
            return self.new(computation, "tuple", value.shape, owned, before)
        if value.shape.is_token:
            return value
        if keep is not None and value in keep.get(path, ()):
            return value
        source = _source(value)
        if source is None or source in seen:
            return self.copy(computation, value, before)
        seen.add(source)
        return value

    # -- donated entry parameters (input_output_alias) ----------------------------------
    def run_donating(self, entry: Computation, aliases: tuple[AliasEntry, ...]) -> None:
        """The entry of a module whose outputs live in donated parameters' bytes.

        Rule 5: an aliased output goes into its parameter's buffer, as a while body's
        root goes into its state (rule 2): it may be the parameter itself, unchanged;
        the result of a loop whose init is the parameter (the loop runs in its bytes);
        an in-place chain on the parameter (each update in place when rule 3 allows);
        or a value of its own whose instruction runs after every reader of the
        parameter and writes each element over the one it reads (:func:`reads_in_place`).
        Anything else gets a copy, after every reader.
        """
        donations = [_Donation(alias, _donated_readers(entry, alias)) for alias in aliases]
        for inst in list(entry.instructions):
            if inst.opcode == "while":
                self.while_init(entry, inst, self.donated_carries(entry, inst, donations))
        root = entry.root_instruction
        keep = {d.path: d.group for d in donations}
        owned = self.own_leaves(entry, root, set(), root, keep)
        if owned is not root:
            entry.root = owned
            self._drop_dead_views(entry, root)
        groups: dict[int, list[Instruction]] = {}
        # The values already written into a donated parameter: an instruction's own bytes,
        # or one leaf of a multi-output fusion (each leaf its own bytes).
        seen: set[tuple[int, int | None]] = set()
        for n, donation in enumerate(donations):
            element = self._leaf_at(entry, donation.path)
            origin = _chain_origin(element)
            leaf = _leaf_of(element)
            key = _bytes_key(element)
            if element in donation.group:
                donation.state = "unchanged"
            elif _carried(element, donation.group):
                donation.state = "loop"
            elif origin in donation.group:
                donation.state = "chain"
                groups[n] = donation.group
            elif leaf is not None and key not in seen:
                pass  # a leaf of a multi-output fusion, written where it goes
            elif not (_own(origin) and key not in seen):
                copy = self.copy(entry, element, entry.root_instruction)
                self._set_leaf(entry, donation.path, copy)
                key = (id(copy), None)
            seen.add(key)
        for inst in entry.post_order():
            for _, operand in in_place_operands(inst):
                if not self.can_update(entry, inst, operand, groups):
                    inst.operands[operand] = self.copy(entry, inst.operands[operand], inst)
        for donation in donations:
            if donation.state in ("unchanged", "loop"):
                continue
            self.donated_order(entry, donation)

    def donated_carries(
        self, entry: Computation, loop: Instruction, donations: list[_Donation]
    ) -> frozenset[int]:
        """Init elements of ``loop`` that are donated parameters whose output is the loop's
        same element: the loop may run in the parameter's bytes (no copy at all)."""
        init = loop.operands[0]
        if init.opcode != "tuple" or self.users(entry)[init] != [loop]:
            return frozenset()
        keep: set[int] = set()
        for donation in donations:
            at = _element_at(entry.root_instruction, donation.path)
            if at is None or at[0] is not loop:
                continue
            element = init.operands[at[1]]
            if element in donation.group:
                keep.add(id(element))
        return frozenset(keep)

    def donated_order(self, entry: Computation, donation: _Donation) -> None:
        """Rule 5, after in-place updates: the output's writer runs after every reader of
        the parameter's old bytes; where it cannot, or reads them at other elements, the
        output is copied into them last."""
        chain = _chain_from(donation.group, self.users(entry))
        element = self._leaf_at(entry, donation.path)
        if element in chain:
            return
        self.write_after_readers(
            entry, element, chain, partial(self._set_leaf, entry, donation.path)
        )

    def write_after_readers(
        self,
        computation: Computation,
        element: Instruction,
        chain: set[Instruction],
        replace: Callable[[Instruction], None],
    ) -> None:
        """Rules 2 and 5: ``element`` (a value of its own, or a multi-output fusion's leaf)
        is written into the bytes of ``chain`` (a state element or a donated parameter, and
        the in-place updates of it): its writer runs after every reader of the old bytes.
        Where it cannot, or where it reads them at elements other than those it writes,
        ``replace`` puts a copy of it in its place, which runs last."""
        root = computation.root_instruction
        users = self.users(computation)
        leaf = _leaf_of(element)
        writer = _chain_origin(element) if leaf is None else leaf[0]
        readers = _readers(chain, users, skip={root})  # in-place links too: they write the bytes
        old = _with_views(chain, users)
        if leaf is None:
            over_itself = not _own(writer) or any(
                operand in old and not reads_in_place(writer, k)
                for k, operand in enumerate(writer.operands)
            )
        else:
            over_itself = any(
                operand in old and not _root_reads_in_place(writer, k, leaf[1])
                for k, operand in enumerate(writer.operands)
            )
        if over_itself or not self.order_after(computation, writer, readers):
            copy = self.copy(computation, element, root)
            replace(copy)
            if not self.order_after(computation, copy, readers):
                raise AssertionError(f"copy '{copy.name}' cannot follow its readers")

    def _drop_dead_views(self, computation: Computation, value: Instruction) -> None:
        """Remove the old root ``value`` and the views under it nothing reads any more: they
        would count as readers of the parameters they name."""
        stack = [value]
        while stack:
            inst = stack.pop()
            users = self.users(computation)
            if users.get(inst) or inst is computation.root or inst.opcode not in VIEW_OPCODES:
                continue
            computation.instructions.remove(inst)
            self._users.clear()
            stack.extend(inst.operands)

    def _leaf_at(self, computation: Computation, path: tuple[int, ...]) -> Instruction:
        """The root's leaf at ``path`` (rule 4 has made the root tuples down to its leaves)."""
        value = computation.root_instruction
        for k in path:
            if value.opcode != "tuple":
                raise AssertionError(f"output path {path} meets '{value.name}', not a tuple")
            value = value.operands[k]
        return value

    def _set_leaf(
        self, computation: Computation, path: tuple[int, ...], value: Instruction
    ) -> None:
        if not path:
            computation.root = value
            return
        holder = self._leaf_at(computation, path[:-1])
        holder.operands[path[-1]] = value
        self._users.clear()


def _donated_readers(entry: Computation, alias: AliasEntry) -> list[Instruction]:
    """What reads the donated parameter leaf: the parameter, or for an element of a
    tuple parameter the get-tuple-elements of it."""
    param = next(p for p in entry.parameters if p.parameter_number == alias.parameter_number)
    if not alias.parameter_index:
        return [param]
    users = entry.users().get(param, [])
    if len(alias.parameter_index) != 1 or any(u.opcode != "get-tuple-element" for u in users):
        raise UnsupportedError(
            f"input_output_alias entry '{alias}': copy insertion donates an array parameter"
            f" or an element of a tuple parameter read through get-tuple-element;"
            f" parameter '{param.name}' is {param.shape}"
        )
    (index,) = alias.parameter_index
    return [u for u in users if int(u.attr("index")) == index]


def _element_at(root: Instruction, path: tuple[int, ...]) -> tuple[Instruction, int] | None:
    """(holder, element) of the output at ``path`` before rule 4: a get-tuple-element's
    operand and index, or the tuple-shaped instruction the path's last step enters."""
    value = root
    for depth, k in enumerate(path):
        if value.opcode != "tuple":
            return (value, k) if depth == len(path) - 1 else None
        value = value.operands[k]
    if value.opcode == "get-tuple-element":
        return (value.operands[0], int(value.attr("index")))
    return None


def _bytes_key(element: Instruction) -> tuple[int, int | None]:
    """Which bytes ``element`` names, for telling two outputs or state elements apart: a
    multi-output fusion's leaf (the fusion and the leaf), else its in-place chain's origin."""
    leaf = _leaf_of(element)
    if leaf is not None:
        return id(leaf[0]), leaf[1]
    return id(_chain_origin(element)), None


def _leaf_of(element: Instruction) -> tuple[Instruction, int] | None:
    """The multi-output fusion and its leaf whose bytes ``element`` is, seen through
    bitcasts (a slice fusion's outputs bitcast to the loop state's shapes), or None."""
    while element.opcode == "bitcast":
        element = element.operands[0]
    leaf = _fusion_leaf(element)
    return None if leaf is None else (element.operands[0], leaf)


def _fusion_leaf(element: Instruction) -> int | None:
    """The leaf of a multi-output fusion that ``element`` is (its own bytes), or None;
    None too for a leaf the fusion updates an operand in place for (its bytes are the
    operand's: :func:`_chain_origin` follows it there)."""
    if element.opcode != "get-tuple-element" or not isinstance(element.shape, ArrayShape):
        return None
    if _updated_by_leaf(element) is not None:
        return None
    holder = element.operands[0]
    if holder.opcode != "fusion" or not isinstance(holder.shape, TupleShape):
        return None
    roots = fusion_roots(holder.called("calls"))
    if len(roots) != len(holder.shape.elements) or not all(
        isinstance(r.shape, ArrayShape) for r in roots
    ):
        return None
    return int(element.attr("index"))


def _root_reads_in_place(fusion: Instruction, operand: int, leaf: int) -> bool:
    """Whether root ``leaf`` of the multi-output ``fusion`` may be written over operand
    ``operand`` while the kernel reads it: every element of the operand is read only by
    elementwise ops of the root's dimensions, so the thread that writes an element has
    read it first; and either only root ``leaf`` reads it (whatever order an emitter
    writes the roots in), or the fusion is a loop fusion of elementwise ops whose
    emitter computes every root of an element before storing any
    (:data:`~heron.hlo.fusion_outputs.OUTPUTS_WRITTEN_TOGETHER`: an optimizer step's
    moment, which the parameter's update reads too)."""
    if fusion.attr("kind") != "kLoop":
        return False  # another emitter's threads: see reads_in_place
    body = fusion.called("calls")
    roots = fusion_roots(body)
    mine = roots[leaf]
    value = fusion.operands[operand]
    result = mine.shape
    if not isinstance(result, ArrayShape) or not isinstance(value.shape, ArrayShape):
        return False
    if (value.shape.dims, value.shape.minor_to_major) != (result.dims, result.minor_to_major):
        return False
    reached = _elementwise_readers(body, operand, result.dims, past_root_tuple=True)
    if reached is None:
        return False
    roots_reached = {id(r) for r in reached if any(r is root for root in roots)}
    if roots_reached == {id(mine)}:
        return True
    return id(mine) in roots_reached and _written_together(fusion)


#: What a loop fusion written by the loop emitter alone may hold: elementwise ops and
#: these, none of them a hero another emitter claims (a transpose, a reduce, a concatenate,
#: a dynamic-update-slice, a scatter, a dot). A slice claims a fusion (``input_slices``)
#: only when every root is one, and the root written over its operand here is elementwise.
_LOOP_ONLY = frozenset(
    {"parameter", "constant", "broadcast", "iota", "tuple", "slice", "bitcast", "reshape"}
)


def _written_together(fusion: Instruction) -> bool:
    """Whether ``fusion``'s kernel computes every root of an element before it stores any:
    a loop fusion of elementwise ops (the loop emitter's, which promises it) with at most
    :data:`~heron.hlo.fusion_outputs.OUTPUTS_WRITTEN_TOGETHER` outputs."""
    body = fusion.called("calls")
    outputs = sum(1 for _ in fusion.shape.leaves())
    if fusion.attr("kind") != "kLoop" or outputs > OUTPUTS_WRITTEN_TOGETHER:
        return False
    return all(
        inst.opcode in _LOOP_ONLY or is_elementwise(inst.opcode) for inst in body.instructions
    )


def _elementwise_readers(
    body: Computation, operand: int, dims: tuple[int, ...], *, past_root_tuple: bool = False
) -> list[Instruction] | None:
    """Every instruction of ``body`` that reads parameter ``operand``, directly or through
    another such reader, when each is an elementwise op of ``dims`` (an element is then
    read only by the thread that writes the same element); None when one is not.
    ``past_root_tuple``: a multi-output fusion's root tuple is not counted as a reader."""
    users = body.users()
    top = body.root_instruction
    stack, seen = [body.parameters[operand]], set()
    reached: list[Instruction] = []
    while stack:
        for reader in users.get(stack.pop(), []):
            if id(reader) in seen or past_root_tuple and reader is top and top.opcode == "tuple":
                continue
            seen.add(id(reader))
            shape = reader.shape
            if not (
                is_elementwise(reader.opcode)
                and isinstance(shape, ArrayShape)
                and shape.dims == dims
            ):
                return None
            reached.append(reader)
            stack.append(reader)
    return reached


def _carried(element: Instruction, group: list[Instruction]) -> bool:
    """Whether ``element`` is a loop's result element whose init is the donated parameter."""
    if element.opcode != "get-tuple-element" or element.operands[0].opcode != "while":
        return False
    init = element.operands[0].operands[0]
    index = int(element.attr("index"))
    return init.opcode == "tuple" and init.operands[index] in group


class _Graph:
    """Dependencies in one computation: operands and control predecessors."""

    def __init__(self, computation: Computation) -> None:
        by_name = {inst.name: inst for inst in computation.instructions}
        self.preds: dict[int, list[Instruction]] = {}
        self.succs: dict[int, list[Instruction]] = {id(i): [] for i in computation.instructions}
        for inst in computation.instructions:
            refs = inst.attributes.get("control-predecessors")
            control = [by_name[n] for n in refs.names] if isinstance(refs, InstructionRefs) else []
            self.preds[id(inst)] = [*inst.operands, *control]
            for pred in self.preds[id(inst)]:
                self.succs.setdefault(id(pred), []).append(inst)

    def _closure(self, start: Instruction, edges: dict[int, list[Instruction]]) -> set[int]:
        seen: set[int] = set()
        stack = list(edges.get(id(start), []))
        while stack:
            inst = stack.pop()
            if id(inst) not in seen:
                seen.add(id(inst))
                stack.extend(edges.get(id(inst), []))
        return seen

    def ancestors(self, inst: Instruction) -> set[int]:
        return self._closure(inst, self.preds)

    def descendants(self, inst: Instruction) -> set[int]:
        return self._closure(inst, self.succs)


def _sole_leaf(element: Instruction, users: dict[Instruction, list[Instruction]]) -> bool:
    """Whether ``element`` is the only reader of its bytes' name: a leaf of a multi-output
    fusion or of a finished loop's state (bytes nothing else holds), taken by this
    get-tuple-element alone (no other one of the same leaf, no use of the whole tuple)."""
    if _fusion_leaf(element) is None and not (
        element.opcode == "get-tuple-element"
        and element.operands[0].opcode == "while"
        and isinstance(element.shape, ArrayShape)
    ):
        return False
    holder, index = element.operands[0], int(element.attr("index"))
    return all(
        user.opcode == "get-tuple-element" and (user is element or int(user.attr("index")) != index)
        for user in users.get(holder, [])
    )


def _own(inst: Instruction) -> bool:
    """Whether ``inst``'s result is bytes of its own (an in-place update's are its chain's)."""
    return inst.opcode not in _NOT_OWN and isinstance(inst.shape, ArrayShape)


def _updates(inst: Instruction) -> list[tuple[int, Instruction]]:
    return [(leaf, inst.operands[k]) for leaf, k in in_place_operands(inst)]


def _chain_origin(value: Instruction) -> Instruction:
    """Follow in-place updates back to the value whose bytes they update: an array
    updater's, or a leaf of a multi-output fusion that updates one operand per leaf
    (a scan's stacked outputs, each a dynamic-update-slice root)."""
    while isinstance(value.shape, ArrayShape):
        updated = _updated_by_leaf(value)
        if updated is not None:
            value = updated
            continue
        updates = _updates(value)
        if len(updates) != 1:
            break
        value = updates[0][1]
    return value


def _updated_by_leaf(value: Instruction) -> Instruction | None:
    """The operand a multi-output fusion updates in place as the leaf ``value`` reads
    (a get-tuple-element of it), or None."""
    if value.opcode != "get-tuple-element" or not isinstance(value.operands[0].shape, TupleShape):
        return None
    index = int(value.attr("index"))
    return next((o for leaf, o in _updates(value.operands[0]) if leaf == index), None)


def _chain_from(
    start: list[Instruction], users: dict[Instruction, list[Instruction]]
) -> set[Instruction]:
    """``start`` and the in-place updates that write on into the same bytes (array
    updaters, and the leaves of multi-output fusions updating them)."""
    chain = set(start)
    stack = list(start)
    while stack:
        value = stack.pop()
        for user in users.get(value, []):
            leaves = {leaf for leaf, o in _updates(user) if o is value}
            if not leaves:
                continue
            if isinstance(user.shape, ArrayShape):
                links = [user]
            else:  # a multi-output fusion: its leaf's get-tuple-elements hold the bytes
                links = [
                    u
                    for u in users.get(user, [])
                    if u.opcode == "get-tuple-element" and int(u.attr("index")) in leaves
                ]
            for link in links:
                if link not in chain:
                    chain.add(link)
                    stack.append(link)
    return chain


def _readers(
    values: set[Instruction],
    users: dict[Instruction, list[Instruction]],
    skip: set[Instruction],
) -> list[Instruction]:
    """Everything that reads the bytes of ``values``, looking through views and loops (a
    loop's result is its init's bytes: a reader of the result reads ``values``)."""
    readers: list[Instruction] = []
    seen: set[int] = set()
    stack = list(values)
    while stack:
        value = stack.pop()
        for user in users.get(value, []):
            if id(user) in seen:
                continue
            seen.add(id(user))
            if user.opcode in _SAME_BYTES:
                stack.append(user)
            if user not in skip:
                readers.append(user)
    return readers


def _with_views(
    values: set[Instruction], users: dict[Instruction, list[Instruction]]
) -> set[Instruction]:
    """``values`` and every view of their bytes (bitcasts, get-tuple-elements, a loop
    running in them, ...)."""
    found = set(values)
    stack = list(values)
    while stack:
        for user in users.get(stack.pop(), []):
            if user.opcode in _SAME_BYTES and user not in found:
                found.add(user)
                stack.append(user)
    return found


def reads_in_place(user: Instruction, operand: int) -> bool:
    """Whether ``user`` may write its array result over the bytes of operand ``operand``
    while it reads them.

    XLA's rule for sharing an operand's buffer with its user
    (``CanShareOperandBufferWithUser``), for users that read element by element: the
    operand has the result's dimensions and layout, and is read only by elementwise
    ops of those dimensions (inside a fusion: its parameter), so each element is read
    by the thread that writes the same element, before it writes it. Anything else
    (a reverse, a transpose, a broadcast, a reduction) may read an element another
    thread has already overwritten. So may a fusion another emitter writes
    (``kInput``): a reduction's epilogue is computed by every thread of a row and
    stored by one, so the others read an element the storing thread overwrites (a
    race heron's interpreter refuses; a library sweep's conjugate gradients of 2 and
    4 unknowns met it). Only a loop fusion's threads each write what they read.
    """
    value = user.operands[operand]
    result = user.shape
    if not isinstance(result, ArrayShape) or not isinstance(value.shape, ArrayShape):
        return False
    if (value.shape.dims, value.shape.minor_to_major) != (result.dims, result.minor_to_major):
        return False
    if user.opcode != "fusion":
        return is_elementwise(user.opcode)
    if user.attr("kind") != "kLoop":
        return False
    return _elementwise_readers(user.called("calls"), operand, result.dims) is not None


def _reaches(
    value: Instruction, users: dict[Instruction, list[Instruction]], root: Instruction
) -> bool:
    """Whether ``value``, or a view of it, is ``root`` (its bytes leave the computation)."""
    stack = [value]
    seen: set[int] = set()
    while stack:
        inst = stack.pop()
        if inst is root:
            return True
        if id(inst) in seen:
            continue
        seen.add(id(inst))
        stack.extend(u for u in users.get(inst, []) if u.opcode in VIEW_OPCODES)
    return False


def _writes_its_tuple(holder: Instruction) -> bool:
    """Whether each leaf of ``holder``'s tuple result is bytes it writes: a loop's, a
    branch's, a call's, a fusion's, and a custom call's that aliases no operand (a
    library call giving several results, an attention's gradients)."""
    if holder.opcode == "custom-call":
        return "output_to_operand_aliasing" not in holder.attributes
    return holder.opcode in ("while", "conditional", "call", "fusion")


def _source(value: Instruction) -> tuple[int, int] | None:
    """The (instruction, leaf) whose own bytes ``value`` is; None: a parameter's, a constant's."""
    leaf = 0
    while True:
        if value.opcode in ("bitcast",):
            value = value.operands[0]
        elif value.opcode == "get-tuple-element":
            holder = value.operands[0]
            index = int(value.attr("index"))
            if holder.opcode == "tuple":
                value = holder.operands[index]
            elif _writes_its_tuple(holder) and isinstance(
                holder.shape.elements[index],
                ArrayShape,  # type: ignore[union-attr]
            ):
                start = sum(sum(1 for _ in e.leaves()) for e in holder.shape.elements[:index])  # type: ignore[union-attr]
                return (id(holder), start)
            else:
                return None
        elif value.opcode in _NOT_OWN:
            return None
        else:
            return (id(value), leaf)


def _flat_state(loop: Instruction) -> None:
    shape = loop.shape
    if isinstance(shape, TupleShape) and not all(isinstance(e, ArrayShape) for e in shape.elements):
        raise UnsupportedError(
            f"while '{loop.name}' carries nested tuples {shape}; copy insertion handles a loop"
            " state of arrays (JAX's form)"
        )
