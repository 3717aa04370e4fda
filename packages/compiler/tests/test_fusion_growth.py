"""A producer fused into a fusion by growing one body in place (:mod:`.growth`).

Growing the user's body or the producer's must give exactly the candidate
``build_fusion([producer, user], [user])`` gives (the same parameters in the same
order, the same instructions in the same order under the same names), a discarded
growth must give the member its body back as it was, and priority fusion must
leave the same module with growth as without.
"""

from __future__ import annotations

import importlib.util
from pathlib import Path

import pytest

from heron.compiler import Target
from heron.compiler.fusion import context as context_module
from heron.compiler.fusion import fusion_pipeline
from heron.compiler.fusion.builder import build_fusion
from heron.compiler.fusion.growth import grow_fusion, grow_producer
from heron.hlo.ir import Instruction, Module
from heron.hlo.parser import parse_module
from heron.hlo.passes import run_pipeline, simplification_pipeline
from heron.hlo.printer import print_computation, print_module

H100 = Target.preset("h100")
ROOT = Path(__file__).resolve().parents[3]


def _random_module(seed: int) -> str:
    """test_fusion_random's random JAX-style module (its file, loaded by path)."""
    path = Path(__file__).with_name("test_fusion_random.py")
    spec = importlib.util.spec_from_file_location("fusion_random_modules", path)
    assert spec is not None and spec.loader is not None
    loaded = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(loaded)
    return loaded.random_module(seed)


def _entry(module: Module, *names: str) -> list[Instruction]:
    by_name = {inst.name: inst for inst in module.entry.instructions}
    return [by_name[name] for name in names]


def _grown_as_built(text: str, producer_name: str, user_name: str, grow=grow_fusion) -> None:
    """Grow and build the same fusion of one module; then give the body back."""
    module = parse_module(text)
    producer, user = _entry(module, producer_name, user_name)
    body = (user if grow is grow_fusion else producer).called("calls")
    before = print_computation(body)
    before_params = [(p, p.name) for p in body.parameters]
    built = build_fusion([producer, user], [user])
    grown = grow(producer, user)
    assert grown is not None
    assert grown.body is body  # grown in place, not cloned
    assert grown.fusion.operands == built.fusion.operands
    assert grown.fusion.name == built.fusion.name
    assert grown.fusion.shape == built.fusion.shape
    built.body.name = body.name  # named in the module when installed
    assert print_computation(grown.body) == print_computation(built.body)
    assert all(inst.parent is body for inst in body.instructions)
    built.discard()
    grown.discard()
    assert print_computation(body) == before
    assert [(p, p.name) for p in body.parameters] == before_params


CHAIN = """HloModule m
fused_p {
  a = f32[8]{0} parameter(0)
  b = f32[8]{0} parameter(1)
  e = f32[8]{0} exponential(a)
  ROOT m = f32[8]{0} multiply(e, b)
}
fused_u {
  x = f32[8]{0} parameter(0)
  y = f32[8]{0} parameter(1)
  s = f32[8]{0} add(x, y)
  ROOT t = f32[8]{0} tanh(s)
}
ENTRY e {
  p0 = f32[8]{0} parameter(0)
  p1 = f32[8]{0} parameter(1)
  p2 = f32[8]{0} parameter(2)
  prod = f32[8]{0} fusion(p0, p1), kind=kLoop, calls=fused_p
  ROOT user = f32[8]{0} fusion(p2, prod), kind=kLoop, calls=fused_u
}"""


def test_a_producer_grown_into_its_user_is_the_body_the_build_makes() -> None:
    # the producer's operands become the first parameters, the user's others follow
    _grown_as_built(CHAIN, "prod", "user")


# Both hold a broadcast of the same scalar (a producer duplicated into each before):
# the build keeps the producer's, and the user's ops over it read that one.
SHARED = """HloModule m
fused_p {
  s = f32[] parameter(0)
  v = f32[212]{0} parameter(1)
  max.12 = f32[212]{0} broadcast(s), dimensions={}
  ROOT add.53 = f32[212]{0} add(v, max.12)
}
fused_u {
  s = f32[] parameter(0)
  p = f32[212]{0} parameter(1)
  max.12 = f32[212]{0} broadcast(s), dimensions={}
  max.13 = f32[212]{0} maximum(max.12, p)
  ROOT r = f32[212]{0} abs(max.13)
}
ENTRY e {
  s = f32[] parameter(0)
  v = f32[212]{0} parameter(1)
  prod = f32[212]{0} fusion(s, v), kind=kLoop, calls=fused_p
  ROOT user = f32[212]{0} fusion(s, prod), kind=kLoop, calls=fused_u
}"""


def test_an_op_of_the_user_equal_to_one_of_the_producer_is_merged_as_the_build_merges() -> None:
    _grown_as_built(SHARED, "prod", "user")


# The same name in both bodies for different ops: the build renames the user's.
RENAMED = """HloModule m
fused_p {
  a = f32[8]{0} parameter(0)
  k = f32[8]{0} exponential(a)
  ROOT param_1 = f32[8]{0} negate(k)
}
fused_u {
  x = f32[8]{0} parameter(0)
  y = f32[8]{0} parameter(1)
  k = f32[8]{0} sine(x)
  ROOT t = f32[8]{0} add(k, y)
}
ENTRY e {
  p0 = f32[8]{0} parameter(0)
  p1 = f32[8]{0} parameter(1)
  prod = f32[8]{0} fusion(p0), kind=kLoop, calls=fused_p
  ROOT user = f32[8]{0} fusion(p1, prod), kind=kLoop, calls=fused_u
}"""


def test_a_name_the_producer_took_is_renamed_in_the_user_and_given_back() -> None:
    _grown_as_built(RENAMED, "prod", "user")


# A plain producer read by the user's root, with an operand the user reads too.
PLAIN = """HloModule m
fused_u {
  x = f32[8]{0} parameter(0)
  y = f32[8]{0} parameter(1)
  n = f32[8]{0} negate(x)
  ROOT t = f32[8]{0} multiply(n, y)
}
ENTRY e {
  p0 = f32[8]{0} parameter(0)
  prod = f32[8]{0} exponential(p0)
  ROOT user = f32[8]{0} fusion(prod, p0), kind=kLoop, calls=fused_u
}"""


def test_a_plain_producer_sharing_an_operand_with_its_user() -> None:
    _grown_as_built(PLAIN, "prod", "user")


@pytest.mark.parametrize("text", [CHAIN, SHARED, RENAMED])
def test_a_producer_grown_by_its_user_is_the_body_the_build_makes(text: str) -> None:
    _grown_as_built(text, "prod", "user", grow_producer)


# The user is a plain op reading the producer twice and an operand the producer reads.
PLAIN_USER = """HloModule m
fused_p {
  a = f32[8]{0} parameter(0)
  b = f32[8]{0} parameter(1)
  e = f32[8]{0} exponential(a)
  ROOT m = f32[8]{0} multiply(e, b)
}
ENTRY e {
  p0 = f32[8]{0} parameter(0)
  p1 = f32[8]{0} parameter(1)
  p2 = pred[8]{0} parameter(2)
  prod = f32[8]{0} fusion(p0, p1), kind=kLoop, calls=fused_p
  ROOT user = f32[8]{0} select(p2, prod, prod)
}"""


# The user's ops over the producer's operands alone equal the producer's own (a
# broadcast and the op over it), merged in a cascade as the build merges them.
CASCADE = """HloModule m
fused_p {
  s = f32[] parameter(0)
  v = f32[64]{0} parameter(1)
  b = f32[64]{0} broadcast(s), dimensions={}
  c = f32[64]{0} multiply(b, v)
  ROOT r = f32[64]{0} exponential(c)
}
fused_u {
  x = f32[64]{0} parameter(0)
  s = f32[] parameter(1)
  v = f32[64]{0} parameter(2)
  b2 = f32[64]{0} broadcast(s), dimensions={}
  c2 = f32[64]{0} multiply(b2, v)
  i = f32[64]{0} iota(), iota_dimension=0
  d = f32[64]{0} add(c2, i)
  ROOT t = f32[64]{0} subtract(x, d)
}
ENTRY e {
  s = f32[] parameter(0)
  v = f32[64]{0} parameter(1)
  prod = f32[64]{0} fusion(s, v), kind=kLoop, calls=fused_p
  ROOT user = f32[64]{0} fusion(prod, s, v), kind=kLoop, calls=fused_u
}"""


@pytest.mark.parametrize("text", [PLAIN_USER, CASCADE])
def test_a_producer_grown_by_a_plain_user_or_with_merges(text: str) -> None:
    _grown_as_built(text, "prod", "user", grow_producer)


def test_a_producer_with_an_op_named_like_its_parameter_is_built_not_grown() -> None:
    module = parse_module(RENAMED.replace("ROOT param_1", "ROOT param_0"))
    producer, user = _entry(module, "prod", "user")
    assert grow_producer(producer, user) is None


def _chain(length: int) -> str:
    """A chain of ``length`` elementwise ops over one f32[1024] (one kernel in the end)."""
    opcodes = ["exponential", "negate", "tanh", "sine"]
    lines = ["HloModule chain", "ENTRY e {", "  v0 = f32[1024]{0} parameter(0)"]
    for n in range(1, length + 1):
        root = "ROOT " if n == length else ""
        lines.append(f"  {root}v{n} = f32[1024]{{0}} {opcodes[n % 4]}(v{n - 1})")
    return "\n".join([*lines, "}"])


def test_a_chain_fused_into_one_kernel_clones_each_op_a_few_times(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    # Each step fuses the kernel grown so far into the next op: the kernel grows in
    # place, so the clones grow with the chain, not with its square (7,634 clones for
    # 240 ops when the user grew, 826 now).
    length = 240
    clones = 0
    clone = Instruction.clone

    def counted(self: Instruction, *args: object, **kwargs: object) -> Instruction:
        nonlocal clones
        clones += 1
        return clone(self, *args, **kwargs)  # type: ignore[arg-type]

    module = parse_module(_chain(length))
    run_pipeline(module, simplification_pipeline())
    monkeypatch.setattr(Instruction, "clone", counted)
    run_pipeline(module, fusion_pipeline(H100))
    assert [inst.opcode for inst in module.entry.instructions] == ["parameter", "fusion"]
    assert clones <= 4 * length


def _fused_text(text: str, grow: bool, monkeypatch: pytest.MonkeyPatch) -> str:
    module = parse_module(text)
    with monkeypatch.context() as patch:
        if not grow:
            patch.setattr(context_module, "grow_fusion", lambda producer, user: None)
            patch.setattr(context_module, "grow_producer", lambda producer, user: None)
        run_pipeline(module, simplification_pipeline())
        run_pipeline(module, fusion_pipeline(H100))
    return print_module(module)


@pytest.mark.parametrize("seed", range(40))
def test_priority_fusion_leaves_the_same_module_grown_as_built(
    seed: int, monkeypatch: pytest.MonkeyPatch
) -> None:
    text = _random_module(seed)
    assert _fused_text(text, True, monkeypatch) == _fused_text(text, False, monkeypatch)


@pytest.mark.parametrize(
    "program",
    ["models/equinox_dp_sgd_per_example_clipping", "programs/mlp_gelu_exact", "chain"],
)
def test_corpus_programs_fuse_the_same_grown_as_built(
    program: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    text = _chain(60) if program == "chain" else (ROOT / program / "module.hlo").read_text()
    assert _fused_text(text, True, monkeypatch) == _fused_text(text, False, monkeypatch)
