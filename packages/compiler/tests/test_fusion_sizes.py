"""The size of a fusion told without building it (:mod:`heron.compiler.fusion.sizes`).

The passes refuse a merge over MAX_FUSED_INSTRUCTIONS by this count instead of
building it, so it must be the built body's own, exactly: a count too low builds
what the checker refuses (time only), one too high refuses a fusion XLA makes.
"""

from __future__ import annotations

import importlib
from pathlib import Path

import pytest

from heron.compiler import Target
from heron.compiler.fusion import context as context_module
from heron.compiler.fusion import fusion_pipeline, gpu_pipeline
from heron.compiler.fusion.builder import build_fusion
from heron.compiler.fusion.fusible import MAX_FUSED_INSTRUCTIONS
from heron.compiler.fusion.sizes import FusionSizes
from heron.hlo.ir import Instruction, Module
from heron.hlo.parser import parse_module
from heron.hlo.passes import Pipeline, run_pipeline, simplification_pipeline

H100 = Target.preset("h100")
ROOT = Path(__file__).resolve().parents[3]


def _entry(module: Module, *names: str) -> list[Instruction]:
    by_name = {inst.name: inst for inst in module.entry.instructions}
    return [by_name[name] for name in names]


def _built_size(members: list[Instruction], outputs: list[Instruction]) -> int:
    candidate = build_fusion(members, outputs)
    try:
        return len(candidate.body.instructions)
    finally:
        candidate.discard()


def test_a_fusion_member_keeps_one_of_equal_ops_and_drops_what_its_root_does_not_read() -> None:
    module = parse_module(
        """HloModule m
fused {
  p0 = f32[8]{0} parameter(0)
  p1 = f32[8]{0} parameter(1)
  a = f32[8]{0} exponential(p0)
  b = f32[8]{0} exponential(p0)
  dead = f32[8]{0} negate(p1)
  ROOT c = f32[8]{0} add(a, b)
}
ENTRY e {
  x = f32[8]{0} parameter(0)
  y = f32[8]{0} parameter(1)
  f = f32[8]{0} fusion(x, y), kind=kLoop, calls=fused
  ROOT n = f32[8]{0} negate(f)
}"""
    )
    f, n = _entry(module, "f", "n")
    # two parameters (kept, unread or not), one exponential, the add
    assert FusionSizes().planned([f], [f]) == 4 == _built_size([f], [f])
    assert FusionSizes().planned([f, n], [n]) == 5 == _built_size([f, n], [n])


def test_siblings_share_their_equal_ops_and_constants_stay_apart() -> None:
    module = parse_module(
        """HloModule m
ENTRY e {
  x = f32[8]{0} parameter(0)
  one = f32[] constant(1)
  b1 = f32[8]{0} broadcast(one), dimensions={}
  e1 = f32[8]{0} exponential(x)
  s1 = f32[8]{0} add(e1, b1)
  e2 = f32[8]{0} exponential(x)
  s2 = f32[8]{0} subtract(e2, b1)
  ROOT t = (f32[8]{0}, f32[8]{0}) tuple(s1, s2)
}"""
    )
    members = _entry(module, "one", "b1", "e1", "s1", "e2", "s2")
    outputs = _entry(module, "s1", "s2")
    # x, the constant, its broadcast, one exponential, the add, the subtract, the tuple
    assert FusionSizes().planned(members, outputs) == 7 == _built_size(members, outputs)


def test_a_multi_output_member_is_read_through_its_get_tuple_elements() -> None:
    module = parse_module(
        """HloModule m
fused {
  p0 = f32[8]{0} parameter(0)
  a = f32[8]{0} exponential(p0)
  b = f32[8]{0} negate(p0)
  c = f32[8]{0} sine(p0)
  ROOT t = (f32[8]{0}, f32[8]{0}, f32[8]{0}) tuple(a, b, c)
}
ENTRY e {
  x = f32[8]{0} parameter(0)
  f = (f32[8]{0}, f32[8]{0}, f32[8]{0}) fusion(x), kind=kLoop, calls=fused
  g0 = f32[8]{0} get-tuple-element(f), index=0
  g1 = f32[8]{0} get-tuple-element(f), index=1
  u = f32[8]{0} add(g0, g1)
  ROOT r = (f32[8]{0}, f32[8]{0}) tuple(u, g1)
}"""
    )
    members = _entry(module, "f", "g0", "g1", "u")
    outputs = _entry(module, "u", "g1")
    # x, the exponential and the negate (the sine unread), the add, the tuple
    assert FusionSizes().planned(members, outputs) == 5 == _built_size(members, outputs)


@pytest.mark.parametrize(
    "path",
    [
        "programs/mlp_gelu_exact/module.hlo",
        "programs/adam_step/module.hlo",
        "programs/dropout_threefry/module.hlo",
        "programs/cnn_train_grad/module.hlo",
        "models/flax_transformer_adamw_step/module.hlo",
    ],
)
def test_every_fusion_the_passes_build_has_the_size_told_before(path: str, monkeypatch) -> None:
    sizes = FusionSizes()
    compared = 0

    def built(members, outputs, **kwargs):
        nonlocal compared
        candidate = build_fusion(members, outputs, **kwargs)
        assert sizes.planned(members, outputs) == len(candidate.body.instructions)
        compared += 1
        return candidate

    monkeypatch.setattr(context_module, "build_fusion", built)
    module = parse_module((ROOT / path).read_text())
    run_pipeline(module, gpu_pipeline(H100))
    assert compared > 0


def _two_chains(length: int) -> str:
    """Two elementwise chains of ``length`` ops reading one parameter: one loop fusion
    each after priority fusion, siblings multi-output fusion may merge."""
    lines = ["HloModule chains", "ENTRY e {", "  p = f32[64]{0} parameter(0)"]
    for side, first in (("a", 0), ("b", 1)):
        previous = "p"
        for k in range(length):
            op = "negate" if (k + first) % 2 else "exponential"
            lines.append(f"  {side}{k} = f32[64]{{0}} {op}({previous})")
            previous = f"{side}{k}"
    last = length - 1
    lines.append(f"  ROOT t = (f32[64]{{0}}, f32[64]{{0}}) tuple(a{last}, b{last})")
    return "\n".join([*lines, "}"])


@pytest.mark.parametrize(("length", "merged"), [(100, True), (MAX_FUSED_INSTRUCTIONS // 2, False)])
def test_siblings_too_large_together_are_refused_without_a_build(length, merged, monkeypatch):
    # sax's lattice: 1,154 such merges built and refused, 900,000 instructions cloned
    module = parse_module(_two_chains(length))
    run_pipeline(module, simplification_pipeline())
    steps = fusion_pipeline(H100).steps
    names = [step.name for step in steps]
    run_pipeline(module, Pipeline("before", steps[: names.index("multi-output-fusion")]))
    assert sum(i.opcode == "fusion" for i in module.entry.instructions) == 2
    builds: list[object] = []
    monkeypatch.setattr(
        context_module,
        "build_fusion",
        lambda *args, **kwargs: builds.append(args) or build_fusion(*args, **kwargs),
    )
    multi_output_fusion = importlib.import_module("heron.compiler.fusion.multi_output_fusion")
    multi_output_fusion.fuse_multi_output(module, H100)
    fusions = [i for i in module.entry.instructions if i.opcode == "fusion"]
    assert len(fusions) == (1 if merged else 2)
    assert len(builds) == (1 if merged else 0)
