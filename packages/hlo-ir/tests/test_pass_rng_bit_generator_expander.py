"""rng-bit-generator-expander: XLA's Philox-4x32-10 and Threefry-2x32-20 in plain HLO.

The oracle is XLA:CPU through jax: it runs XLA's RngBitGeneratorExpander, so
its bits are the expansion's. Each case evaluates heron's expansion with the
reference evaluator and compares the new state and the bits byte for byte:
``lax.rng_bit_generator`` for u64[2] states and unsigned outputs, and for what
jax's API does not reach (a u64[3] Philox state, signed and float outputs) the
StableHLO op compiled by jax's CPU client.
"""

from __future__ import annotations

import jax
import numpy as np
import pytest
from heron_test_support.jax_config import jax_x64
from jax import lax

from heron.hlo.errors import UnsupportedError
from heron.hlo.evaluator import evaluate_module
from heron.hlo.parser import parse_module
from heron.hlo.passes import run_pipeline, simplification_pipeline
from heron.hlo.passes.rng_bit_generator_expander import expand_rng_bit_generators

HLO_TYPES = {
    np.uint8: "u8",
    np.uint16: "u16",
    np.uint32: "u32",
    np.uint64: "u64",
    np.int8: "s8",
    np.int16: "s16",
    np.int32: "s32",
    np.int64: "s64",
    np.float16: "f16",
    np.float32: "f32",
    np.float64: "f64",
}
MLIR_TYPES = {
    np.int8: "i8",
    np.int16: "i16",
    np.int32: "i32",
    np.int64: "i64",
    np.uint32: "ui32",
    np.float16: "f16",
    np.float32: "f32",
    np.float64: "f64",
}
LAX_ALGORITHMS = {
    "rng_default": lax.RandomAlgorithm.RNG_DEFAULT,
    "rng_philox": lax.RandomAlgorithm.RNG_PHILOX,
    "rng_three_fry": lax.RandomAlgorithm.RNG_THREE_FRY,
}
MLIR_ALGORITHMS = {"rng_philox": "PHILOX", "rng_three_fry": "THREE_FRY"}

#: States: small, a counter about to wrap (its carry), every bit set.
STATES = (
    (1, 2),
    (0x0123456789ABCDEF, 0xFFFFFFFFFFFFFFFE),
    (2**64 - 1, 2**64 - 1),
)
#: Scalars, one element, sizes that fill no whole Philox block (four u32 words) or
#: Threefry pair, shapes with no even dimension (Threefry splits the longest one),
#: unit dimensions, an empty output.
SHAPES = ((), (1,), (5,), (8,), (3, 5), (2, 3, 4), (7, 1, 3), (0,))


def _name(dtype) -> str:
    return np.dtype(dtype).name


@pytest.fixture(autouse=True)
def x64():
    """u64 states need jax_enable_x64 (a process-wide flag, restored after)."""
    with jax_x64(True):
        yield


def _text(state_size: int, dims: tuple[int, ...], hlo_type: str, algorithm: str) -> str:
    bits = f"{hlo_type}[{','.join(map(str, dims))}]"
    return f"""
HloModule rng
ENTRY main {{
  state = u64[{state_size}] parameter(0)
  ROOT rng = (u64[{state_size}], {bits}) rng-bit-generator(state), algorithm={algorithm}
}}
"""


def _expanded(state, dims, dtype, algorithm: str) -> tuple[np.ndarray, np.ndarray]:
    module = parse_module(_text(len(state), dims, HLO_TYPES[dtype], algorithm))
    assert expand_rng_bit_generators(module)
    assert not [i for i in module.entry.instructions if i.opcode == "rng-bit-generator"]
    new_state, bits = evaluate_module(module, [np.array(state, np.uint64)])
    return np.asarray(new_state), np.asarray(bits)


def _jax_cpu(state, dims, dtype, algorithm: str) -> tuple[np.ndarray, np.ndarray]:
    fn = jax.jit(
        lambda s: lax.rng_bit_generator(s, dims, dtype=dtype, algorithm=LAX_ALGORITHMS[algorithm])
    )
    new_state, bits = fn(np.array(state, np.uint64))
    return np.asarray(new_state), np.asarray(bits)


def _xla_cpu(state, dims, dtype, algorithm: str) -> tuple[np.ndarray, np.ndarray]:
    """The StableHLO op itself, compiled and run by XLA:CPU (jax's CPU client)."""
    from jax._src import xla_bridge
    from jax._src.interpreters import mlir
    from jax._src.lib import xla_client
    from jax._src.lib.mlir import ir

    state_type = f"tensor<{len(state)}xui64>"
    bits_type = f"tensor<{''.join(f'{d}x' for d in dims)}{MLIR_TYPES[dtype]}>"
    text = f"""
module @rng {{
  func.func public @main(%state: {state_type}) -> ({state_type}, {bits_type}) {{
    %0:2 = stablehlo.rng_bit_generator %state, algorithm = {MLIR_ALGORITHMS[algorithm]}
      : ({state_type}) -> ({state_type}, {bits_type})
    return %0#0, %0#1 : {state_type}, {bits_type}
  }}
}}"""
    backend = xla_bridge.get_backend("cpu")
    devices = xla_client.DeviceList(tuple(backend.devices()[:1]))
    with mlir.make_ir_context():
        executable = backend.compile_and_load(
            ir.Module.parse(text), devices, xla_client.CompileOptions()
        )
    results = executable.execute_sharded([jax.device_put(np.array(state, np.uint64))])
    (new_state,), (bits,) = results.disassemble_into_single_device_arrays()
    return np.asarray(new_state), np.asarray(bits)


def _assert_same(actual, expected, dtype) -> None:
    (state, bits), (xla_state, xla_bits) = actual, expected
    assert state.dtype == np.uint64 and state.tobytes() == xla_state.tobytes()
    assert bits.dtype == np.dtype(dtype) and bits.shape == xla_bits.shape
    assert bits.tobytes() == xla_bits.tobytes(), (bits, xla_bits)


@pytest.mark.parametrize("algorithm", sorted(LAX_ALGORITHMS))
@pytest.mark.parametrize("dtype", [np.uint8, np.uint16, np.uint32, np.uint64], ids=_name)
@pytest.mark.parametrize("dims", SHAPES, ids=str)
def test_the_expansion_is_xla_cpus_bits_and_state(algorithm, dtype, dims):
    for state in STATES:
        _assert_same(
            _expanded(state, dims, dtype, algorithm), _jax_cpu(state, dims, dtype, algorithm), dtype
        )


@pytest.mark.parametrize("dims", [(), (3,), (2, 5), (9,)], ids=str)
def test_a_u64_3_philox_state_is_a_128_bit_counter(dims):
    # Element 0 the key, elements 1 and 2 the counter's low and high halves: the low
    # half wraps into the high one.
    for state in ((5, 7, 9), (3, 2**64 - 2, 11), (2**64 - 1, 2**64 - 1, 2**64 - 1)):
        expected = _xla_cpu(state, dims, np.uint32, "rng_philox")
        _assert_same(_expanded(state, dims, np.uint32, "rng_philox"), expected, np.uint32)
    assert expected[0][2] == 0  # the last state's high half wrapped too


@pytest.mark.parametrize("algorithm", sorted(MLIR_ALGORITHMS))
@pytest.mark.parametrize(
    "dtype", [np.int8, np.int16, np.int32, np.int64, np.float16, np.float32, np.float64], ids=_name
)
def test_signed_and_float_outputs_are_the_same_bits(algorithm, dtype):
    state = (0x0123456789ABCDEF, 0xFFFFFFFFFFFFFFFE)
    for dims in ((), (5,), (3, 3)):
        expected = _xla_cpu(state, dims, dtype, algorithm)
        _assert_same(_expanded(state, dims, dtype, algorithm), expected, dtype)


def test_the_evaluator_gives_rng_bit_generator_the_expansions_value():
    module = parse_module(_text(2, (3, 5), "u32", "rng_default"))
    state = (0x0123456789ABCDEF, 0xFFFFFFFFFFFFFFFE)
    new_state, bits = evaluate_module(module, [np.array(state, np.uint64)])
    actual = (np.asarray(new_state), np.asarray(bits))
    _assert_same(actual, _jax_cpu(state, (3, 5), np.uint32, "rng_default"), np.uint32)


def test_the_simplification_pipeline_expands_jax_rbg_keys_in_a_loop():
    def fn(seed):
        key = jax.random.key(seed, impl="rbg")

        def body(_, carry):
            key, total = carry
            key, sub = jax.random.split(key)
            return key, total ^ jax.random.bits(sub, (6,), dtype=jax.numpy.uint32)

        return lax.fori_loop(0, 3, body, (key, jax.numpy.zeros(6, jax.numpy.uint32)))[1]

    seed = np.int32(42)
    module = parse_module(jax.jit(fn).lower(seed).as_text("hlo"))
    run_pipeline(module, simplification_pipeline())
    opcodes = {i.opcode for c in module.computations for i in c.instructions}
    assert "rng-bit-generator" not in opcodes
    assert "while" in opcodes  # the expansion is inside the loop's body
    actual = np.asarray(evaluate_module(module, [seed]))
    assert actual.tobytes() == np.asarray(jax.jit(fn)(seed)).tobytes()


@pytest.mark.parametrize(
    ("state_size", "bits", "algorithm", "why"),
    [
        (3, "u32[4]", "rng_three_fry", "the state of rng_three_fry is u64[2], not u64[3]"),
        (4, "u32[4]", "rng_philox", "is u64[2] or u64[3], not u64[4]"),
        (2, "c64[4]", "rng_default", "c64[4]"),
        (2, "pred[4]", "rng_default", "pred[4]"),
    ],
)
def test_what_xla_does_not_expand_is_refused_by_name(state_size, bits, algorithm, why):
    hlo_type, dims = bits.split("[")
    module = parse_module(_text(state_size, (int(dims[:-1]),), hlo_type, algorithm))
    with pytest.raises(UnsupportedError, match="rng-bit-generator 'rng'") as info:
        expand_rng_bit_generators(module)
    assert why in str(info.value)
    with pytest.raises(UnsupportedError, match="'rng-bit-generator' is not supported") as info:
        evaluate_module(module, [np.zeros(state_size, np.uint64)])
    assert why in str(info.value)
