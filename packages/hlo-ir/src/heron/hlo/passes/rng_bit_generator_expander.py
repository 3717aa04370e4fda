"""``rng-bit-generator`` becomes plain HLO computing its bits: XLA's RngBitGeneratorExpander.

No emitter generates random bits; XLA (CPU and GPU alike) rewrites each
``rng-bit-generator`` into arithmetic on u32/u64 arrays before code
generation, so the bits a program draws are fixed by that rewrite: jax on
the CPU returns exactly them. heron builds the same arithmetic in place
(elementwise ops, iota, slices, concatenations), so every later pass and
emitter, and the reference evaluator, see ordinary HLO.

``rng_default`` and ``rng_philox`` are Philox-4x32 with 10 rounds (XLA maps
the default to Philox on CPU and GPU); the state is u64[2] or u64[3]:

* element 0 is the key, split into two u32 words (low, high);
* the 128-bit counter is (elements 1, 2) for a u64[3] state (low, high), and
  for a u64[2] state (element 1, element 0): XLA reverses a two-element state,
  so the key doubles as the counter's high half.

Every Philox block (one counter value) gives four u32 words. Block ``i`` uses
the counter plus ``i`` (with the carry into the high half); the words of
block 0 come first, then those of block 1, and so on. A 32-bit output takes
one word per element, a 64-bit output two (low word first), an 8- or 16-bit
output the low bits of one word; the words of the last block that the output
does not fill are dropped, and the flat sequence is reshaped (row-major) to
the output's dimensions; signed and float types are the same bits. The new state keeps
the key and advances the counter by the number of blocks used (for a u64[2]
state only its low half is written back).

``rng_three_fry`` is Threefry-2x32 with 20 rounds on a u64[2] state (the key,
then a 64-bit counter); how its words are laid out is in :func:`_three_fry`.

Other algorithms, other state shapes (XLA rejects them too) and outputs other
than 8-, 16-, 32- and 64-bit integers and floats are refused by name.
"""

from __future__ import annotations

import numpy as np

from heron.hlo.attributes import SliceRange
from heron.hlo.element_types import ElementType
from heron.hlo.errors import UnsupportedError
from heron.hlo.ir import Computation, Instruction, Module
from heron.hlo.passes.registry import hlo_pass
from heron.hlo.passes.rewrite import Inserter, rewrite_each
from heron.hlo.shapes import ArrayShape, TupleShape

__all__ = ["expand_rng_bit_generators", "generator_computation", "refusal"]

#: Philox-4x32 multipliers and Weyl key increments (Salmon et al., "Parallel random
#: numbers: as easy as 1, 2, 3", SC 2011).
_MULTIPLIERS = (0xD2511F53, 0xCD9E8D57)
_KEY_STEPS = (0x9E3779B9, 0xBB67AE85)
_PHILOX_ROUNDS = 10
#: Threefry-2x32 rotation distances, alternating groups of four rounds.
_ROTATIONS = ((13, 15, 26, 6), (17, 29, 16, 24))

_PHILOX = frozenset({"rng_default", "rng_philox"})
_ALGORITHMS = _PHILOX | {"rng_three_fry"}

U32 = ElementType.U32
U64 = ElementType.U64
PRED = ElementType.PRED


@hlo_pass(
    "rng-bit-generator-expander",
    "rng-bit-generator becomes Philox-4x32-10 or Threefry-2x32-20 in plain HLO, XLA's bits",
)
def expand_rng_bit_generators(module: Module) -> bool:
    return rewrite_each(module, "rng-bit-generator", _expand)


def generator_computation(inst: Instruction) -> Computation:
    """A computation of one parameter, ``inst``'s state, computing what ``inst`` does in
    plain HLO: how the reference evaluator gives ``rng-bit-generator`` a value."""
    state = inst.operands[0]
    computation = Computation(f"{inst.name}.generator", is_entry=True)
    parameter = computation.add(
        Instruction(f"{inst.name}.state", "parameter", state.shape, parameter_number=0)
    )
    computation.root = computation.add(
        Instruction(
            inst.name,
            inst.opcode,
            inst.shape,
            operands=[parameter],
            attributes=dict(inst.attributes),
            location=inst.location,
        )
    )
    expand_rng_bit_generators(Module(computation.name, [computation]))
    return computation


class _Builder:
    """Adds instructions named after the rng-bit-generator they stand for."""

    def __init__(self, inserter: Inserter, like: Instruction) -> None:
        self.inserter = inserter
        self.like = like

    def add(self, opcode, shape, operands=(), attributes=None, *, literal=None):
        return self.inserter.add(
            opcode, shape, operands, attributes, like=self.like, suffix="philox", literal=literal
        )

    def constant(self, element_type: ElementType, value: int) -> Instruction:
        literal = np.array(value, dtype=element_type.numpy_dtype)
        return self.add("constant", ArrayShape(element_type, ()), literal=literal)

    def broadcast(self, scalar: Instruction, dims: tuple[int, ...]) -> Instruction:
        shape = ArrayShape(scalar.array_shape.element_type, dims)
        return self.add("broadcast", shape, [scalar], {"dimensions": ()})

    def binary(self, opcode: str, a: Instruction, b: Instruction) -> Instruction:
        if a.array_shape.dims != b.array_shape.dims:
            b = self.broadcast(b, a.array_shape.dims)
        return self.add(opcode, a.array_shape, [a, b])

    def convert(self, x: Instruction, element_type: ElementType) -> Instruction:
        return self.add("convert", ArrayShape(element_type, x.array_shape.dims), [x])

    def element(self, vector: Instruction, index: int) -> Instruction:
        """``vector[index]`` as a scalar."""
        et = vector.array_shape.element_type
        piece = self.add(
            "slice", ArrayShape(et, (1,)), [vector], {"slice": (SliceRange(index, index + 1, 1),)}
        )
        return self.add("reshape", ArrayShape(et, ()), [piece])

    def halves(self, x: Instruction) -> tuple[Instruction, Instruction]:
        """A u64 array's low and high u32 words."""
        high = self.binary("shift-right-logical", x, self.constant(U64, 32))
        return self.convert(x, U32), self.convert(high, U32)

    def join(self, low: Instruction, high: Instruction) -> Instruction:
        """Two u32 arrays as the u64 array ``high << 32 | low``."""
        shifted = self.binary("shift-left", self.convert(high, U64), self.constant(U64, 32))
        return self.binary("or", shifted, self.convert(low, U64))

    def add_u128(
        self, low: Instruction, high: Instruction, amount: Instruction
    ) -> tuple[Instruction, Instruction]:
        """(low, high) + amount, amount a u64 array or scalar; low and high u64 scalars."""
        dims = amount.array_shape.dims
        low_b = self.broadcast(low, dims) if dims else low
        new_low = self.binary("add", amount, low_b)
        pred = ArrayShape(PRED, dims)
        carried = self.add("compare", pred, [new_low, low_b], {"direction": "LT"})
        high_plus = self.binary("add", high, self.constant(U64, 1))
        if dims:
            high, high_plus = self.broadcast(high, dims), self.broadcast(high_plus, dims)
        new_high = self.add("select", ArrayShape(U64, dims), [carried, high_plus, high])
        return new_low, new_high

    def concatenate(self, parts: list[Instruction], dimension: int) -> Instruction:
        first = parts[0].array_shape
        dims = list(first.dims)
        dims[dimension] = sum(p.array_shape.dims[dimension] for p in parts)
        return self.add(
            "concatenate",
            ArrayShape(first.element_type, tuple(dims)),
            parts,
            {"dimensions": (dimension,)},
        )

    def reshape(self, x: Instruction, dims: tuple[int, ...]) -> Instruction:
        return self.add("reshape", ArrayShape(x.array_shape.element_type, dims), [x])


def refusal(inst: Instruction) -> str | None:
    """Why ``inst`` (an ``rng-bit-generator``) cannot be expanded; None when it can."""
    algorithm = inst.attributes.get("algorithm", "rng_default")
    if algorithm not in _ALGORITHMS:
        return (
            f"algorithm={algorithm} is not expanded (heron expands rng_default and"
            " rng_philox, Philox-4x32-10, and rng_three_fry, Threefry-2x32-20)"
        )
    state = inst.operands[0].shape
    sizes = ((2,), (3,)) if algorithm in _PHILOX else ((2,),)
    if (
        not isinstance(state, ArrayShape)
        or state.element_type is not U64
        or state.dims not in sizes
    ):
        accepted = " or ".join(f"u64[{n}]" for (n,) in sizes)
        return f"the state of {algorithm} is {accepted}, not {state}"
    if not isinstance(inst.shape, TupleShape) or len(inst.shape.elements) != 2:
        return f"the result {inst.shape} is not (state, bits)"
    bits = inst.shape.elements[1]
    if (
        not isinstance(bits, ArrayShape)
        or not (bits.element_type.is_integral or bits.element_type.is_floating)
        or bits.element_type.bit_width not in (8, 16, 32, 64)
    ):
        return f"{bits} bits (XLA generates 8-, 16-, 32- and 64-bit integers and floats)"
    return None


def _expand(inserter: Inserter, inst: Instruction) -> Instruction:
    why = refusal(inst)
    if why is not None:
        raise UnsupportedError(f"rng-bit-generator '{inst.name}': {why}", inst.location)
    algorithm = inst.attributes.get("algorithm", "rng_default")
    state_size = inst.operands[0].array_shape.dims[0]
    bits = inst.shape.elements[1]
    b = _Builder(inserter, inst)
    state = inst.operands[0]
    if bits.num_elements == 0:
        # No bits: the counter advances by nothing. An empty constant, not an empty
        # computation (whose zero-sized intermediates the emitters need not meet).
        empty = np.zeros(bits.dims, dtype=bits.element_type.numpy_dtype)
        value = b.add("constant", bits, literal=empty)
        return b.add("tuple", inst.shape, [state, value])
    key = b.element(state, 0)
    if algorithm in _PHILOX:
        counter_low = b.element(state, 1)
        counter_high = b.element(state, 2) if state_size == 3 else key
        value, (new_low, new_high) = _philox(b, key, counter_low, counter_high, bits)
        parts = [key, new_low] if state_size == 2 else [key, new_low, new_high]
    else:
        value, new_counter = _three_fry(b, key, b.element(state, 1), bits)
        parts = [key, new_counter]
    new_state = b.concatenate([b.reshape(p, (1,)) for p in parts], 0)
    new_state = b.add("reshape", inst.shape.elements[0], [new_state])
    return b.add("tuple", inst.shape, [new_state, value])


def _as_output(b: _Builder, words: Instruction, bits: ArrayShape) -> Instruction:
    """u32 or u64 ``words`` (as many as ``bits`` has elements) as ``bits``: 8- and 16-bit
    outputs keep each word's low bits, signed and float ones are the same bits."""
    width = bits.element_type.bit_width
    if width < 32:
        words = b.convert(words, ElementType.U8 if width == 8 else ElementType.U16)
    dims = words.array_shape.dims
    if words.array_shape.element_type is not bits.element_type:
        words = b.add("bitcast-convert", ArrayShape(bits.element_type, dims), [words])
    return b.add("reshape", bits, [words])


def _philox(
    b: _Builder,
    key: Instruction,
    counter_low: Instruction,
    counter_high: Instruction,
    bits: ArrayShape,
) -> tuple[Instruction, tuple[Instruction, Instruction]]:
    """Philox-4x32-10 bits for ``bits`` and the advanced 128-bit counter (low, high)."""
    count = bits.num_elements
    wide = bits.element_type.bit_width == 64
    blocks = -(-count * (2 if wide else 1) // 4)

    # The counters of the blocks, as four u32 words each (least significant first).
    iota = b.add("iota", ArrayShape(U64, (blocks,)), [], {"iota_dimension": 0})
    low, high = b.add_u128(counter_low, counter_high, iota)
    words = [*b.halves(low), *b.halves(high)]
    keys = list(b.halves(key))
    for round_ in range(_PHILOX_ROUNDS):
        if round_:
            keys = [b.binary("add", k, b.constant(U32, step)) for k, step in zip(keys, _KEY_STEPS)]
        products = []
        for word, multiplier in zip((words[0], words[2]), _MULTIPLIERS):
            product = b.binary("multiply", b.convert(word, U64), b.constant(U64, multiplier))
            products.append(b.halves(product))  # (low, high)
        (low0, high0), (low1, high1) = products
        words = [
            b.binary("xor", b.binary("xor", high1, words[1]), keys[0]),
            low1,
            b.binary("xor", b.binary("xor", high0, words[3]), keys[1]),
            low0,
        ]

    columns = [b.join(words[0], words[1]), b.join(words[2], words[3])] if wide else words
    per_block = len(columns)
    stream = b.concatenate([b.reshape(c, (blocks, 1)) for c in columns], 1)
    stream = b.reshape(stream, (blocks * per_block,))
    if blocks * per_block != count:
        et = stream.array_shape.element_type
        stream = b.add(
            "slice", ArrayShape(et, (count,)), [stream], {"slice": (SliceRange(0, count, 1),)}
        )
    return _as_output(b, stream, bits), b.add_u128(
        counter_low, counter_high, b.constant(U64, blocks)
    )


def _three_fry(
    b: _Builder, key: Instruction, counter: Instruction, bits: ArrayShape
) -> tuple[Instruction, Instruction]:
    """Threefry-2x32-20 bits for ``bits`` and the advanced 64-bit counter.

    Each counter value gives two u32 words. A 64-bit output takes both words of
    counter + i for its element i (row-major). A narrower one splits a
    dimension in two halves (the first even one, else the longest; a scalar is
    one element of a [2]): counter + i feeds element i of the half shape, its
    first word landing at an even position of the split dimension and its
    second at the odd one after it (the last one dropped where the dimension is
    odd); the counter advances by the half shape's size."""
    dims = bits.dims
    wide = bits.element_type.bit_width == 64
    if wide:
        split, half = None, dims
    elif not dims:
        split, half = 0, (1,)
    else:
        even = [d for d, size in enumerate(dims) if size % 2 == 0]
        split = even[0] if even else max(range(len(dims)), key=lambda d: (dims[d], -d))
        half = (*dims[:split], -(-dims[split] // 2), *dims[split + 1 :])
    size = int(np.prod(half, dtype=np.int64))
    flat = b.add("iota", ArrayShape(U64, (size,)), [], {"iota_dimension": 0})
    counters = b.binary("add", flat, b.broadcast(counter, (size,)))
    x = list(b.halves(counters))
    k = list(b.halves(key))
    k.append(b.binary("xor", b.binary("xor", k[0], k[1]), b.constant(U32, 0x1BD11BDA)))
    x = [
        b.binary("add", x[0], b.broadcast(k[0], (size,))),
        b.binary("add", x[1], b.broadcast(k[1], (size,))),
    ]
    for group in range(5):
        for distance in _ROTATIONS[group % 2]:
            x[0] = b.binary("add", x[0], x[1])
            left = b.binary("shift-left", x[1], b.constant(U32, distance))
            right = b.binary("shift-right-logical", x[1], b.constant(U32, 32 - distance))
            x[1] = b.binary("xor", x[0], b.binary("or", left, right))
        injection = group + 1
        x[0] = b.binary("add", x[0], b.broadcast(k[injection % 3], (size,)))
        step = b.binary("add", k[(injection + 1) % 3], b.constant(U32, injection))
        x[1] = b.binary("add", x[1], b.broadcast(step, (size,)))
    new_counter = b.binary("add", counter, b.constant(U64, size))
    if wide:
        return _as_output(b, b.join(x[0], x[1]), bits), new_counter
    # Each word as the half shape with a unit dimension after the split one, side by side
    # along that dimension, then the split dimension rounded up to even, then cut.
    unit = (*half[: split + 1], 1, *half[split + 1 :])
    pair = b.concatenate([b.reshape(w, unit) for w in x], split + 1)
    even_dims = (*half[:split], 2 * half[split], *half[split + 1 :])
    words = b.reshape(pair, even_dims)
    if even_dims[split] != (dims[split] if dims else 1):
        target = dims if dims else (1,)
        ranges = tuple(SliceRange(0, n, 1) for n in target)
        words = b.add("slice", ArrayShape(U32, target), [words], {"slice": ranges})
    return _as_output(b, words, bits), new_counter
