"""KeptPostOrder: after each install, the order ``Computation.post_order`` makes of the
list the install left, without walking the computation."""

from __future__ import annotations

import random

import pytest

from heron.compiler.fusion import kept_post_order as kept_module
from heron.compiler.fusion.kept_post_order import KeptPostOrder
from heron.hlo.ir import Computation, Instruction


def _random_computation(rng: random.Random, size: int) -> Computation:
    """A DAG in a random topological order: a few parameters, then instructions reading
    one to three earlier ones; the root reads the last few."""
    computation = Computation("random")
    made: list[Instruction] = []
    for k in range(size):
        if k < 3:
            inst = Instruction(name=f"p{k}", opcode="parameter", shape=None)
        else:
            reads = rng.sample(made, min(len(made), rng.randint(1, 3)))
            inst = Instruction(name=f"i{k}", opcode="add", shape=None, operands=reads)
        made.append(inst)
        computation.add(inst)
    root = Instruction(name="root", opcode="tuple", shape=None, operands=made[-4:])
    computation.add(root)
    computation.root = root
    return computation


def _users(computation: Computation) -> dict[int, list[Instruction]]:
    users: dict[int, list[Instruction]] = {}
    for inst in computation.instructions:
        for operand in inst.operands:
            users.setdefault(id(operand), [])
            if inst not in users[id(operand)]:
                users[id(operand)].append(inst)
    return users


def _reaches(a: Instruction, b: Instruction) -> bool:
    """Whether ``b`` depends on ``a``."""
    stack, seen = list(b.operands), set()
    while stack:
        inst = stack.pop()
        if inst is a:
            return True
        if id(inst) not in seen:
            seen.add(id(inst))
            stack.extend(inst.operands)
    return False


def _members(rng: random.Random, computation: Computation) -> list[Instruction] | None:
    """Two instructions a merge could take without making a cycle: a producer with a
    user it reaches by no other path, or two independent siblings."""
    candidates = [i for i in computation.instructions if i.opcode in ("add", "fusion")]
    if len(candidates) < 2:
        return None
    a, b = rng.sample(candidates, 2)
    if _reaches(b, a):
        a, b = b, a
    if _reaches(a, b):
        if a not in b.operands:
            return None
        if any(op is not a and _reaches(a, op) for op in b.operands):
            return None  # another path from a into b: the merge would be a cycle
    return [a, b]


def _install(rng: random.Random, computation: Computation, members: list[Instruction], step: int):
    """What ``install_fusion`` does to the list, by hand: the fusion just after one of
    the members, a get-tuple-element per output appended, readers redirected, members
    out. Returns (gone, new, readers)."""
    users = _users(computation)
    inside = {id(m) for m in members}
    operands: list[Instruction] = []
    for member in members:
        for operand in member.operands:
            if id(operand) not in inside and operand not in operands:
                operands.append(operand)
    outputs = [
        m
        for m in members
        if m is computation.root or any(id(u) not in inside for u in users.get(id(m), []))
    ]
    fusion = Instruction(name=f"fusion{step}", opcode="fusion", shape=None, operands=operands)
    anchor = rng.choice(members)
    listed = computation.instructions
    listed.insert(listed.index(anchor) + 1, fusion)
    new = [fusion]
    readers: list[Instruction] = []
    for index, output in enumerate(outputs):
        value = fusion
        if len(outputs) > 1:
            value = Instruction(
                name=f"gte{step}.{index}", opcode="get-tuple-element", shape=None, operands=[fusion]
            )
            listed.append(value)
            new.append(value)
        for user in users.get(id(output), []):
            if id(user) not in inside:
                user.operands = [value if op is output else op for op in user.operands]
                readers.append(user)
    for member in members:
        listed.remove(member)
    return members, new, readers


def _installs(rng: random.Random, computation: Computation, kept: KeptPostOrder, tries: int):
    """Random installs on ``computation``, each handed to ``kept``: after each, what
    ``post_order`` makes of the list the install left (computed before ``kept`` writes
    its order back)."""
    for step in range(tries):
        members = _members(rng, computation)
        if members is None:
            continue
        gone, new, readers = _install(rng, computation, members, step)
        expected = computation.post_order()
        kept.installed(gone, new, readers)
        yield expected


@pytest.mark.parametrize("seed", range(40))
def test_each_install_leaves_the_post_order_of_the_edited_list(seed: int) -> None:
    rng = random.Random(seed)
    computation = _random_computation(rng, rng.randint(8, 60))
    kept = KeptPostOrder(computation)
    assert kept.order() == computation.post_order()
    installs = 0
    for expected in _installs(rng, computation, kept, 200):
        installs += 1
        assert [i.name for i in kept.order()] == [i.name for i in expected]
        assert computation.instructions == expected  # written back
        places = [kept.place(i) for i in expected]
        assert places == sorted(places) and len(set(places)) == len(places)
        if installs == 12:
            break
    assert installs > 0


def test_a_gap_run_out_renumbers_the_places(monkeypatch: pytest.MonkeyPatch) -> None:
    """With room for no halving, every install that moves something renumbers; the
    order stays the post-order."""
    monkeypatch.setattr(kept_module, "SPACING", 2)
    for seed in range(10):
        rng = random.Random(100 + seed)
        computation = _random_computation(rng, 40)
        kept = KeptPostOrder(computation)
        for expected in _installs(rng, computation, kept, 60):
            assert kept.order() == expected
