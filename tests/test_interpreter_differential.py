"""The interpreter device and the host JIT compute the same bits for every loop-hero kernel.

Two independent executions of one lowered kernel: the interpreter
(``heron.runtime.interpreter``: numpy, lane-parallel, its own meaning of
each op) and ``heron_test_support.kernel_jit`` (the kernel compiled by
LLVM for the host CPU, every thread in turn). For every fusion of every file
of the loop-hero corpus (``common/loop``, ``gpu/convert``) both run on the
same inputs, drawn with edge values as in ``test_corpus_kernels_on_host``
(zeros of both signs, infinities, NaN, subnormals, extremes), and their
output buffers must be bit-identical, NaN payloads included. The huge
``broadcast_constant_block_dim_limit`` fusion runs as the same shrunken copy
that test uses. Nothing is skipped.
"""

from __future__ import annotations

import importlib.util
from pathlib import Path

import numpy as np
from heron_test_support.kernel_jit import compile_lowered_kernel

from heron.compiler import Target, compile_fusion, fusions_of
from heron.hlo.memory_layout import from_memory, memory_size, to_memory
from heron.hlo.memory_layout import memory_dtype as _memory_dtype
from heron.hlo.parser import parse_module_file
from heron.runtime.interpreter.capture import compile_kernel_image
from heron.runtime.interpreter.device import InterpreterDevice


def _host_test_module():
    """test_corpus_kernels_on_host (tests are imported by path: pytest's importlib mode)."""
    path = Path(__file__).with_name("test_corpus_kernels_on_host.py")
    spec = importlib.util.spec_from_file_location("_heron_corpus_on_host", path)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


_ON_HOST = _host_test_module()
HOST_ELEMENT_LIMIT = _ON_HOST.HOST_ELEMENT_LIMIT
_largest_buffer = _ON_HOST._largest_buffer
_random_array = _ON_HOST._random_array
_shrunk = _ON_HOST._shrunk


def _run_interpreter(lowered, kernel, inputs, input_shapes, output_shapes) -> list[np.ndarray]:
    device = InterpreterDevice()
    loaded = device.load_kernel(compile_kernel_image(lowered))
    buffers = []
    for k, (array, shape) in enumerate(zip(inputs, input_shapes, strict=True)):
        raw = np.ascontiguousarray(to_memory(array, shape)).view(np.uint8).reshape(-1)
        buffer = device.allocate(raw.size, f"input {k}")
        device.copy_to_device(buffer, raw)
        buffers.append(buffer)
    outputs = [
        device.allocate(memory_size(s) * _memory_dtype(s.element_type).itemsize, f"output {k}")
        for k, s in enumerate(output_shapes)
    ]
    launch = kernel.launch
    device.launch(
        loaded, (launch.block_x, launch.block_y), (launch.thread_x,), [*buffers, *outputs]
    )
    return [
        from_memory(device.copy_from_device(b).view(_memory_dtype(s.element_type)), s)
        for b, s in zip(outputs, output_shapes, strict=True)
    ]


def _bits(values: np.ndarray) -> np.ndarray:
    """The bytes of each element, one row each; a float NaN's sign bit cleared.

    LLVM leaves the sign of a NaN that an arithmetic op returns unspecified
    (LangRef, "Behavior of Floating-Point NaN values": the host JIT's
    instruction selection and folds may flip it), so NaN signs are not
    compared; NaN payloads and every other bit are.
    """
    values = np.ascontiguousarray(values).reshape(-1)
    if np.issubdtype(values.dtype, np.complexfloating):
        parts = values.view(values.real.dtype).reshape(-1, 2)
        return np.concatenate([_bits(parts[:, 0]), _bits(parts[:, 1])], axis=1)
    itemsize = values.dtype.itemsize
    rows = values.view(np.uint8).reshape(-1, itemsize).copy()
    if "float" in values.dtype.name:  # numpy's and ml_dtypes' (bf16, fp8, f4) floats
        nan = np.isnan(values.astype(np.float64))
        rows[nan, itemsize - 1] &= 0x7F
    return rows


def _differences(label: str, fusion, seed: int) -> list[str]:
    kernel = compile_fusion(fusion, Target.preset("h100"), stop_after="lower-tensors")
    lowered = kernel.module
    input_shapes = [a.shape for a in kernel.arguments if not a.is_output]
    output_shapes = [a.shape for a in kernel.arguments if a.is_output]
    launch = kernel.launch
    host = compile_lowered_kernel(
        lowered, input_shapes, output_shapes, (launch.block_x, launch.block_y), (launch.thread_x,)
    )
    rng = np.random.default_rng(seed)
    inputs = [_random_array(shape, rng) for shape in input_shapes]
    expected = host(inputs)
    actual = _run_interpreter(lowered, kernel, inputs, input_shapes, output_shapes)
    problems = []
    for k, (want, got) in enumerate(zip(expected, actual, strict=True)):
        want_bits, got_bits = _bits(want), _bits(got)
        if want.dtype != got.dtype or want.shape != got.shape:
            problems.append(f"{label}: output {k}: {got.dtype}{got.shape} vs {want.dtype}")
            continue
        if not np.array_equal(want_bits, got_bits):
            bad = np.flatnonzero((want_bits != got_bits).any(axis=1))
            i = int(bad[0])
            got_hex, want_hex = (x[i][::-1].tobytes().hex() for x in (got_bits, want_bits))
            problems.append(
                f"{label}: output {k} ({output_shapes[k]}): {bad.size} elements differ; first"
                f" flat {i}: interpreter {got.reshape(-1)[i]!r} ({got_hex}),"
                f" host {want.reshape(-1)[i]!r} ({want_hex})"
            )
    return problems


def test_interpreter_matches_host_jit_bitwise(loop_corpus_file):
    module = parse_module_file(loop_corpus_file)
    fusions = fusions_of(module)
    assert fusions
    problems: list[str] = []
    for number, fusion in enumerate(fusions):
        label = f"{loop_corpus_file.name} fusion '{fusion.name}'"
        if _largest_buffer(fusion) > HOST_ELEMENT_LIMIT:
            fusion = _shrunk(module, fusion)
            label += " (shrunk)"
        problems += _differences(label, fusion, seed=number)
    assert not problems, "\n".join(problems)
