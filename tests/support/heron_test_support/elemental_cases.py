"""Inputs and comparisons shared by the elemental emitter's tests against the evaluator.

Every ``test_elemental_*`` file runs HLO text through
:func:`heron_test_support.elemental_jit.run_hlo` and compares with
:func:`heron.hlo.evaluate_module`; they also need the same random bit
patterns, the same bit-for-bit comparison and the same way of seeing where
an instruction's operands are resolved. Those live here once, so that a fix
to (say) the sub-byte comparison reaches every test.
"""

from __future__ import annotations

import zlib
from collections.abc import Callable, Sequence

import numpy as np
from mlir import ir
from mlir.dialects import func

from heron.emitters.dialect import make_context
from heron.emitters.elemental import ElementalContext, emit_instruction
from heron.hlo import evaluate_module, parse_module
from heron.hlo.element_types import ElementType
from heron_test_support.elemental_jit import run_hlo

#: The 16-, 32- and 64-bit float types.
WIDE_FLOATS = [ElementType.F16, ElementType.BF16, ElementType.F32, ElementType.F64]
#: The 8- and 4-bit float types (arithmetic goes through f32).
NARROW_FLOATS = [
    ElementType.F8E4M3FN,
    ElementType.F8E5M2,
    ElementType.F8E4M3FNUZ,
    ElementType.F8E5M2FNUZ,
    ElementType.F8E4M3B11FNUZ,
    ElementType.F8E4M3,
    ElementType.F8E3M4,
    ElementType.F8E8M0FNU,
    ElementType.F4E2M1FN,
]

Compare = Callable[[np.ndarray, np.ndarray], None]


def rng_for(*key: object) -> np.random.Generator:
    """A generator seeded by the test's parameters: the same inputs on every run and worker."""
    return np.random.default_rng(zlib.crc32(repr(key).encode()))


def random_bits(element: ElementType, dims, rng: np.random.Generator) -> np.ndarray:
    """Random bit patterns of ``element`` (NaNs with payloads, infinities, subnormals included).

    Integers cover their whole range, pred is 0/1, complex values get random
    bits in each component.
    """
    dims = tuple(dims)
    if element.is_pred:
        return rng.integers(0, 2, size=dims).astype(bool)
    width = element.bit_width
    if element.is_integral:
        lo = -(1 << (width - 1)) if element.is_signed_integral else 0
        return rng.integers(lo, lo + (1 << width), size=dims).astype(element.numpy_dtype)
    if element.is_complex:
        part = element.component_type
        out = np.empty(dims, element.numpy_dtype)
        out.real = random_bits(part, dims, rng)
        out.imag = random_bits(part, dims, rng)
        return out
    storage = np.dtype(f"uint{max(8, width)}")
    bits = rng.integers(0, 1 << width, size=dims, dtype=np.uint64).astype(storage)
    return bits.view(element.numpy_dtype)


def assert_identical(actual: np.ndarray, expected: np.ndarray) -> None:
    """Equal values for integers and pred, equal bits for floats (NaN payloads too)."""
    expected = np.asarray(expected)
    assert actual.shape == expected.shape
    assert actual.dtype == expected.dtype
    element = ElementType.from_numpy(expected.dtype)
    if element.is_integral or element.is_pred:
        np.testing.assert_array_equal(actual, expected)
        return
    a = np.ascontiguousarray(actual).view(np.uint8)
    b = np.ascontiguousarray(expected).view(np.uint8)
    if element.bit_width < 8:
        a, b = a & 0xF, b & 0xF
    np.testing.assert_array_equal(a, b)


def run_both(text: str, inputs: Sequence[np.ndarray]) -> tuple[list, list]:
    """(emitted result leaves, evaluator result leaves) of the HLO ``text`` on ``inputs``."""
    got = run_hlo(text, list(inputs))
    want = evaluate_module(parse_module(text), list(inputs))
    return got, (list(want) if isinstance(want, tuple) else [want])


def check(
    text: str, inputs: Sequence[np.ndarray], compare: Compare = assert_identical
) -> list[np.ndarray]:
    """Run ``text`` both ways and ``compare`` every result leaf; returns the emitted leaves."""
    actual, expected = run_both(text, inputs)
    assert len(actual) == len(expected)
    for a, b in zip(actual, expected, strict=True):
        compare(a, b)
    return actual


def resolution_sites(
    text: str,
    rank: int,
    operand_type: Callable[[], ir.Type],
    call: Callable[[object, list[ir.Value]], list[ir.Value]] | None = None,
) -> dict[str, list[str]]:
    """Emit the root of ``text`` by hand; for each operand, the ops enclosing its resolution.

    The root is emitted into ``func.func @f(index x rank, operand_type())``
    at the index arguments; every operand resolves to the last argument, and
    its name is recorded with the name of the op whose block it is resolved
    in (``scf.if`` for a branch, ``scf.for`` for a loop, ``func.func`` for
    the entry). ``call`` emits called computations (None: there are none).
    """
    module = parse_module(text)
    root = module.computation(module.fusion_under_test).root_instruction
    sites: dict[str, list[str]] = {}
    with make_context(), ir.Location.unknown():
        ir_module = ir.Module.create()
        index = ir.IndexType.get()
        with ir.InsertionPoint(ir_module.body):
            function = func.FuncOp("f", ir.FunctionType.get([index] * rank + [operand_type()], []))
            block = function.add_entry_block()
        args = list(block.arguments)

        def resolve(inst, indices):
            owner = ir.InsertionPoint.current.block.owner
            sites.setdefault(inst.name, []).append(owner.operation.name)
            return [args[-1]]

        ctx = ElementalContext(resolve=resolve, call=call)
        with ir.InsertionPoint(block):
            emit_instruction(root, args[:rank], ctx)
            func.ReturnOp([])
        ir_module.operation.verify()
    return sites
