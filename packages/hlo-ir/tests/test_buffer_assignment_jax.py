"""Buffer assignment of JAX programs: both checkers, the listing, and the scheduler's choice.

The modules in tests/data/buffers are JAX's pre-optimization HLO (jax 0.10.2,
``jax.jit(f).lower(*args).compiler_ir("hlo").as_hlo_text()``, made by
``make_jax_programs.py`` there): an MLP with softmax, layernorm, an Adam step,
``lax.scan``, a ``fori_loop`` updating its carry with dynamic-update-slice,
and ``lax.cond``.
"""

from __future__ import annotations

from pathlib import Path

import pytest

from heron.hlo.buffers import assign_buffers
from heron.hlo.parser import parse_module_file
from heron.hlo.passes import run_pipeline, simplification_pipeline
from heron.hlo.passes.scheduler import apply_schedule, scheduled_peak

DATA = Path(__file__).parent / "data" / "buffers"
PROGRAMS = sorted(p.stem for p in DATA.glob("*.hlo"))


def _optimized(name: str):
    module = parse_module_file(DATA / f"{name}.hlo")
    run_pipeline(module, simplification_pipeline())
    return module


@pytest.mark.parametrize("name", PROGRAMS)
def test_jax_program_bytes_never_clash(name: str, check_buffers) -> None:
    assignment = check_buffers(_optimized(name))
    assert assignment.total_bytes == sum(a.size for a in assignment.allocations)
    kinds = {a.kind for a in assignment.allocations}
    assert {"parameter", "output"} <= kinds


@pytest.mark.parametrize("name", PROGRAMS)
def test_jax_program_unoptimized_bytes_never_clash(name: str, check_buffers) -> None:
    """As JAX prints them: calls, tuples and dead code included."""
    check_buffers(parse_module_file(DATA / f"{name}.hlo"), seed=1)


@pytest.mark.parametrize("name", PROGRAMS)
def test_scheduler_peak_is_at_most_post_orders(name: str, prepare_buffers) -> None:
    module = _optimized(name)
    prepare_buffers(module)
    chosen = scheduled_peak(module)
    apply_schedule(module, "post-order")
    assert chosen <= scheduled_peak(module)
    apply_schedule(module, "list")
    assert chosen <= scheduled_peak(module)


def test_fori_loop_updates_its_carry_in_place(prepare_buffers) -> None:
    """The loop's dynamic-update-slice shares the carry's bytes: no copy inside the body."""
    module = _optimized("jax_fori_dus")
    prepare_buffers(module)
    body = next(c for c in module.computations if c.name.startswith("region_0"))
    assert "copy" not in [i.opcode for i in body.instructions]
    assignment = assign_buffers(module, alignment=64)
    (update,) = [i for i in body.instructions if i.opcode == "dynamic-update-slice"]
    carry = body.parameters[0]
    element = update.operands[0]  # the carried array the update writes into
    assert element.opcode == "get-tuple-element" and element.operands[0] is carry
    index = int(element.attr("index"))
    assert assignment.leaf_slices(update)[0] == assignment.leaf_slices(carry)[index]


def test_listing_names_every_allocation_and_the_peak(prepare_buffers) -> None:
    module = _optimized("jax_adam")
    prepare_buffers(module)
    assignment = assign_buffers(module, alignment=64)
    text = assignment.listing()
    assert text.count("\nallocation ") == len(assignment.allocations)
    assert "parameter 3, shape |f32[256,64]{1,0}|" in text
    assert f"Peak memory: {assignment.total_bytes} bytes" in text
    # four 64 KiB parameters, three 64 KiB outputs
    assert assignment.bytes_of("parameter") == 4 * 65536
    assert assignment.bytes_of("output") == 3 * 65536
