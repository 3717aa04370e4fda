"""Random fusions (elementwise, transpose, broadcast, slice, pad, reshape, reverse with
multi-user nodes), written as HLO text and parsed: the invariants hold and, outside epilogues,
no instruction is emitted twice."""

from __future__ import annotations

from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from heron.hlo import parse_module
from heron.partitioner import partition

N = 4  # every main node is f32[N,N], so any two can be combined


def build(ops: list[tuple[str, int, int, int]]) -> str:
    lines = ["HloModule random_dag", "", "fused_computation {"]
    lines.append(f"  p0 = f32[{N},{N}] parameter(0)")
    lines.append(f"  p1 = f32[{N},{N}] parameter(1)")
    lines.append("  zero = f32[] constant(0)")
    nodes = ["p0", "p1"]
    used: set[str] = set()
    for k, (kind, a, b, c) in enumerate(ops):
        x, y = nodes[a % len(nodes)], nodes[b % len(nodes)]
        name = f"n{k}"
        shape = f"f32[{N},{N}]"
        if kind == "unary":
            op = ("negate", "exponential", "abs")[c % 3]
            lines.append(f"  {name} = {shape} {op}({x})")
            used.add(x)
        elif kind == "binary":
            op = ("add", "multiply", "subtract")[c % 3]
            lines.append(f"  {name} = {shape} {op}({x}, {y})")
            used.update((x, y))
        elif kind == "transpose":
            lines.append(f"  {name} = {shape} transpose({x}), dimensions={{1,0}}")
            used.add(x)
        elif kind == "reverse":
            lines.append(f"  {name} = {shape} reverse({x}), dimensions={{{c % 2}}}")
            used.add(x)
        elif kind == "broadcast":
            # reshape to 1-D, slice a row's worth, broadcast back along one dimension.
            start = c % (N * N - N + 1)
            lines.append(f"  {name}_r = f32[{N * N}] reshape({x})")
            lines.append(f"  {name}_s = f32[{N}] slice({name}_r), slice={{[{start}:{start + N}]}}")
            lines.append(f"  {name} = {shape} broadcast({name}_s), dimensions={{{c % 2}}}")
            used.add(x)
        else:  # pad then slice back to N x N: a shifted window with zeros coming in
            lo, off = c % 3, (c // 3) % 3
            lines.append(
                f"  {name}_p = f32[{N + 2},{N + 2}] pad({x}, zero), padding={lo}_{2 - lo}x1_1"
            )
            lines.append(
                f"  {name} = {shape} slice({name}_p), slice={{[{off}:{off + N}], [1:{N + 1}]}}"
            )
            used.update((x, "zero"))
        nodes.append(name)
    sinks = [n for n in nodes[2:] if n not in used] or [nodes[-1]]
    if len(sinks) == 1:
        lines[-1] = lines[-1].replace(f"  {sinks[0]} =", f"  ROOT {sinks[0]} =", 1)
        if not lines[-1].lstrip().startswith("ROOT"):
            lines.append(f"  ROOT root = f32[{N},{N}] copy({sinks[0]})")
    else:
        shapes = ", ".join(f"f32[{N},{N}]" for _ in sinks)
        lines.append(f"  ROOT root = ({shapes}) tuple({', '.join(sinks)})")
    lines.append("}")
    return "\n".join(lines) + "\n"


KINDS = st.sampled_from(["unary", "binary", "binary", "transpose", "reverse", "broadcast", "pad"])
OPS = st.lists(
    st.tuples(KINDS, st.integers(0, 10**6), st.integers(0, 10**6), st.integers(0, 10**6)),
    min_size=1,
    max_size=14,
)


# The fixtures only hand out pure functions, so sharing them between examples is safe.
@settings(
    max_examples=150,
    deadline=None,
    suppress_health_check=[HealthCheck.too_slow, HealthCheck.function_scoped_fixture],
)
@given(ops=OPS, data=st.data())
def test_random_fusions_partition_without_emitting_anything_twice(ops, data, check, emissions):
    text = build(ops)
    comp = parse_module(text).computation("fused_computation")
    pc = partition(comp)
    check(pc)
    assert not pc.duplicated
    for sub in pc.subgraphs:
        counts = emissions(sub)
        assert set(counts.values()) == {1}, f"{sub.name}: {counts}\n{text}\n{pc.describe()}"

    # The same graph with a random set of transposes as heroes: invariants still hold.
    transposes = [i for i in comp.instructions if i.opcode == "transpose"]
    if transposes:
        heroes = data.draw(st.lists(st.sampled_from(transposes), min_size=1, unique=True))
        with_heroes = partition(comp, heroes=heroes)
        check(with_heroes)
        for sub in with_heroes.main_subgraphs:
            assert set(emissions(sub).values()) == {1}, sub.name
