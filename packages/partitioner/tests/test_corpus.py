"""Every fusion of the XLA corpus partitions, as a loop fusion and with its hero(es) injected."""

from __future__ import annotations

from pathlib import Path

from heron.hlo import parse_module_file
from heron.hlo.ir import Computation, Module
from heron.partitioner import partition

# Folder -> the opcode of the hero that folder's emitter is built around.
HERO_OPCODES = {
    "concatenate": "concatenate",
    "reduce_column": "reduce",
    "reduce_column_small": "reduce",
    "reduce_multirow": "reduce",
    "reduce_row": "reduce",
    "transpose": "transpose",
}


def fusion_under_test(module: Module) -> Computation:
    if module.fusion_under_test is not None:
        return module.computation(module.fusion_under_test)
    root = module.entry.root_instruction
    if root.opcode == "fusion":
        return root.called("calls")
    # A few corpus files are a bare ENTRY that XLA's tests treat as the fusion itself.
    return module.entry


def test_corpus_fusion_partitions(corpus_file: Path, check):
    comp = fusion_under_test(parse_module_file(corpus_file))
    pc = partition(comp)
    check(pc)
    assert not pc.epilogues and not pc.duplicated

    opcode = HERO_OPCODES.get(corpus_file.parent.name)
    if opcode is not None:
        heroes = [i for i in comp.instructions if i.opcode == opcode]
        assert heroes, f"{corpus_file.name}: no {opcode} in a {corpus_file.parent.name} fusion"
        with_heroes = partition(comp, heroes=heroes)
        check(with_heroes)
        for hero in heroes:
            assert with_heroes.subgraph_of(hero).roots[0] is hero
        text = with_heroes.describe()
        assert all(f"ROOT {hero.name} =" in text for hero in heroes)
