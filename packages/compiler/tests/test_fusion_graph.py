"""FusionGraph's held list edits: a sync leaves the lists as the edits, each made on its
own with a list operation, would have."""

from __future__ import annotations

import random

import pytest

from heron.compiler.fusion import graph as graph_module
from heron.compiler.fusion.graph import FusionGraph, TakenNames
from heron.hlo.ir import Computation, Instruction
from heron.hlo.parser import parse_module

_NEGATES = "".join(f"  n{k} = f32[4]{{0}} negate(p)\n" for k in range(12))
_MODULE = (
    "HloModule edits\n\nENTRY main {\n  p = f32[4]{0} parameter(0)\n"
    + _NEGATES
    + "  ROOT t = f32[4]{0} add(n0, n1)\n}\n"
)


def _instruction(name: str) -> Instruction:
    return Instruction(name=name, opcode="constant", shape=None)


def _random_edits(seed: int, count: int):
    """Edits on a fresh module, made both through a graph and with list operations."""
    module = parse_module(_MODULE)
    computation = module.entry
    graph = FusionGraph(module, computation)
    expected = list(computation.instructions)
    expected_bodies = list(module.computations)
    live = [i for i in computation.instructions if i is not computation.root]
    bodies: list[Computation] = []
    rng = random.Random(seed)
    for step in range(count):
        choice = rng.random()
        if choice < 0.4:
            anchor = rng.choice(live)
            made = _instruction(f"after{step}")
            graph.insert_after(anchor, made)
            graph.add(made, after=anchor)
            expected.insert(expected.index(anchor) + 1, made)
            live.append(made)
        elif choice < 0.55:
            made = _instruction(f"last{step}")
            graph.append(made)
            graph.add(made)
            expected.append(made)
            live.append(made)
        elif choice < 0.8 and len(live) > 1:
            gone = live.pop(rng.randrange(len(live)))
            graph.remove(gone)
            expected.remove(gone)
        elif choice < 0.9 or not bodies:
            body = Computation(f"body{step}")
            graph.add_computation(body)
            expected_bodies.insert(expected_bodies.index(computation), body)
            bodies.append(body)
        else:
            body = bodies.pop(rng.randrange(len(bodies)))
            graph.remove_computation(body)
            expected_bodies.remove(body)
    graph.sync()
    return computation.instructions, expected, module.computations, expected_bodies


@pytest.mark.parametrize("seed", range(40))
@pytest.mark.parametrize("count", [3, 20, 200])
def test_held_edits_leave_the_lists_as_list_operations_do(seed: int, count: int) -> None:
    # a few edits are made one by one at the sync, many in one rebuild of each list
    made, expected, bodies, expected_bodies = _random_edits(seed, count)
    assert [i.name for i in made] == [i.name for i in expected]
    assert [c.name for c in bodies] == [c.name for c in expected_bodies]


def test_many_edits_are_one_rebuild_and_few_are_list_operations(monkeypatch) -> None:
    rebuilt = []
    original = FusionGraph._edited_instructions

    def counted(self):
        rebuilt.append(len(self._edits))
        return original(self)

    monkeypatch.setattr(FusionGraph, "_edited_instructions", counted)
    _random_edits(0, 3)
    assert rebuilt == []
    _random_edits(0, 4 * graph_module._EDITS_MADE_ONE_BY_ONE)
    assert len(rebuilt) == 1


@pytest.mark.parametrize("seed", range(20))
def test_first_free_is_the_lowest_free_suffix(seed: int) -> None:
    # takes and releases in any order, as fusions come and go: the answer is always the
    # lowest free name, as counting up from 1 finds it
    rng = random.Random(seed)
    names = TakenNames()
    held: list[str] = []
    for _ in range(2000):
        if held and rng.random() < 0.45:
            names.release(held.pop(rng.randrange(len(held))))
            continue
        if rng.random() < 0.2:
            name = f"fusion.{rng.randrange(1, 60)}"  # a name chosen elsewhere
        else:
            name = names.first_free("fusion")
            n = 1
            while names.count(f"fusion.{n}") > 0:
                n += 1
            expected = "fusion" if names.count("fusion") == 0 else f"fusion.{n}"
            assert name == expected
        names.take(name)
        held.append(name)
