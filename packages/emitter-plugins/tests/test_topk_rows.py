"""The top-k library kernel: one compile, every row length and row count, bitwise.

A :class:`TopkRowsKernel` is compiled once (interpreter backend, through a registry
holding the loop and top-k rows emitters) and launched on rows of several lengths and
counts with the row length as its ``s32[1]`` argument, its results compared bit for bit
with the evaluator's ``topk`` of the same rows (ties by index, NaN of both signs, signed
zeros, infinities). The kernel is shape-generic: its interpreter program says so and
declares no grid, its LLVM arguments no ``dereferenceable`` size, and it compiles to PTX
that ptxas accepts.
"""

from __future__ import annotations

import numpy as np
import pytest
from heron_test_support.analysis import H100, analysed
from heron_test_support.topk_values import tie_values

import heron.plugins.loop as loop_plugin
import heron.plugins.topk_rows as topk_rows_plugin
from heron.compiler import compile_fusion
from heron.emitters.library_kernels import ROWS_BOUND, TopkRowsKernel, topk_row_threads
from heron.emitters.registry import EmitterRegistry
from heron.hlo.element_types import ElementType
from heron.hlo.errors import UnsupportedError
from heron.hlo.evaluator import evaluate_module
from heron.hlo.parser import parse_module
from heron.plugins.topk_rows import TopkRowsEmitter
from heron.runtime.interpreter.device import InterpreterDevice
from heron.runtime.interpreter.program import Program

REGISTRY = EmitterRegistry(
    [
        (spec, None)
        for plugin in (loop_plugin, topk_rows_plugin)
        for spec in plugin.heron_emitter_specs()
    ]
)


def _evaluated(dtype: str, rows: np.ndarray, k: int, largest: bool) -> list[np.ndarray]:
    """The evaluator's ``topk`` of ``rows``: the oracle."""
    shape = f"{dtype}[{rows.shape[0]},{rows.shape[1]}]"
    out = f"[{rows.shape[0]},{k}]"
    text = f"""
ENTRY e {{
  x = {shape} parameter(0)
  ROOT t = ({dtype}{out}, s32{out}) topk(x), k={k}, largest={str(largest).lower()}
}}
"""
    return [np.asarray(v) for v in evaluate_module(parse_module(text), [rows])]


def _compiled(kernel: TopkRowsKernel, backend: str = "interpreter"):
    fusion = parse_module(kernel.fusion_text()).entry.root
    return compile_fusion(fusion, H100, backend, emitters=REGISTRY)


def _launch(compiled, dtype: str, rows: np.ndarray, k: int) -> list[np.ndarray]:
    """The kernel on ``rows``: a block per row, the row length as its argument."""
    device = InterpreterDevice()
    loaded = device.load_kernel(compiled.image)
    count, length = rows.shape
    buffers = []
    for data in (rows, np.array([length], np.int32)):
        buffer = device.allocate(data.nbytes)
        device.copy_to_device(buffer, data)
        buffers.append(buffer)
    itemsize = rows.dtype.itemsize
    outputs = [device.allocate(count * k * itemsize), device.allocate(count * k * 4)]
    device.launch(loaded, (count, 1, 1), (compiled.launch.thread_x, 1, 1), [*buffers, *outputs])
    values = device.copy_from_device(outputs[0]).view(rows.dtype).reshape(count, k)
    indices = device.copy_from_device(outputs[1]).view(np.int32).reshape(count, k)
    return [values, indices]


def _assert_bitwise(got: list[np.ndarray], want: list[np.ndarray]) -> None:
    for g, w in zip(got, want, strict=True):
        assert g.dtype == w.dtype and g.shape == w.shape
        assert np.array_equal(g.view(np.uint8), w.view(np.uint8)), f"\n{g}\n!=\n{w}"


@pytest.mark.parametrize(
    ("dtype", "k", "largest"),
    [("f32", 4, True), ("bf16", 16, True), ("s32", 1, True), ("u8", 8, False), ("f64", 2, False)],
)
def test_one_kernel_gives_every_row_length_and_count(dtype, k, largest):
    """One compile for rows of k, 37, 128 and 1,000 elements (shorter than, not a
    multiple of and many times the threads), one row and several."""
    threads = topk_row_threads(37, k, H100)
    kernel = TopkRowsKernel(ElementType(dtype), k, largest, threads)
    compiled = _compiled(kernel)
    assert compiled.emitter == "topk_rows"
    rng = np.random.default_rng(k)
    for count, length in ((3, k), (5, 37), (1, 128), (4, 1000)):
        rows = tie_values(dtype, count * length, rng).reshape(count, length)
        _assert_bitwise(_launch(compiled, dtype, rows, k), _evaluated(dtype, rows, k, largest))


def test_ties_come_by_increasing_index():
    kernel = TopkRowsKernel(ElementType("f32"), 16, True, 32)
    row = np.zeros((2, 200), np.float32)
    row[:, ::3] = -0.0
    got = _launch(_compiled(kernel), "f32", row, 16)
    assert list(got[1][1]) == [i for i in range(200) if i % 3][:16]


def test_the_kernel_is_shape_generic():
    """Built once for any size: no grid declared, no dereferenceable argument sizes
    (its memref types are bounds), the interpreter told to bind buffers by their size."""
    kernel = TopkRowsKernel(ElementType("f32"), 4, True, 8)
    interpreter = _compiled(kernel)
    (function,) = [
        f for f in Program.from_json(interpreter.image.data).functions.values() if f.kernel
    ]
    assert function.shape_generic and function.known_grid_size is None
    assert function.known_block_size == (8, 1, 1)
    bound = f"memref<{ROWS_BOUND}x"
    assert function.argument_types == (
        f"{bound}f32>",
        "memref<1xi32>",
        f"{bound}f32>",
        f"{bound}i32>",
    )
    cuda = _compiled(kernel, "cuda")
    llvm = next(a for a in cuda.artefacts if a.extension == "ll").data.decode()
    assert "dereferenceable" not in llvm and "heron.shape_generic" not in llvm
    assert "noalias" in llvm  # the other argument attributes stay
    assert {a.extension for a in cuda.device_code()} >= {"ptx", "cubin"}


def test_a_shape_generic_program_reads_back_as_one():
    kernel = TopkRowsKernel(ElementType("s32"), 2, False, 4)
    image = _compiled(kernel).image
    program = Program.from_json(image.data)
    again = Program.from_json(program.to_json())
    assert [f.shape_generic for f in again.functions.values()] == [
        f.shape_generic for f in program.functions.values()
    ]
    assert any(f.shape_generic for f in again.functions.values())


@pytest.mark.parametrize(
    ("edit", "match"),
    [
        (('opaque="threads=8"', 'opaque="warps=8"'), r'needs opaque="threads=T"'),
        (('opaque="threads=8"', 'opaque="threads=6"'), r"6 threads \(a power of two\)"),
        (("k=4,", "k=65,"), r"k=65 \(1 to 64\)"),
    ],
)
def test_a_bad_call_is_refused_naming_it(edit, match):
    text = TopkRowsKernel(ElementType("f32"), 4, True, 8).fusion_text().replace(*edit)
    fusion = parse_module(text).entry.root
    with pytest.raises(UnsupportedError, match=rf"custom-call 'top' \(heron\$topk_rows\).*{match}"):
        TopkRowsEmitter(analysed(fusion))
