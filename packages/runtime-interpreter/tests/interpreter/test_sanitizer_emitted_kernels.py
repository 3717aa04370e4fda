"""The sanitizer against bugs planted in a kernel heron emitted, not one written by hand.

test_sanitizer.py proves each finding on small hand-written kernels. Here the
kernel is what heron makes of a shared-memory transpose (f32[64,96] ->
f32[96,64], the transpose emitter: a tile written to shared memory, a
barrier, the tile read back transposed) at the lower-tensors stage, the
stage the interpreter runs; each test changes it in one place, as a
compiler bug would, and asserts the finding: its kind, the operation, where.

- an out-of-bounds store (the last output store one element further);
- an output element never written (one thread skips a store): no finding is
  raised, the device's write counts show the gap, and the element keeps the
  poison bytes;
- a divergent barrier (only threads below 64 reach it);
- a shared-memory race (the barrier removed);
- a read of shared memory before any write (one store into the tile removed).

The unplanted kernel runs clean and transposes, so each finding is the plant's.
"""

from __future__ import annotations

import re
import sys
from pathlib import Path

import numpy as np
import pytest

from heron.runtime.interpreter.errors import SanitizerError

sys.path.insert(0, str(Path(__file__).parent))
from kernels_for_tests import Ran, run  # noqa: E402

pytest.importorskip("heron.compiler")

ROWS, COLUMNS = 64, 96
SHARED = "#gpu.address_space<workgroup>"

HLO = f"""
HloModule planted_transpose

fused {{
  p0 = f32[{ROWS},{COLUMNS}] parameter(0)
  ROOT t = f32[{COLUMNS},{ROWS}] transpose(p0), dimensions={{1,0}}
}}

ENTRY main {{
  a = f32[{ROWS},{COLUMNS}] parameter(0)
  ROOT f = f32[{COLUMNS},{ROWS}] fusion(a), kind=kInput, calls=fused
}}
"""


@pytest.fixture(scope="module")
def emitted() -> tuple[str, tuple[int, int, int], tuple[int, int, int]]:
    """(lower-tensors text, grid, block) of the transpose as heron compiles it."""
    from heron.compiler import Target
    from heron.compiler.driver import compile_fusion
    from heron.hlo import parse_module

    module = parse_module(HLO)
    (fusion,) = [i for i in module.entry.instructions if i.opcode == "fusion"]
    target = Target.preset("h100")
    kernel = compile_fusion(fusion, target, "interpreter", stop_after="lower-tensors")
    assert kernel.emitter == "transpose"
    text = str(kernel.module)
    assert text.count("gpu.barrier") == 1, "the plants below expect one barrier"
    return text, kernel.grid, kernel.block


def _input() -> np.ndarray:
    return np.arange(ROWS * COLUMNS, dtype=np.float32).reshape(ROWS, COLUMNS)


def _run(emitted, text: str) -> Ran:
    _, grid, block = emitted
    a = _input()
    return run(text, [a], [a.nbytes], grid=grid, block=block)


def _finding(emitted, text: str) -> SanitizerError:
    with pytest.raises(SanitizerError) as info:
        _run(emitted, text)
    return info.value


def _replace_once(text: str, pattern: str, replacement) -> str:
    """``text`` with the one match of ``pattern`` replaced (the plant must find its spot)."""
    matches = list(re.finditer(pattern, text, re.MULTILINE))
    assert matches, f"no {pattern!r} in the emitted kernel:\n{text}"
    match = matches[-1]
    new = replacement(match) if callable(replacement) else match.expand(replacement)
    return text[: match.start()] + new + text[match.end() :]


#: An output store: ``memref.store %v, %arg1[%i] : memref<6144xf32>`` (the last one is planted).
OUTPUT_STORE = (
    r"^(?P<indent> *)memref\.store (?P<value>%\w+), (?P<buffer>%arg1)\[(?P<index>%\w+)\] : "
    r"(?P<type>memref<\d+xf32>)$"
)
#: A store into the shared tile.
SHARED_STORE = r"^ *memref\.store %\w+, %\w+\[%\w+\] : memref<\d+xf32, " + re.escape(SHARED) + ">\n"


def _assert_finding(error: SanitizerError, kind: str, op: str, *where: str) -> str:
    message = str(error)
    assert error.kind == kind, message
    assert f"'{op}'" in message, message
    assert "kernel 'f'" in message, message
    for text in where:
        assert text in message, message
    return message


def test_the_unplanted_kernel_is_clean(emitted):
    ran = _run(emitted, emitted[0])
    got = ran.output(0, np.float32).reshape(COLUMNS, ROWS)
    assert np.array_equal(got, _input().T)
    assert (ran.device.access_counts(ran.buffers[0]).writes == 1).all()


def test_out_of_bounds_store(emitted):
    """The last output store of each thread one element further: the last thread runs off."""
    text = _replace_once(
        emitted[0],
        OUTPUT_STORE,
        lambda m: (
            f"{m['indent']}%plant_one = arith.constant 1 : index\n"
            f"{m['indent']}%plant_index = arith.addi {m['index']}, %plant_one : index\n"
            f"{m['indent']}memref.store {m['value']}, {m['buffer']}[%plant_index] : {m['type']}"
        ),
    )
    size = ROWS * COLUMNS
    message = _assert_finding(
        _finding(emitted, text),
        "out-of-bounds",
        "memref.store",
        f"index {size}",
        f"size {size}",
        "memref<6144xf32>",
    )
    assert re.search(r"block \(\d+, 0, 0\) thread \(\d+, 0, 0\)", message), message


def test_output_element_never_written(emitted):
    """Thread 5 of every block skips its last output store: one element a block is unwritten."""
    text = _replace_once(
        emitted[0],
        OUTPUT_STORE,
        lambda m: (
            f"{m['indent']}%plant_five = arith.constant 5 : index\n"
            f"{m['indent']}%plant_keep = arith.cmpi ne, %thread_id_x, %plant_five : index\n"
            f"{m['indent']}scf.if %plant_keep {{\n"
            f"{m['indent']}  memref.store {m['value']}, {m['buffer']}[{m['index']}] : {m['type']}\n"
            f"{m['indent']}}}"
        ),
    )
    ran = _run(emitted, text)  # no finding: an unwritten element is not a fault
    writes = ran.device.access_counts(ran.buffers[0]).writes.reshape(-1, 4)
    elements = writes.min(axis=1)
    unwritten = np.flatnonzero(elements == 0)
    blocks = int(np.prod(emitted[1]))
    assert unwritten.size == blocks, unwritten  # thread 5 of each block
    assert (np.delete(writes, unwritten, axis=0) == 1).all()
    assert (writes[unwritten] == 0).all()  # no byte of those elements written
    raw = ran.outputs[0].reshape(-1, 4)
    assert (raw[unwritten] == 0xA5).all()  # they keep the poison bytes
    # Exactly the elements where the output differs from the transpose.
    got = ran.output(0, np.float32).reshape(-1)
    assert np.flatnonzero(got != _input().T.reshape(-1)).tolist() == unwritten.tolist()


def test_divergent_barrier(emitted):
    """The barrier inside ``if thread < 64``: threads 64 to 127 never reach it."""
    text = _replace_once(
        emitted[0],
        r"^(?P<indent> *)gpu\.barrier$",
        lambda m: (
            f"{m['indent']}%plant_half = arith.constant 64 : index\n"
            f"{m['indent']}%plant_low = arith.cmpi ult, %thread_id_x, %plant_half : index\n"
            f"{m['indent']}scf.if %plant_low {{\n"
            f"{m['indent']}  gpu.barrier\n"
            f"{m['indent']}}}"
        ),
    )
    _assert_finding(
        _finding(emitted, text),
        "divergent-barrier",
        "gpu.barrier",
        "block (0, 0, 0) thread (64, 0, 0)",
    )


def test_shared_memory_race_without_the_barrier(emitted):
    """No barrier between writing the tile and reading it transposed."""
    text = _replace_once(emitted[0], r"^ *gpu\.barrier\n", "")
    # The tile is 32x33 (padded): thread 1 reads element 33, which thread 32 wrote.
    _assert_finding(
        _finding(emitted, text),
        "shared-memory-race",
        "memref.load",
        "block (0, 0, 0) thread (1, 0, 0)",
        "reads element 33 of shared memory",
        "which thread 32 of the block accessed with no barrier in between",
        SHARED,
    )


def test_shared_read_before_any_write(emitted):
    """The first store into the tile removed: a tile row is read that no thread wrote."""
    stores = re.findall(SHARED_STORE, emitted[0], re.MULTILINE)
    assert len(stores) > 1, emitted[0]
    text = emitted[0].replace(stores[0], "", 1)
    _assert_finding(
        _finding(emitted, text),
        "uninitialised-shared-read",
        "memref.load",
        "block (0, 0, 0) thread (0, 0, 0)",  # thread 0 reads element 0, which nobody wrote
        "that no thread of the block has written",
        SHARED,
    )
