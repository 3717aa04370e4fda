"""Every file of the XLA corpus parses, prints, and parses back to the same module."""

from __future__ import annotations

from heron.hlo import parser as parser_module
from heron.hlo.ir import structural_difference
from heron.hlo.parser import parse_module, parse_module_file
from heron.hlo.printer import print_module


def test_the_corpus_is_there(corpus_dir):
    assert len(list(corpus_dir.rglob("*.hlo"))) >= 100, (
        f"expected the XLA corpus under {corpus_dir}"
    )


def test_corpus_file_round_trips(corpus_file, monkeypatch):
    path = corpus_file
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
