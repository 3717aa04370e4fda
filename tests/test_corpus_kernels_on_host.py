"""Acceptance: every loop-hero corpus kernel computes what the reference evaluator computes.

For each file of ``common/loop`` and ``gpu/convert`` in the corpus (the root
conftest's ``corpus_dir``), every fusion is compiled by ``heron.compiler`` down
to the ``lower-tensors`` stage for CUDA, and the kernel is run on the host for
every block and thread (``heron_test_support.kernel_jit``) on random inputs
with edge values (zeros of both signs, infinities, NaN, subnormals, the
largest finite values, integer minima and maxima: indices out of range test
the clamping of gather and dynamic-update-slice). The outputs are compared
with ``heron.hlo.evaluator.evaluate_computation`` of the fused computation:

* bitwise for integers, pred, fp8/f4 and every float output that does not
  depend on a transcendental op (NaN matches any NaN);
* within the error bound of expand-math's approximation (the table in
  ``heron.emitters.pipeline.expand_math``; one ulp more for f64, where the
  reference is libm's float64 routine, itself up to an ulp off; several
  transcendental ops in a chain add their bounds) for float outputs that do.

Each kernel runs twice, its output buffers first filled with the byte 0xA5
and then 0x5A: an element that the kernel never writes comes back with
different bits (or, for pred, as a byte that is not 0/1) and fails the test.

``broadcast_constant_block_dim_limit.hlo`` (1.2e12 elements, the reason for a
two-dimensional grid) cannot run on a host: it is compiled and its launch and
buffer checked, and a copy of the fusion with the same ops and rank but small
dims is run instead. Nothing is skipped.
"""

from __future__ import annotations

import re
from pathlib import Path

import attrs
import ml_dtypes
import numpy as np
import pytest
from heron_test_support import vector_pipeline_inputs
from heron_test_support.kernel_jit import compile_lowered_kernel
from mlir import ir

from heron.compiler import Target, compile_fusion, fusions_of
from heron.emitters.dialect import make_context
from heron.emitters.pipeline import PipelineOptions, lower_tensors, lower_to_scf
from heron.harness.check import shrunk_fusion
from heron.harness.inputs import edge_array
from heron.harness.tolerance import mismatches, ulp_bound
from heron.hlo import ElementType
from heron.hlo.errors import UnsupportedError
from heron.hlo.evaluator import evaluate_computation
from heron.hlo.evaluator.random_inputs import random_array
from heron.hlo.fusion_outputs import output_roots
from heron.hlo.ir import Computation, Instruction
from heron.hlo.memory_layout import from_memory, to_memory
from heron.hlo.parser import parse_module_file
from heron.hlo.shapes import ArrayShape, Layout, Shape, TupleShape
from heron.indexing.thread_maps import LaunchDimensions

#: Fusions with a buffer larger than this run as a shrunken copy (see the module docstring).
HOST_ELEMENT_LIMIT = 1 << 22
POISONS = (0xA5, 0x5A)

#: Inputs and tolerances are heron.harness's (the library behind ``heron check``).
_random_array = edge_array
_ulp_bound = ulp_bound
_shrunk = shrunk_fusion


def _mismatches(kernel: np.ndarray, reference: np.ndarray, ulps: int) -> tuple[np.ndarray, list]:
    """Flat indices where ``kernel`` and ``reference`` differ beyond ``ulps``, and the distances."""
    found = mismatches(kernel, reference, ulps)
    return found.indices, [int(d) for d in found.distances]


def _describe(values: np.ndarray, index: int) -> str:
    value = values.reshape(-1)[index]
    if values.dtype.itemsize <= 8 and not np.issubdtype(values.dtype, np.complexfloating):
        bits = np.asarray(value).view(f"uint{values.dtype.itemsize * 8}")
        return f"{value!r} ({int(bits):#x})"
    return repr(value)


def _leaves(value) -> list[np.ndarray]:
    if isinstance(value, tuple):
        return [leaf for element in value for leaf in _leaves(element)]
    return [np.asarray(value)]


# -- running one fusion ---------------------------------------------------------------


def _launch(kernel) -> tuple[tuple[int, int], tuple[int]]:
    return (kernel.launch.block_x, kernel.launch.block_y), (kernel.launch.thread_x,)


def _check_fusion(fusion: Instruction, label: str, seed: int) -> list[str]:
    """Compile ``fusion`` to lower-tensors and check its kernel; the problems found."""
    kernel = compile_fusion(fusion, Target.preset("h100"), stop_after="lower-tensors")
    return _check_kernel(fusion, kernel, kernel.module, label, seed)


def _check_kernel(fusion, kernel, lowered, label: str, seed: int) -> list[str]:
    """Run the lowered kernel on two input sets, twice each; the problems found.

    The input sets: edge values (:func:`_random_array`), and the evaluator's
    own moderate ones (floats in [-1, 1), integers in [0, 8)), under which
    reductions and dots stay finite.
    """
    computation: Computation = fusion.called("calls")
    input_shapes = [a.shape for a in kernel.arguments if not a.is_output]
    output_shapes = [a.shape for a in kernel.arguments if a.is_output]
    grid, block = _launch(kernel)
    host = compile_lowered_kernel(lowered, input_shapes, output_shapes, grid, block)
    sources = output_roots(computation)
    assert len(output_shapes) == len(sources), label
    rng = np.random.default_rng(seed)
    input_sets = {
        "edge inputs": [_random_array(shape, rng) for shape in input_shapes],
        "moderate inputs": [random_array(shape, rng) for shape in input_shapes],
    }
    problems: list[str] = []
    for name, args in input_sets.items():
        expected = _leaves(evaluate_computation(computation, args))
        assert len(expected) == len(output_shapes), label
        runs = [host(args, poison) for poison in POISONS]
        for k, shape in enumerate(output_shapes):
            where = f"{label}, {name}: output {k} ({shape}, from {sources[k].opcode}"
            where += f" '{sources[k].name}')"
            problems += _compare(where, runs[0][k], runs[1][k], expected[k], sources[k], shape)
    return problems


def _compare(where, first, second, expected, source, shape: ArrayShape) -> list[str]:
    """Unwritten elements (the two runs differ) or differences from the reference."""
    unwritten, _ = _mismatches(first, second, 0)
    if unwritten.size:
        return [
            f"{where}: {unwritten.size} of {shape.num_elements} elements never written (they"
            f" keep the poison), first at {_position(int(unwritten[0]), shape)}"
        ]
    bound = _ulp_bound(source, shape.element_type)
    bad, distances = _mismatches(first, expected, bound)
    if not bad.size:
        return []
    i = int(bad[0])
    return [
        f"{where}: {bad.size} of {shape.num_elements} elements differ"
        f" ({'bitwise' if bound == 0 else f'by more than {bound} ulps'}); first at"
        f" {_position(i, shape)}: kernel {_describe(first, i)}, reference"
        f" {_describe(expected, i)} ({distances[0]} ulps); max {max(distances)} ulps"
    ]


def _position(flat_index: int, shape: ArrayShape) -> tuple[int, ...]:
    return tuple(int(i) for i in np.unravel_index(flat_index, shape.dims)) if shape.dims else ()


def _largest_buffer(fusion: Instruction) -> int:
    shapes = [*(o.shape for o in fusion.operands), fusion.shape]
    return max(leaf.num_elements for shape in shapes for leaf in _array_leaves(shape))


def _array_leaves(shape: Shape) -> list[ArrayShape]:
    return list(shape.leaves()) if isinstance(shape, TupleShape) else [shape]


def _check_huge_compile(fusion: Instruction) -> None:
    """The huge fusion compiles; its buffer and launch cover every element."""
    kernel = compile_fusion(fusion, Target.preset("h100"), stop_after="lower-tensors")
    (output,) = [a.shape for a in kernel.arguments if a.is_output]
    text = str(kernel.module)
    assert f"memref<{output.num_elements}x" in text
    launch = kernel.launch
    assert launch.block_y > 1  # the x dimension of the grid alone cannot hold it
    assert launch.block_x < 2**31 and launch.thread_x <= 1024
    assert launch.num_threads * 8 >= output.num_elements  # at most 8 elements a thread
    sizes = re.search(r"known_grid_size = array<i32: (\d+), (\d+), 1>", text)
    assert sizes is not None
    assert (int(sizes[1]), int(sizes[2])) == (launch.block_x, launch.block_y)


def test_loop_kernels_compute_what_the_evaluator_computes(loop_corpus_file):
    module = parse_module_file(loop_corpus_file)
    problems: list[str] = []
    fusions = fusions_of(module)
    assert fusions
    for number, fusion in enumerate(fusions):
        label = f"{loop_corpus_file.name} fusion '{fusion.name}'"
        if _largest_buffer(fusion) > HOST_ELEMENT_LIMIT:
            _check_huge_compile(fusion)
            fusion = _shrunk(module, fusion)
            label += " (shrunk)"
        problems += _check_fusion(fusion, label, seed=number)
    assert not problems, "\n".join(problems)


# -- the harness itself: memory layout, refusals, and that it catches wrong kernels ------


def test_memory_layout_follows_minor_to_major_and_packs_sub_byte_types():
    column_major = ArrayShape(ElementType.F32, (2, 3), Layout((0, 1)))
    values = np.arange(6, dtype=np.float32).reshape(2, 3)
    memory = to_memory(values, column_major)
    np.testing.assert_array_equal(memory, values.T.reshape(-1))
    np.testing.assert_array_equal(from_memory(memory, column_major), values)
    s4 = ArrayShape(ElementType.S4, (5,))
    packed = to_memory(np.array([1, -2, 7, -8, 3], ml_dtypes.int4), s4)
    assert list(packed) == [0xE1, 0x87, 0x03]  # low nibble first, as lower-tensors packs
    assert list(from_memory(packed, s4).astype(int)) == [1, -2, 7, -8, 3]
    with pytest.raises(ValueError, match="neither 0 nor 1"):
        from_memory(np.array([1, 0xA5], np.uint8), ArrayShape(ElementType.PRED, (2,)))


def test_kernels_with_barriers_or_shared_memory_are_refused():
    with make_context(), ir.Location.unknown():
        module = ir.Module.parse(vector_pipeline_inputs.reduction_lower_input())
        lower_to_scf.run(module, PipelineOptions())
        lower_tensors.run(module, PipelineOptions())
    f32 = ArrayShape(ElementType.F32, (16,))
    with pytest.raises(UnsupportedError, match="loop kernels only"):
        compile_lowered_kernel(module, [f32], [f32, ArrayShape(ElementType.S32, (16,))], [1], [16])


def _negate_kernel(corpus_dir: Path, edit, threads: int | None = None):
    """vectorize_x1_too_small's kernel (y = -x, one thread per element), its text edited."""
    module = parse_module_file(corpus_dir / "common" / "loop" / "vectorize_x1_too_small.hlo")
    (fusion,) = fusions_of(module)
    kernel = compile_fusion(fusion, Target.preset("h100"), stop_after="lower-tensors")
    text = edit(str(kernel.module))
    lowered = ir.Module.parse(text, context=make_context())
    if threads is not None:
        kernel = attrs.evolve(kernel, launch=LaunchDimensions(1, threads))
    return fusion, kernel, lowered


def test_the_check_catches_a_wrong_value(corpus_dir):
    fusion, kernel, lowered = _negate_kernel(
        corpus_dir, lambda text: text.replace("arith.negf", "math.absf")
    )
    (problem, *_) = _check_kernel(fusion, kernel, lowered, "absf for negf", seed=0)
    assert "output 0 (f32[20], from negate 'neg')" in problem and "elements differ" in problem


def test_the_check_catches_an_element_never_written(corpus_dir):
    fusion, kernel, lowered = _negate_kernel(
        corpus_dir,
        lambda text: text.replace("block_size = array<i32: 20,", "block_size = array<i32: 19,"),
        threads=19,
    )
    (problem, *_) = _check_kernel(fusion, kernel, lowered, "19 threads for 20", seed=0)
    assert "1 of 20 elements never written" in problem and "first at (19,)" in problem
