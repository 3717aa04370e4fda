"""memref.atomic_rmw and memref.generic_atomic_rmw: contention applied in lane order, exactly."""

from __future__ import annotations

import math
import sys
import zlib
from pathlib import Path

import ml_dtypes
import numpy as np
import pytest

from heron.runtime.interpreter.capture import capture_module
from heron.runtime.interpreter.errors import SanitizerError, UnsupportedOperationError
from heron.runtime.interpreter.semantics import atomics
from heron.runtime.interpreter.semantics.atomics import KIND_NAMES

sys.path.insert(0, str(Path(__file__).parent))
from kernels_for_tests import kernel_text, run  # noqa: E402

BLOCKS, THREADS = 16, 256
LANES = BLOCKS * THREADS


# -- an independent, one-update-at-a-time reference -------------------------------------------


def _signed(value: int, bits: int) -> int:
    value &= (1 << bits) - 1
    return value - (1 << bits) if value >> (bits - 1) else value


def _float_extremum(a, b, larger: bool, propagate: bool):
    if math.isnan(float(a)) or math.isnan(float(b)):
        if propagate:
            return a if math.isnan(float(a)) else b
        return b if math.isnan(float(a)) else a
    if a == b:
        # -0 below +0
        wants_negative = not larger
        return a if bool(np.signbit(a)) == wants_negative else b
    return max(a, b) if larger else min(a, b)


def reference_step(kind: str, current, value, dtype: np.dtype, bits: int):
    """The new value of one update, computed with Python scalars."""
    if kind in ("addf", "mulf"):
        return (current + value if kind == "addf" else current * value).astype(dtype)
    if kind in ("maximumf", "minimumf", "maxnumf", "minnumf"):
        return _float_extremum(current, value, kind.startswith("max"), "imum" in kind)
    a, b = int(current), int(value)
    if kind == "assign":
        result = b
    elif kind in ("maxu", "minu"):
        ua, ub = a & ((1 << bits) - 1), b & ((1 << bits) - 1)
        result = a if (ua >= ub) == (kind == "maxu") else b
        if ua == ub:
            result = a
    else:
        result = {
            "addi": a + b,
            "muli": a * b,
            "andi": a & b,
            "ori": a | b,
            "xori": a ^ b,
            "maxs": max(a, b),
            "mins": min(a, b),
        }[kind]
    return dtype.type(_signed(result, bits))


def reference(kind, memory, keys, values, bits):
    """Every update in lane order: the final memory and what each lane saw."""
    memory = memory.copy()
    seen = np.zeros_like(values)
    for lane, (key, value) in enumerate(zip(keys, values, strict=True)):
        seen[lane] = memory[key]
        memory[key] = reference_step(kind, memory[key], value, memory.dtype, bits)
    return memory, seen


# -- the kernel ----------------------------------------------------------------------------------


def atomic_kernel(kind: str, element: str, slots: int) -> str:
    """Lane (b, t) updates out[idx[b, t]] with vals[b, t]; old[b, t] is what it saw."""
    lanes = f"memref<{BLOCKS}x{THREADS}x{element}>"
    target = f"memref<{slots}x{element}>"
    return kernel_text(
        f"%vals: {lanes}, %idx: memref<{BLOCKS}x{THREADS}xi32>, %out: {target}, %old: {lanes}",
        f"""
      %b = gpu.block_id x
      %t = gpu.thread_id x
      %v = memref.load %vals[%b, %t] : {lanes}
      %i32 = memref.load %idx[%b, %t] : memref<{BLOCKS}x{THREADS}xi32>
      %i = arith.index_cast %i32 : i32 to index
      %o = memref.atomic_rmw {kind} %v, %out[%i] : ({element}, {target}) -> {element}
      memref.store %o, %old[%b, %t] : {lanes}""",
        block=(THREADS, 1, 1),
        grid=(BLOCKS, 1, 1),
    )


def _values(kind: str, dtype: np.dtype, rng: np.random.Generator) -> np.ndarray:
    if dtype.kind == "f" or dtype == ml_dtypes.bfloat16:
        if kind == "mulf":
            values = rng.choice([0.5, 1.0, 2.0, -1.0, 1.0009765625], LANES)
        else:
            values = rng.standard_normal(LANES) * 10.0 ** rng.integers(-3, 4, LANES)
        if kind != "addf" and kind != "mulf":
            values[rng.integers(0, LANES, 8)] = np.nan
            values[rng.integers(0, LANES, 8)] = -0.0
            values[rng.integers(0, LANES, 8)] = 0.0
        return values.astype(dtype)
    info = np.iinfo(dtype)
    return rng.integers(info.min, info.max, LANES, endpoint=True, dtype=np.int64).astype(dtype)


CASES = [
    *((kind, "f32") for kind in ("addf", "mulf", "maximumf", "minimumf", "maxnumf", "minnumf")),
    ("addf", "f16"),
    ("addf", "bf16"),
    ("maximumf", "bf16"),
    ("addf", "f64"),
    *(
        (kind, "i32")
        for kind in ("addi", "muli", "andi", "ori", "xori", "maxs", "mins", "maxu", "minu")
    ),
    ("assign", "i32"),
    ("maxu", "i8"),
    ("minu", "i16"),
    ("addi", "i64"),
    ("muli", "i8"),
]
DTYPES = {
    "f16": np.dtype(np.float16),
    "bf16": np.dtype(ml_dtypes.bfloat16),
    "f32": np.dtype(np.float32),
    "f64": np.dtype(np.float64),
    "i8": np.dtype(np.int8),
    "i16": np.dtype(np.int16),
    "i32": np.dtype(np.int32),
    "i64": np.dtype(np.int64),
}


@pytest.mark.parametrize("slots", [1, 5, 100, LANES], ids=lambda s: f"{s}-slots")
@pytest.mark.parametrize(("kind", "element"), CASES, ids=lambda c: str(c))
def test_atomic_rmw_applies_contended_updates_in_lane_order(kind, element, slots):
    """1 slot: every lane on one address (scan path); 100: rounds; LANES: no contention."""
    dtype = DTYPES[element]
    rng = np.random.default_rng(zlib.crc32(f"{kind} {element} {slots}".encode()))
    values = _values(kind, dtype, rng)
    if slots == LANES:
        keys = rng.permutation(LANES).astype(np.int32)
    else:
        keys = rng.integers(0, slots, LANES).astype(np.int32)
    initial = _values(kind, dtype, rng)[:slots]
    if kind == "mulf":
        initial[:] = 1
    ran = run(
        atomic_kernel(kind, element, slots),
        [values, keys, initial],
        [LANES * dtype.itemsize],
        grid=(BLOCKS, 1, 1),
        block=(THREADS, 1, 1),
        max_lanes=THREADS * 4,
    )
    bits = dtype.itemsize * 8
    expected, seen = reference(kind, initial, keys, values, bits)
    out, old = ran.input(2, dtype), ran.output(0, dtype)
    assert out.tobytes() == expected.tobytes()
    assert old.tobytes() == seen.tobytes()


def test_float_sum_is_sequential_not_pairwise():
    """4096 lanes of 16 blocks add to one address: the exact sequential sum, and each old value."""
    rng = np.random.default_rng(7)
    values = (rng.standard_normal(LANES) * 10.0 ** rng.integers(-4, 5, LANES)).astype(np.float32)
    keys = np.zeros(LANES, np.int32)
    ran = run(
        atomic_kernel("addf", "f32", 1),
        [values, keys, np.zeros(1, np.float32)],
        [LANES * 4],
        grid=(BLOCKS, 1, 1),
        block=(THREADS, 1, 1),
    )
    running = np.float32(0)
    prefix = np.empty(LANES, np.float32)
    for k, v in enumerate(values):
        prefix[k] = running
        running = np.float32(running + v)
    assert ran.input(2, np.float32)[0] == running
    assert np.array_equal(ran.output(0, np.float32), prefix)
    counts = ran.device.access_counts(ran.input_buffers[2])
    assert counts.writes.tolist() == [LANES] * 4
    assert running != np.float32(np.sum(values, dtype=np.float32)), "pick data that tells apart"


def test_kind_numbers_match_what_capture_gives():
    for number, kind in enumerate(KIND_NAMES):
        element = "f32" if kind.endswith("f") else "i32"
        text = kernel_text(
            f"%a: memref<4x{element}>, %v: memref<1x{element}>",
            f"""
      %c0 = arith.constant 0 : index
      %x = memref.load %v[%c0] : memref<1x{element}>
      %o = memref.atomic_rmw {kind} %x, %a[%c0] : ({element}, memref<4x{element}>) -> {element}""",
        )
        (op,) = [op for _, op in capture_module(text).walk() if op.name == "memref.atomic_rmw"]
        assert op.attributes["kind"] == number, kind


PACKED = kernel_text(
    "%mask: memref<64xi8>, %bits: memref<64xi8>, %idx: memref<64xi32>, %out: memref<16xi8>",
    """
      %t = gpu.thread_id x
      %m = memref.load %mask[%t] : memref<64xi8>
      %s = memref.load %bits[%t] : memref<64xi8>
      %i32 = memref.load %idx[%t] : memref<64xi32>
      %i = arith.index_cast %i32 : i32 to index
      %a = memref.atomic_rmw andi %m, %out[%i] : (i8, memref<16xi8>) -> i8
      %o = memref.atomic_rmw ori %s, %out[%i] : (i8, memref<16xi8>) -> i8""",
)


def test_packed_stores_count_each_cleared_bit_once():
    """Two-bit elements: 64 threads write the 4 fields of 16 bytes with andi + ori."""
    t = np.arange(64)
    field = t // 16  # threads 0-15 write field 0 of bytes 0-15, and so on
    shift = (2 * field).astype(np.uint8)
    mask = (~(np.uint8(3) << shift)).astype(np.uint8).view(np.int8)
    bits = ((t % 4).astype(np.uint8) << shift).astype(np.uint8).view(np.int8)
    idx = (t % 16).astype(np.int32)
    ran = run(PACKED, [mask, bits, idx], [16])
    counts = ran.device.access_counts(ran.buffers[0])
    assert counts.bit_writes is not None
    assert counts.bit_writes.shape == (16, 8)
    assert counts.bit_writes.min() == counts.bit_writes.max() == 1
    assert np.array_equal(counts.writes, np.full(16, 8))  # 4 fields x (andi + ori)
    expected = np.zeros(16, np.uint8)
    for k in range(64):
        expected[idx[k]] = (expected[idx[k]] & mask.view(np.uint8)[k]) | bits.view(np.uint8)[k]
    # the poison byte 0xA5 is fully cleared by the four andi masks
    assert np.array_equal(ran.outputs[0], expected)


def test_packed_store_that_misses_a_field_shows_in_bit_counts():
    t = np.arange(64)
    field = np.minimum(t // 16, 2)  # nobody writes field 3; field 2 written twice
    shift = (2 * field).astype(np.uint8)
    mask = (~(np.uint8(3) << shift)).astype(np.uint8).view(np.int8)
    bits = np.zeros(64, np.int8)
    ran = run(PACKED, [mask, bits, (t % 16).astype(np.int32)], [16])
    bit_writes = ran.device.access_counts(ran.buffers[0]).bit_writes
    assert np.array_equal(bit_writes[:, :4], np.ones((16, 4)))
    assert np.array_equal(bit_writes[:, 4:6], np.full((16, 2), 2))
    assert np.array_equal(bit_writes[:, 6:], np.zeros((16, 2)))


SHARED_HISTOGRAM = kernel_text(
    "%idx: memref<256xi32>, %out: memref<8xi32>",
    """
      %t = gpu.thread_id x
      %c1 = arith.constant 1 : i32
      %c8 = arith.constant 8 : index
      %zero = arith.constant 0 : i32
      %small = arith.cmpi ult, %t, %c8 : index
      scf.if %small {
        memref.store %zero, %hist[%t] : memref<8xi32, #gpu.address_space<workgroup>>
      }
      BARRIER1
      %i32 = memref.load %idx[%t] : memref<256xi32>
      %i = arith.index_cast %i32 : i32 to index
      %o = memref.atomic_rmw addi %c1, %hist[%i]
        : (i32, memref<8xi32, #gpu.address_space<workgroup>>) -> i32
      BARRIER2
      scf.if %small {
        %h = memref.load %hist[%t] : memref<8xi32, #gpu.address_space<workgroup>>
        memref.store %h, %out[%t] : memref<8xi32>
      }""",
    block=(256, 1, 1),
    workgroup="%hist: memref<8xi32, #gpu.address_space<workgroup>>",
)


INIT_STORE = "memref.store %zero, %hist[%t] : memref<8xi32, #gpu.address_space<workgroup>>"


def _histogram(first: str, second: str, initialise: bool = True):
    idx = (np.arange(256) * 7 % 8).astype(np.int32)
    text = SHARED_HISTOGRAM.replace("BARRIER1", first).replace("BARRIER2", second)
    if not initialise:
        text = text.replace(INIT_STORE, "")
    return run(text, [idx], [32], block=(256, 1, 1)), idx


def test_shared_memory_histogram_with_barriers():
    ran, idx = _histogram("gpu.barrier", "gpu.barrier")
    assert np.array_equal(ran.output(0, np.int32), np.bincount(idx, minlength=8))


def test_shared_atomic_on_unwritten_element_is_reported():
    with pytest.raises(SanitizerError) as info:
        _histogram("gpu.barrier", "gpu.barrier", initialise=False)
    assert info.value.kind == "uninitialised-shared-read"
    assert "memref.atomic_rmw" in str(info.value)


def test_atomic_racing_with_a_plain_store_is_reported():
    with pytest.raises(SanitizerError) as info:
        _histogram("", "gpu.barrier")
    assert info.value.kind == "shared-memory-race"
    message = str(info.value)
    # thread 1 updates element 7 (idx = 7 t % 8), which thread 7 stored with no barrier
    assert "memref.atomic_rmw" in message and "thread (1, 0, 0)" in message
    assert "element 7 of shared memory" in message and "which thread 7 of the block" in message


def test_plain_read_racing_with_atomics_is_reported():
    with pytest.raises(SanitizerError) as info:
        _histogram("gpu.barrier", "")
    assert info.value.kind == "shared-memory-race"
    assert "'memref.load'" in str(info.value)
    assert "atomic updates of other threads" in str(info.value)


def test_private_memory_atomic():
    text = kernel_text(
        "%out: memref<64xi32>",
        """
      %t = gpu.thread_id x
      %c0 = arith.constant 0 : index
      %p = memref.alloca() : memref<1xi32, #gpu.address_space<private>>
      %ti = arith.index_cast %t : index to i32
      memref.store %ti, %p[%c0] : memref<1xi32, #gpu.address_space<private>>
      %o = memref.atomic_rmw muli %ti, %p[%c0]
        : (i32, memref<1xi32, #gpu.address_space<private>>) -> i32
      %n = memref.load %p[%c0] : memref<1xi32, #gpu.address_space<private>>
      %s = arith.addi %o, %n : i32
      memref.store %s, %out[%t] : memref<64xi32>""",
    )
    t = np.arange(64, dtype=np.int32)
    assert np.array_equal(run(text, [], [256]).output(0, np.int32), t + t * t)


def test_masked_atomics_update_only_active_lanes():
    text = kernel_text(
        "%out: memref<1xi32>, %old: memref<64xi32>",
        """
      %t = gpu.thread_id x
      %c0 = arith.constant 0 : index
      %c3 = arith.constant 3 : index
      %zero = arith.constant 0 : i32
      %first = arith.cmpi eq, %t, %c0 : index
      scf.if %first {
        memref.store %zero, %out[%c0] : memref<1xi32>
      }
      gpu.barrier
      %r = arith.remui %t, %c3 : index
      %pick = arith.cmpi eq, %r, %c0 : index
      %ti = arith.index_cast %t : index to i32
      %o = scf.if %pick -> i32 {
        %x = memref.atomic_rmw addi %ti, %out[%c0] : (i32, memref<1xi32>) -> i32
        scf.yield %x : i32
      } else {
        scf.yield %zero : i32
      }
      memref.store %o, %old[%t] : memref<64xi32>""",
    )
    ran = run(text, [], [4, 256])
    t = np.arange(64)
    picked = t[t % 3 == 0]
    assert ran.output(0, np.int32)[0] == picked.sum()
    expected_old = np.zeros(64, np.int32)
    expected_old[picked] = np.concatenate([[0], np.cumsum(picked)[:-1]])
    assert np.array_equal(ran.output(1, np.int32), expected_old)
    assert ran.device.access_counts(ran.buffers[0]).writes.tolist() == [1 + picked.size] * 4


def test_atomic_index_out_of_bounds_names_the_thread():
    text = kernel_text(
        "%out: memref<32xf32>",
        """
      %t = gpu.thread_id x
      %one = arith.constant 1.0 : f32
      %o = memref.atomic_rmw addf %one, %out[%t] : (f32, memref<32xf32>) -> f32""",
    )
    with pytest.raises(SanitizerError) as info:
        run(text, [], [128])
    assert info.value.kind == "out-of-bounds"
    message = str(info.value)
    assert "kernel 'k'" in message and "memref.atomic_rmw" in message
    assert "thread (32, 0, 0)" in message and "index 32" in message


def test_atomic_kind_on_the_wrong_element_type_is_refused():
    text = kernel_text(
        "%out: memref<4xf32>",
        """
      %c0 = arith.constant 0 : index
      %one = arith.constant 1.0 : f32
      %o = memref.atomic_rmw assign %one, %out[%c0] : (f32, memref<4xf32>) -> f32""",
    )
    assert run(text, [], [16]).output(0, np.float32)[0] == 1.0
    program = capture_module(text)
    (op,) = [op for _, op in program.walk() if op.name == "memref.atomic_rmw"]
    with pytest.raises(UnsupportedOperationError, match="atomic 'ori' on f32"):

        class _Frame:  # only what _element_of reads on failure
            def unsupported(self, op, why):
                return UnsupportedOperationError(f"{op.describe()}: {why}")

        atomics._element_of(_Frame(), op, atomics.parse_type("memref<4xf32>"), "ori")


# -- generic_atomic_rmw ----------------------------------------------------------------------


GENERIC_MAX = kernel_text(
    f"%vals: memref<{BLOCKS}x{THREADS}xi32>, %out: memref<1xi32>,"
    f" %old: memref<{BLOCKS}x{THREADS}xi32>",
    f"""
      %b = gpu.block_id x
      %t = gpu.thread_id x
      %c0 = arith.constant 0 : index
      %v = memref.load %vals[%b, %t] : memref<{BLOCKS}x{THREADS}xi32>
      %o = memref.generic_atomic_rmw %out[%c0] : memref<1xi32> {{
      ^bb0(%cur: i32):
        %gt = arith.cmpi sgt, %v, %cur : i32
        %n = arith.select %gt, %v, %cur : i32
        memref.atomic_yield %n : i32
      }}
      memref.store %o, %old[%b, %t] : memref<{BLOCKS}x{THREADS}xi32>""",
    block=(THREADS, 1, 1),
    grid=(BLOCKS, 1, 1),
)


def test_generic_atomic_max_under_full_contention():
    rng = np.random.default_rng(3)
    values = rng.integers(-(2**31), 2**31, LANES, dtype=np.int64).astype(np.int32)
    start = np.full(1, -(2**31), np.int32)
    ran = run(GENERIC_MAX, [values, start], [LANES * 4], grid=(BLOCKS, 1, 1), block=(THREADS, 1, 1))
    running = np.maximum.accumulate(np.concatenate([start, values]))
    assert ran.input(1, np.int32)[0] == running[-1] == values.max()
    assert np.array_equal(ran.output(0, np.int32), running[:-1])


CAS_LOOP = kernel_text(
    "%vals: memref<64xi32>, %out: memref<1xi32>, %tries: memref<64xi32>",
    """
      %t = gpu.thread_id x
      %c0 = arith.constant 0 : index
      %zero = arith.constant 0 : i32
      %one = arith.constant 1 : i32
      %first = arith.cmpi eq, %t, %c0 : index
      scf.if %first {
        memref.store %zero, %out[%c0] : memref<1xi32>
      }
      gpu.barrier
      %v = memref.load %vals[%t] : memref<64xi32>
      %expected0 = memref.load %out[%c0] : memref<1xi32>
      %done:2 = scf.while (%expected = %expected0, %n = %zero) : (i32, i32) -> (i32, i32) {
        %desired = arith.addi %expected, %v : i32
        %seen = memref.generic_atomic_rmw %out[%c0] : memref<1xi32> {
        ^bb0(%cur: i32):
          %same = arith.cmpi eq, %cur, %expected : i32
          %new = arith.select %same, %desired, %cur : i32
          memref.atomic_yield %new : i32
        }
        %n1 = arith.addi %n, %one : i32
        %retry = arith.cmpi ne, %seen, %expected : i32
        scf.condition(%retry) %seen, %n1 : i32, i32
      } do {
      ^bb0(%e: i32, %k: i32):
        scf.yield %e, %k : i32, i32
      }
      memref.store %done#1, %tries[%t] : memref<64xi32>""",
)


def test_compare_and_swap_loop_under_full_contention():
    """Every lane retries until its CAS wins; in lane order, lane k wins on try k + 1."""
    values = (np.arange(64, dtype=np.int32) * 37 + 11) % 1000
    ran = run(CAS_LOOP, [values], [4, 256])
    assert ran.output(0, np.int32)[0] == values.sum()
    assert np.array_equal(ran.output(1, np.int32), np.arange(1, 65))
