"""Every file of the XLA corpus parses, prints, and parses back to the same module."""

from __future__ import annotations

import os
from pathlib import Path

import pytest

from heron.hlo import parser as parser_module
from heron.hlo.ir import structural_difference
from heron.hlo.parser import parse_module, parse_module_file
from heron.hlo.printer import print_module

CORPUS = Path(os.environ.get("HERON_CORPUS", "/work/shared/corpus")) / "xla"
FILES = sorted(CORPUS.rglob("*.hlo"))


def test_the_corpus_is_there():
    assert len(FILES) >= 100, f"expected the XLA corpus under {CORPUS}"


@pytest.mark.parametrize("path", FILES, ids=lambda p: str(p.relative_to(CORPUS)))
def test_corpus_file_round_trips(path, monkeypatch):
    module = parse_module_file(path)
    text = print_module(module)
    again = parse_module(text, str(path))
    assert structural_difference(module, again) is None
    assert print_module(again) == text

    source = path.read_text()
    has_entry = "ENTRY" in "\n".join(
        line for line in source.splitlines() if not line.lstrip().startswith("//")
    )
    if has_entry:
        assert module.fusion_under_test is None
    else:
        # The last computation is the fusion under test; an ENTRY calls it.
        fusion = module.computations[-2]
        assert module.fusion_under_test == fusion.name
        root = module.entry.root_instruction
        assert root.opcode == "fusion" and root.called("calls") is fusion
        assert [p.shape for p in module.entry.parameters] == [p.shape for p in fusion.parameters]
        if "HloModule" not in source:
            assert module.name == path.stem

    for inst in module.instructions():
        assert inst.parent is not None
        assert all(op.parent is inst.parent for op in inst.operands)
        if inst.parent is not module.entry or module.fusion_under_test is None:
            assert inst.location is not None and inst.location.file == str(path)
            assert inst.name in inst.location.line_text

    monkeypatch.setattr(parser_module, "_USE_FAST_PATH", False)
    slow = parse_module_file(path)
    assert structural_difference(module, slow) is None
    assert [i.location for i in module.instructions()] == [i.location for i in slow.instructions()]
