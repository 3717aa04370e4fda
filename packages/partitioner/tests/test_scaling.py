"""No exponential blow-up: chains of multi-user pads partition into linear size.

Wall-clock time is not asserted (timed tests fail under load and prove
little); a recursive partitioner's blow-up shows in the sizes asserted here,
and benchmarks measure the time.
"""

from __future__ import annotations

import time

from heron.hlo import parse_module
from heron.partitioner import partition


def chained_pads(n: int, size: int = 8) -> str:
    """x_{i+1} = slice(pad(x_i))[0:size] + slice(pad(x_i))[2:size+2]: every pad has two users
    that read it at different indices, so a recursive emitter would emit x_0 2**n times."""
    lines = ["HloModule chained_pads", "", "fused_computation {"]
    lines.append(f"  x0 = f32[{size}] parameter(0)")
    lines.append("  zero = f32[] constant(0)")
    for i in range(n):
        lines.append(f"  pad{i} = f32[{size + 2}] pad(x{i}, zero), padding=1_1")
        lines.append(f"  lo{i} = f32[{size}] slice(pad{i}), slice={{[0:{size}]}}")
        lines.append(f"  hi{i} = f32[{size}] slice(pad{i}), slice={{[2:{size + 2}]}}")
        root = "ROOT " if i == n - 1 else ""
        lines.append(f"  {root}x{i + 1} = f32[{size}] add(lo{i}, hi{i})")
    lines.append("}")
    return "\n".join(lines) + "\n"


def test_thirty_chained_multi_user_pads_partition_into_one_function_per_pad(check, emissions):
    comp = parse_module(chained_pads(30)).computation("fused_computation")
    start = time.perf_counter()
    pc = partition(comp)
    elapsed = time.perf_counter() - start
    print(
        f"partitioned 30 chained multi-user pads ({len(comp.instructions)} instructions,"
        f" {len(pc.subgraphs)} subgraphs) in {elapsed * 1000:.1f} ms"
    )
    check(pc)
    # One function per pad (its two users read it at different indices), the root's, and
    # one for the pad value that all thirty pad functions read.
    assert len(pc.subgraphs) == 32
    assert [i.name for i in pc.subgraph_of("zero").instructions] == ["zero"]
    pad_subgraphs = [s for s in pc.subgraphs if s.roots[0].opcode == "pad"]
    assert len(pad_subgraphs) == 30
    assert all(len(s.instructions) <= 4 for s in pc.subgraphs)
    total = 0
    for sub in pc.subgraphs:
        counts = emissions(sub)
        assert set(counts.values()) == {1}, (sub.name, counts)
        total += sum(counts.values())
    # Every non-parameter instruction emitted exactly once overall.
    assert total == len(comp.instructions) - 1


def test_partition_size_grows_linearly(emissions):
    def size(n: int) -> tuple[int, int]:
        comp = parse_module(chained_pads(n)).computation("fused_computation")
        pc = partition(comp)
        emitted = sum(sum(emissions(sub).values()) for sub in pc.subgraphs)
        return len(pc.subgraphs), emitted

    for n in (20, 80):
        subgraphs, emitted = size(n)
        # One function per pad, the root's and the pad value's; each of the 4n + 1
        # computing instructions emitted once (a recursive emitter would emit 2**n).
        assert subgraphs == n + 2
        assert emitted == 4 * n + 1
