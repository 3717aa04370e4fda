"""The scheduler: one order for each sequential computation, chosen for low peak memory.

A schedule fixes when each buffer is born and when it dies, so it decides how
much memory the temporaries need at once. Like XLA's memory scheduler, this
pass builds candidate orders with several algorithms and keeps the one whose
peak (:func:`heron.hlo.buffers.liveness.peak_live_bytes`, over the whole
module) is lowest:

- ``post-order``: depth-first from the root, each instruction after its
  operands and control predecessors (the order the module would run in
  anyway);
- ``list``: a greedy list scheduler that, among the instructions whose
  dependencies have run, takes the one that frees the most bytes net (the
  operand buffers it reads last, minus the new buffers it defines), ties
  going to the post order.

Each computation's instruction list becomes its schedule, the root last, and
the header gets ``is_scheduled=true``, as XLA prints scheduled modules.
Fusion bodies and scalar computations are not scheduled: they are the inside
of one instruction. Run it after copy insertion (it honours the control
predecessors copy insertion adds) and before buffer assignment.
"""

from __future__ import annotations

import heapq
from collections.abc import Callable

from heron.hlo.buffers.dataflow import Dataflow, analyze_dataflow, sequential_computations
from heron.hlo.buffers.liveness import analyze_liveness, control_predecessors, peak_live_bytes
from heron.hlo.errors import HloVerifyError
from heron.hlo.ir import Computation, Instruction, Module
from heron.hlo.passes.registry import hlo_pass
from heron.hlo.passes.rewrite import has_side_effect

__all__ = ["ALGORITHMS", "list_order", "post_order", "schedule_module", "scheduled_peak"]


def _dependencies(computation: Computation) -> dict[int, list[Instruction]]:
    """What each instruction must come after: its operands, its control predecessors,
    and the side-effecting instruction before it in program order (:func:`_effect_chain`)."""
    by_name = {inst.name: inst for inst in computation.instructions}
    deps: dict[int, list[Instruction]] = {}
    for inst in computation.instructions:
        unique: dict[int, Instruction] = {}
        for before in (*inst.operands, *control_predecessors(inst, by_name)):
            unique.setdefault(id(before), before)
        deps[id(inst)] = list(unique.values())
    for earlier, later in _effect_chain(computation, deps):
        if all(before is not earlier for before in deps[id(later)]):
            deps[id(later)].append(earlier)
    return deps


#: Side-effecting opcodes that only order others, with no effect of their own to keep in
#: program order.
_ORDER_ONLY = frozenset({"add-dependency", "domain"})


def _effect_chain(
    computation: Computation, deps: dict[int, list[Instruction]]
) -> list[tuple[Instruction, Instruction]]:
    """Consecutive pairs of the side-effecting instructions (a host callback, an outfeed,
    a loop or call that holds one) in program order: they keep it, as the program ran
    them where it was traced. A walk from the root alone put an operand-less
    ``jax.debug.callback`` before a ``while_loop`` after the loop's own callbacks.

    Program order is the instruction list's, made topological over ``deps`` (a rewrite
    may have appended an instruction that its users precede in the list), so that the
    chain never contradicts a data or control dependency."""
    effectful = _EffectfulComputations()
    effects = [
        inst
        for inst in computation.instructions
        if inst.opcode not in _ORDER_ONLY and effectful.instruction(inst)
    ]
    if len(effects) < 2:
        return []
    # Instructions hash by identity, and these tables live for this call only.
    position = {inst: n for n, inst in enumerate(computation.post_order())}
    waiting = {inst: len(deps[id(inst)]) for inst in computation.instructions}
    users: dict[Instruction, list[Instruction]] = {inst: [] for inst in computation.instructions}
    for inst in computation.instructions:
        for before in deps[id(inst)]:
            users[before].append(inst)
    ready = [(position[i], i.name, i) for i in computation.instructions if not waiting[i]]
    heapq.heapify(ready)
    wanted = set(effects)
    ordered: list[Instruction] = []
    while ready:
        _, _, inst = heapq.heappop(ready)
        if inst in wanted:
            ordered.append(inst)
        for user in users[inst]:
            waiting[user] -= 1
            if not waiting[user]:
                heapq.heappush(ready, (position[user], user.name, user))
    return list(zip(ordered, ordered[1:], strict=False))


class _EffectfulComputations:
    """Whether an instruction has a side effect (:func:`heron.hlo.passes.rewrite.has_side_effect`),
    each called computation looked into once."""

    def __init__(self) -> None:
        self._computations: dict[str, bool] = {}

    def instruction(self, inst: Instruction) -> bool:
        if inst.opcode in ("call", "while", "conditional"):
            return any(self._computation(c) for c in inst.called_computations())
        return has_side_effect(inst)

    def _computation(self, computation: Computation) -> bool:
        known = self._computations.get(computation.name)
        if known is None:
            self._computations[computation.name] = False  # a recursive call: not by itself
            known = any(self.instruction(inst) for inst in computation.instructions)
            self._computations[computation.name] = known
        return known


def post_order(computation: Computation, flow: Dataflow) -> list[Instruction]:
    """Depth-first post order from the root, then whatever the root does not need; root last."""
    deps = _dependencies(computation)
    order: list[Instruction] = []
    done: set[int] = set()
    root = computation.root_instruction
    for start in (root, *computation.instructions):
        if id(start) in done:
            continue
        stack: list[tuple[Instruction, int]] = [(start, 0)]
        visiting = {id(start)}
        while stack:
            inst, k = stack[-1]
            preds = deps[id(inst)]
            if k < len(preds):
                stack[-1] = (inst, k + 1)
                pred = preds[k]
                if id(pred) in visiting:
                    raise HloVerifyError(
                        f"computation '{computation.name}' cannot be scheduled: '{pred.name}'"
                        f" depends on itself through operands or control predecessors",
                        pred.location,
                    )
                if id(pred) not in done:
                    visiting.add(id(pred))
                    stack.append((pred, 0))
                continue
            stack.pop()
            visiting.discard(id(inst))
            if id(inst) not in done:
                done.add(id(inst))
                order.append(inst)
    order.remove(root)
    order.append(root)
    return order


def list_order(computation: Computation, flow: Dataflow) -> list[Instruction]:
    """Greedy: next, the ready instruction that frees the most bytes net (root last)."""
    deps = _dependencies(computation)
    rank = {id(inst): n for n, inst in enumerate(post_order(computation, flow))}
    users: dict[int, list[Instruction]] = {id(i): [] for i in computation.instructions}
    for inst in computation.instructions:
        for before in deps[id(inst)]:
            users[id(before)].append(inst)
    sizes: dict[int, int] = {}
    for value in flow.values:
        buffer = flow.buffer(value.id)
        sizes[buffer] = max(sizes.get(buffer, 0), value.size)
    touches: dict[int, set[int]] = {}
    for inst in computation.instructions:
        touched = set(flow.leaf_buffers(inst))
        for operand in inst.operands:
            touched.update(flow.leaf_buffers(operand))
        touches[id(inst)] = touched
    remaining: dict[int, int] = {}
    for touched in touches.values():
        for buffer in touched:
            remaining[buffer] = remaining.get(buffer, 0) + 1
    root = computation.root_instruction
    # Buffers that outlive this computation (its result, its parameters) are never freed here.
    kept = set(flow.leaf_buffers(root))
    for param in computation.parameters:
        kept.update(flow.leaf_buffers(param))
    born: set[int] = set(kept)
    touchers: dict[int, list[Instruction]] = {}
    for inst in computation.instructions:
        for buffer in touches[id(inst)]:
            touchers.setdefault(buffer, []).append(inst)
    waiting = {id(inst): len(deps[id(inst)]) for inst in computation.instructions}
    # The root waits for everything else, unless something depends on it.
    hold_root = not users[id(root)]
    version = {id(inst): 0 for inst in computation.instructions}
    ready: set[int] = set()
    heap: list[tuple[int, int, int, int]] = []
    by_id = {id(inst): inst for inst in computation.instructions}

    def gain(inst: Instruction) -> int:
        total = 0
        for buffer in touches[id(inst)]:
            if buffer not in born:
                total -= sizes.get(buffer, 0)
            elif remaining[buffer] == 1 and buffer not in kept:
                total += sizes.get(buffer, 0)
        return total

    def push(inst: Instruction) -> None:
        version[id(inst)] += 1
        heapq.heappush(heap, (-gain(inst), rank[id(inst)], version[id(inst)], id(inst)))

    def make_ready(inst: Instruction) -> None:
        if inst is root and hold_root:
            return
        ready.add(id(inst))
        push(inst)

    for inst in computation.instructions:
        if waiting[id(inst)] == 0:
            make_ready(inst)
    order: list[Instruction] = []
    while heap:
        _, _, stamp, key = heapq.heappop(heap)
        if key not in ready or stamp != version[key]:
            continue  # scheduled already, or scored again since
        best = by_id[key]
        ready.discard(key)
        order.append(best)
        # A buffer changes the score of the others touching it only when it is
        # born (they no longer allocate it) or when one toucher is left (it frees it).
        rescore: dict[int, Instruction] = {}
        for buffer in touches[key]:
            remaining[buffer] -= 1
            changed = buffer not in born or remaining[buffer] == 1
            born.add(buffer)
            if changed and buffer not in kept:
                for other in touchers[buffer]:
                    if id(other) in ready:
                        rescore[id(other)] = other
        for other in rescore.values():
            push(other)
        for user in users[key]:
            waiting[id(user)] -= 1
            if waiting[id(user)] == 0:
                make_ready(user)
    if hold_root:
        order.append(root)
    return order


Algorithm = Callable[[Computation, Dataflow], list[Instruction]]

#: The candidate algorithms, by name, in the order ties are broken.
ALGORITHMS: dict[str, Algorithm] = {"post-order": post_order, "list": list_order}


def scheduled_peak(module: Module, flow: Dataflow | None = None) -> int:
    """The peak live bytes of ``module`` under its current instruction order."""
    flow = flow if flow is not None else analyze_dataflow(module)
    return peak_live_bytes(module, flow, analyze_liveness(module, flow))


def apply_schedule(module: Module, algorithm: str) -> None:
    """Order every sequential computation of ``module`` with one algorithm (no header change)."""
    flow = analyze_dataflow(module)
    for computation in sequential_computations(module):
        computation.instructions = ALGORITHMS[algorithm](computation, flow)


@hlo_pass(
    "scheduler", "order each computation for the lowest peak memory; mark the module scheduled"
)
def schedule_module(module: Module) -> bool:
    """Schedule with every algorithm, keep the lowest peak; True when anything changed."""
    flow = analyze_dataflow(module)
    computations = sequential_computations(module)
    before = [list(c.instructions) for c in computations]
    best: tuple[int, list[list[Instruction]]] | None = None
    for algorithm in ALGORITHMS.values():
        orders = [algorithm(c, flow) for c in computations]
        for computation, order in zip(computations, orders):
            computation.instructions = order
        peak = scheduled_peak(module, flow)
        if best is None or peak < best[0]:
            best = (peak, orders)
    assert best is not None
    for computation, order in zip(computations, best[1]):
        computation.instructions = order
    changed = any(
        len(a) != len(c.instructions) or any(x is not y for x, y in zip(a, c.instructions))
        for a, c in zip(before, computations)
    )
    if module.header.get("is_scheduled") is not True:
        module.header = {"is_scheduled": True, **module.header}
        changed = True
    return changed
