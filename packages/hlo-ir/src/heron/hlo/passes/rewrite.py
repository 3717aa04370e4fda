"""What every HLO rewrite needs: replacing uses, removing instructions, fresh names, effects.

Passes rewrite the object graph in place (instructions refer to their operands
directly), so each helper here keeps the graph's invariants: a replaced value's
users and the computation's root move to the replacement, and an instruction
leaves its computation only when nothing uses it.
"""

from __future__ import annotations

from collections.abc import Callable, Collection, Iterable, Sequence

from heron.hlo.attributes import InstructionRefs
from heron.hlo.builder import NameUniquer
from heron.hlo.ir import Computation, Instruction, Module
from heron.hlo.shapes import Shape

__all__ = [
    "SIDE_EFFECT_OPCODES",
    "Inserter",
    "Uses",
    "computations_reached",
    "forward_operands",
    "has_side_effect",
    "module_names",
    "non_fusion_computations",
    "reachable_computations",
    "remove_instructions",
    "rename_control_predecessors",
    "replace_all_uses",
    "rewrite_each",
]

#: The attribute naming the instructions one must come after.
CONTROL = "control-predecessors"

#: Opcodes whose instructions must run even when nothing uses their value, and
#: which two identical instructions must not share: I/O, communication, random
#: state, and the barriers that order them.
SIDE_EFFECT_OPCODES = frozenset(
    {
        "infeed",
        "outfeed",
        "send",
        "send-done",
        "recv",
        "recv-done",
        "rng",
        "rng-get-and-update-state",
        "all-reduce",
        "all-reduce-start",
        "all-reduce-done",
        "all-gather",
        "all-gather-start",
        "all-gather-done",
        "all-to-all",
        "ragged-all-to-all",
        "collective-broadcast",
        "collective-permute",
        "collective-permute-start",
        "collective-permute-done",
        "reduce-scatter",
        "async-start",
        "async-update",
        "async-done",
        "add-dependency",
        "domain",
    }
)


def has_side_effect(inst: Instruction) -> bool:
    """Whether ``inst`` must stay even unused, and stay distinct from an identical twin."""
    if inst.opcode in SIDE_EFFECT_OPCODES:
        return True
    if inst.opcode == "custom-call":
        return bool(inst.attr("custom_call_has_side_effect", False))
    if inst.opcode in ("call", "while", "conditional"):
        return any(
            has_side_effect(called_inst)
            for computation in inst.called_computations()
            for called_inst in computation.instructions
        )
    return False


def replace_all_uses(computation: Computation, old: Instruction, new: Instruction) -> bool:
    """Make every user of ``old`` in ``computation`` (and its root) use ``new``; True if any."""
    if old is new:
        return False
    changed = False
    for inst in computation.instructions:
        if any(operand is old for operand in inst.operands):
            inst.operands = [new if operand is old else operand for operand in inst.operands]
            changed = True
    if computation.root is old:
        computation.root = new
        changed = True
    rename_control_predecessors(computation.instructions, {old.name: new.name})
    return changed


class Uses:
    """Who uses each instruction of one computation, kept current as a pass rewrites it.

    :func:`replace_all_uses` scans the whole computation, which makes a pass
    that replaces many instructions quadratic; a pass that rewrites as it walks
    builds one ``Uses`` per computation and replaces through it instead (linear
    in the uses it touches). New instructions are registered with :meth:`add`.
    """

    def __init__(self, computation: Computation) -> None:
        self.computation = computation
        self._users: dict[int, list[Instruction]] = {}
        for inst in computation.instructions:
            self._register(inst)
        #: Whether an instruction orders itself after another by name (XLA's optimized
        #: modules do): then a replaced instruction's edges move to its replacement.
        self._control = any(CONTROL in inst.attributes for inst in computation.instructions)

    def _register(self, inst: Instruction) -> None:
        seen: set[int] = set()
        for operand in inst.operands:
            if id(operand) not in seen:
                seen.add(id(operand))
                self._users.setdefault(id(operand), []).append(inst)

    def users(self, inst: Instruction) -> list[Instruction]:
        """The instructions with ``inst`` among their operands (each once)."""
        return list(self._users.get(id(inst), ()))

    def add(self, inst: Instruction) -> Instruction:
        """Add ``inst`` to the computation and record its operands' new user."""
        self.computation.add(inst)
        self._register(inst)
        return inst

    def record(self, inst: Instruction) -> None:
        """Record the uses of ``inst``, which the caller puts into the computation itself."""
        self._register(inst)

    def forget(self, inst: Instruction) -> None:
        """Forget that ``inst`` uses its operands (it is leaving the computation)."""
        for operand in inst.operands:
            users = self._users.get(id(operand))
            if users is not None:
                users[:] = [user for user in users if user is not inst]

    def replace(self, old: Instruction, new: Instruction) -> bool:
        """Make every user of ``old`` (and the root) use ``new``; True if anything changed."""
        if old is new:
            return False
        users = self._users.pop(id(old), [])
        targets = self._users.setdefault(id(new), [])
        for user in users:
            user.operands = [new if operand is old else operand for operand in user.operands]
            if not any(existing is user for existing in targets):
                targets.append(user)
        changed = bool(users)
        if self.computation.root is old:
            self.computation.root = new
            changed = True
        if self._control:
            rename_control_predecessors(self.computation.instructions, {old.name: new.name})
        return changed


class Inserter:
    """Adds the instructions a rewrite creates to one computation, and replaces through them.

    A new instruction is named after the one it stands for (``like``, with an
    optional ``suffix``: ``dot.1.lhs_transpose``), unique in the module, carries
    that instruction's source location (errors about it point at the user's
    text), and has its uses recorded in :attr:`uses`.
    """

    def __init__(self, computation: Computation, names: NameUniquer) -> None:
        self.uses = Uses(computation)
        self.names = names

    def add(
        self,
        opcode: str,
        shape: Shape,
        operands: Iterable[Instruction] = (),
        attributes: dict | None = None,
        *,
        like: Instruction,
        suffix: str | None = None,
        literal: object = None,
    ) -> Instruction:
        base = f"{like.name}.{suffix}" if suffix else like.name
        return self.uses.add(
            Instruction(
                self.names.unique(base),
                opcode,
                shape,
                operands=list(operands),
                attributes=dict(attributes or {}),
                literal=literal,
                location=like.location,
            )
        )

    def replace(self, old: Instruction, new: Instruction) -> bool:
        return self.uses.replace(old, new)


def rewrite_each(
    module: Module,
    opcode: str | Collection[str],
    rewrite: Callable[[Inserter, Instruction], Instruction | None],
) -> bool:
    """Replace every ``opcode`` instruction (one opcode, or any of several) of ``module``'s
    non-fusion computations by what ``rewrite(inserter, inst)`` builds with the inserter
    (None: keep it), and give each such instruction a rewrite adds the same treatment,
    until none is replaced: a rewrite that splits an instruction in two may leave a part
    that needs splitting again. Returns whether anything changed."""
    opcodes = {opcode} if isinstance(opcode, str) else set(opcode)
    names = module_names(module)
    changed = False
    for computation in non_fusion_computations(module):
        pending = [inst for inst in computation.instructions if inst.opcode in opcodes]
        if not pending:
            continue
        # One inserter for the computation, its uses kept current through every rewrite
        # (building them again for each instruction made the pass quadratic).
        inserter = Inserter(computation, names)
        while pending:
            inst = pending.pop()
            before = set(computation.instructions)
            replacement = rewrite(inserter, inst)
            if replacement is None:
                continue
            inserter.replace(inst, replacement)
            inserter.uses.forget(inst)
            remove_instructions(computation, [inst])
            pending.extend(
                new
                for new in computation.instructions
                if new.opcode in opcodes and new not in before
            )
            changed = True
    return changed


def forward_operands(module: Module, computes_nothing: Callable[[Instruction], bool]) -> bool:
    """Replace every one-operand instruction outside fusion bodies that ``computes_nothing``
    says is its operand (an optimization barrier, a sharding annotation) by that operand,
    and remove it; True when any was."""
    changed = False
    for computation in non_fusion_computations(module):
        forwarded = [i for i in computation.instructions if computes_nothing(i)]
        if not forwarded:
            continue
        uses = Uses(computation)
        for inst in forwarded:
            (operand,) = inst.operands
            uses.replace(inst, operand)
        remove_instructions(computation, forwarded)
        changed = True
    return changed


def rename_control_predecessors(
    instructions: Iterable[Instruction], renamed: dict[str, str]
) -> None:
    """Control edges to an instruction a rewrite replaced name what took its place
    (``renamed``: old name -> new); an edge to itself is dropped, repeats kept once."""
    for inst in instructions:
        refs = inst.attributes.get(CONTROL)
        if isinstance(refs, InstructionRefs) and any(n in renamed for n in refs.names):
            names = (renamed.get(n, n) for n in refs.names)
            inst.attributes[CONTROL] = InstructionRefs(
                tuple(dict.fromkeys(n for n in names if n != inst.name))
            )


def remove_instructions(computation: Computation, dead: Iterable[Instruction]) -> int:
    """Drop ``dead`` from ``computation``; the caller guarantees nothing uses them."""
    doomed = {id(inst) for inst in dead}
    before = len(computation.instructions)
    computation.instructions = [i for i in computation.instructions if id(i) not in doomed]
    return before - len(computation.instructions)


def module_names(module: Module) -> NameUniquer:
    """A name source that knows every instruction and computation name of ``module``.

    HLO names are unique across a module; a pass that creates instructions or
    computations takes its names from here (a view of part of a module knows the
    rest's names too, :attr:`~heron.hlo.ir.Module.names_elsewhere`).
    """
    names = NameUniquer(module.names_elsewhere)
    for computation in module.computations:
        names.reserve(computation.name)
        for inst in computation.instructions:
            names.reserve(inst.name)
    return names


def reachable_computations(module: Module) -> list[Computation]:
    """The computations the entry (and the corpus form's fusion under test) reach, in order."""
    roots = [module.entry]
    if module.fusion_under_test is not None:
        roots.append(module.computation(module.fusion_under_test))
    seen = {id(c) for c in computations_reached(roots)}
    return [c for c in module.computations if id(c) in seen]


def computations_reached(roots: Sequence[Computation]) -> list[Computation]:
    """``roots`` and every computation their instructions call, directly or not, each
    once (depth first)."""
    seen: set[int] = set()
    reached: list[Computation] = []
    stack = list(roots)
    while stack:
        computation = stack.pop()
        if id(computation) in seen:
            continue
        seen.add(id(computation))
        reached.append(computation)
        for inst in computation.instructions:
            stack.extend(inst.called_computations())
    return reached


def non_fusion_computations(module: Module) -> list[Computation]:
    """The computations passes rewrite: every one but the bodies of ``fusion`` instructions.

    A fusion's body is the emitters' input, decided by the fusion passes; as in
    XLA, the simplification passes leave it alone.
    """
    fused: set[int] = set()
    for computation in module.computations:
        for inst in computation.instructions:
            if inst.opcode == "fusion":
                fused.update(id(called) for called in inst.called_computations())
    return [c for c in module.computations if id(c) not in fused]
