"""The memory module: addressing, counting and the shared-memory sanitizer's bookkeeping."""

from __future__ import annotations

import numpy as np
import pytest

from heron.runtime.interpreter import memory
from heron.runtime.interpreter.engine import Frame, Launch
from heron.runtime.interpreter.errors import SanitizerError
from heron.runtime.interpreter.lanes import LaneSpace
from heron.runtime.interpreter.program import Block, Function, Global, Op, Program, Region
from heron.runtime.interpreter.types import parse_type

LOAD = Op("memref.load", (0, 1), ("memref<64xf32>", "index"), (2,), ("f32",), number=3)
STORE = Op("memref.store", (0, 1, 2), ("f32", "memref<64xf32>", "index"), (), (), number=4)


def frame(blocks: int = 2, threads: int = 64) -> Frame:
    kernel = Function("k", True, Region((Block((), (), ()),)))
    lanes = LaneSpace((blocks, 1, 1), (threads, 1, 1), 0, blocks)
    return Frame(Launch(None, kernel, lanes, {}), kernel)


def shared(f: Frame, type_text: str = "memref<64xf32, #gpu.address_space<workgroup>>"):
    return memory.shared_memref(f.launch, parse_type(type_text), "tile")


def test_several_lanes_matches_a_brute_force_count():
    rng = np.random.default_rng(0)
    for _ in range(20):
        keys = rng.integers(0, 12, 40)
        lanes = rng.integers(0, 5, 40)
        expected = np.array(
            [len(set(lanes[keys == k])) > 1 for k in keys],
            np.bool_,
        )
        assert np.array_equal(memory._several_lanes(keys, lanes), expected)


def test_reads_record_one_reader_or_several():
    f = frame()
    ref = shared(f)
    t = f.lanes.thread_linear
    memory.write(f, STORE, ref, t, t.astype(np.float32))
    memory.barrier(f.launch, np.arange(2))
    # every thread reads its own element, and all of them read element 0 too
    memory.read(f, LOAD, ref, t)
    assert np.array_equal(ref.memory.reader[:, 1:], np.tile(np.arange(1, 64), (2, 1)))
    memory.read(f, LOAD, ref, np.int64(0))
    assert (ref.memory.reader[:, 0] == memory.SEVERAL_LANES).all()
    with pytest.raises(SanitizerError, match="several threads") as info:
        f.mask = t == 0
        memory.write(f, STORE, ref, np.int64(0), np.float32(1))
    assert info.value.kind == "shared-memory-race"


def test_barrier_starts_a_new_interval_for_the_blocks_that_reach_it():
    f = frame()
    ref = shared(f)
    t = f.lanes.thread_linear
    memory.write(f, STORE, ref, t, np.float32(0))
    memory.barrier(f.launch, np.array([1]))  # only block 1
    f.mask = f.lanes.block_in_batch == 1
    memory.read(f, LOAD, ref, 63 - t)
    f.mask = f.lanes.block_in_batch == 0
    with pytest.raises(SanitizerError) as info:
        memory.read(f, LOAD, ref, 63 - t)
    assert info.value.kind == "shared-memory-race"
    assert "block (0, 0, 0) thread (0, 0, 0)" in str(info.value)


def test_a_broadcast_read_of_a_large_batch_is_vectorised():
    """256 blocks of 1024 threads all read one element: no per-key Python work."""
    f = frame(blocks=256, threads=1024)
    ref = shared(f, "memref<4xf32, #gpu.address_space<workgroup>>")
    ref.memory.written[...] = True
    values = memory.read(f, LOAD, ref, np.zeros(f.lanes.size, np.int64))
    assert values.shape == (f.lanes.size,)
    assert (ref.memory.reader[:, 0] == memory.SEVERAL_LANES).all()
    assert (ref.memory.reader[:, 1:] == memory.NO_LANE).all()


def test_vector_write_counts_every_byte_once_and_checks_the_last_index():
    f = frame(blocks=1, threads=16)
    buffer = np.zeros(64 * 4, np.uint8)
    ref = memory.global_memref(buffer, "memref<64xf32>", "out")
    t = f.lanes.thread_linear
    memory.write(f, STORE, ref, t * 4, np.ones((16, 4), np.float32), width=4)
    assert (ref.memory.writes == 1).all()
    with pytest.raises(SanitizerError, match=r"index \[61, 65\)") as info:
        memory.flat_index(f, STORE, ref, [t * 4 + 1], width=4)
    assert info.value.kind == "out-of-bounds"
    assert "thread (15, 0, 0)" in str(info.value)


def test_atomic_targets_refuse_constant_memory():
    f = frame(blocks=1, threads=8)
    program = Program("m", {}, {"g": Global("g", "memref<8xi32>", bytes(32), True)})
    (const,) = memory.globals_of(program).values()
    ref = memory.MemRef(const, parse_type("memref<8xi32>"))
    with pytest.raises(SanitizerError) as info:
        memory.atomic_targets(f, STORE, ref, f.lanes.thread_linear)
    assert info.value.kind == "write-to-constant"


def test_several_lanes_without_a_shared_key_is_all_false():
    rng = np.random.default_rng(1)
    keys = rng.permutation(300)
    lanes = rng.integers(0, 5, 300)
    assert not memory._several_lanes(keys, lanes).any()


def test_reads_are_counted_per_byte_however_they_come():
    """Uniform, sparse and dense reads, and a reset: the per-byte counts are exact."""
    f = frame(blocks=1, threads=64)
    buffer = np.zeros(1024 * 4, np.uint8)
    ref = memory.global_memref(buffer, "memref<1024xf32>", "in")
    expected = np.zeros(1024, np.uint32)
    memory.read(f, LOAD, ref, np.int64(7))  # uniform: 64 lanes, one element
    expected[7] += 64
    sparse = f.lanes.thread_linear * 3  # 64 reads over 1024 elements: counted one by one
    memory.read(f, LOAD, ref, sparse)
    expected[sparse] += 1
    wide = frame(blocks=4, threads=64)
    dense = 500 + wide.lanes.thread_linear % 50  # a window, some elements several times
    memory.read(wide, LOAD, ref, dense)
    np.add.at(expected, dense, 1)
    memory.read(wide, LOAD, ref, dense)  # again: counts add up
    np.add.at(expected, dense, 1)
    assert np.array_equal(ref.memory.reads, np.repeat(expected, 4))
    assert not ref.memory.writes.any()
    memory.read(f, LOAD, ref, np.int64(3))
    ref.memory.reset_counts()
    assert not ref.memory.reads.any()


def test_coalesced_vector_accesses_take_a_slice_and_count_every_byte_once():
    f = frame(blocks=2, threads=64)
    source = np.arange(1024, dtype=np.float32)
    ref_in = memory.global_memref(source.view(np.uint8).copy(), "memref<1024xf32>", "in")
    ref_out = memory.global_memref(np.zeros(4096, np.uint8), "memref<1024xf32>", "out")
    lanes = f.lanes.block_in_batch * 64 + f.lanes.thread_linear
    start = 256
    values = memory.read(f, LOAD, ref_in, start + lanes * 4, width=4)
    assert values.shape == (128, 4)
    assert np.array_equal(values.reshape(-1), source[start : start + 512])
    memory.write(f, STORE, ref_out, start + lanes * 4, values, width=4)
    out = ref_out.elements()[0]
    assert np.array_equal(out[start : start + 512], source[start : start + 512])
    touched = np.zeros(1024, np.uint32)
    touched[start : start + 512] = 1
    assert np.array_equal(ref_in.memory.reads, np.repeat(touched, 4))
    assert np.array_equal(ref_out.memory.writes, np.repeat(touched, 4))
    # Not consecutive (one lane out of step): the same values through the gather.
    shuffled = start + lanes * 4
    shuffled[[3, 4]] = shuffled[[4, 3]]
    again = memory.read(f, LOAD, ref_in, shuffled, width=4)
    assert np.array_equal(again[3], values[4]) and np.array_equal(again[4], values[3])
    assert np.array_equal(ref_in.memory.reads, 2 * np.repeat(touched, 4))


def test_lent_counts_stay_as_they_were_and_cannot_be_changed():
    f = frame(blocks=1, threads=64)
    ref = memory.global_memref(np.zeros(256, np.uint8), "memref<64xf32>", "in")
    memory.read(f, LOAD, ref, f.lanes.thread_linear)
    reads, writes, bits = ref.memory.counts()
    assert (reads == 1).all() and not writes.any() and bits is None
    with pytest.raises(ValueError, match="read-only"):
        reads[0] = 7
    memory.read(f, LOAD, ref, f.lanes.thread_linear)  # counted on a copy
    assert (reads == 1).all()
    assert (ref.memory.reads == 2).all()
    ref.memory.reset_counts()
    assert (reads == 1).all() and not ref.memory.reads.any()
