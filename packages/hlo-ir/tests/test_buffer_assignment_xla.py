"""heron's buffer assignment of XLA's own optimized modules, beside XLA's.

tests/data/buffers/xla holds, for four of the JAX programs, XLA:GPU's
optimized module (``*gpu_after_optimizations.txt``: fused and scheduled) and
XLA's buffer assignment of it (``*buffer-assignment.txt``), from a deviceless
H100 compile (``heron xla FILE.hlo --dump-dir DIR``, jax-cuda13-pjrt 0.12.0.1).
Given the same fusions, heron's peak must not exceed XLA's, counting the
allocations heron models (XLA's tuple index tables and thread-local scalars
are not: docs/buffers.md); and both checkers pass.
"""

from __future__ import annotations

import re
from pathlib import Path

import pytest

from heron.hlo.buffers import assign_buffers
from heron.hlo.parser import parse_module_file

DATA = Path(__file__).parent / "data" / "buffers" / "xla"
PROGRAMS = sorted(p.name.split(".")[0] for p in DATA.glob("*.after_optimizations.txt"))


def xla_modelled_bytes(listing: str) -> tuple[int, int]:
    """(all allocations, those heron models) of an XLA buffer-assignment listing."""
    total = modelled = 0
    for line in listing.splitlines():
        found = re.match(r"allocation \d+: size (\d+), (.*):$", line)
        if found is None:
            continue
        size, rest = int(found.group(1)), found.group(2)
        total += size
        if "thread-local" not in rest and "output shape is |(" not in rest:
            modelled += size
    return total, modelled


def test_the_listing_reader_counts_tuple_tables_apart() -> None:
    listing = (DATA / "jax_adam.buffer-assignment.txt").read_text()
    assert xla_modelled_bytes(listing) == (458776, 458752)  # less one 3-pointer tuple table


@pytest.mark.parametrize("name", PROGRAMS)
def test_xla_modules_need_no_more_than_xla_gives_them(name: str, check_buffers) -> None:
    module = parse_module_file(DATA / f"{name}.after_optimizations.txt")
    check_buffers(module)  # at an odd alignment, to stress the placement
    # For the figure, 64-byte offsets (these modules' temporaries are 2 KiB multiples anyway).
    assignment = assign_buffers(module, alignment=64)
    total, modelled = xla_modelled_bytes((DATA / f"{name}.buffer-assignment.txt").read_text())
    assert assignment.total_bytes <= modelled <= total
