"""Helpers for the interpreter's tests: run hand-written lower-tensors kernels on the device.

- ``run_kernel_text(text, inputs, output_nbytes, grid, block)``: compile MLIR
  text with the interpreter's compiler, upload ``inputs`` (their raw bytes),
  launch, and return every output buffer's bytes (``uint8``). Outputs start
  as the device's poison bytes.
- ``run_elementwise(body, inputs, input_types, result_types)``: one thread
  per element; thread ``i`` loads element ``i`` of each input as ``%a0``,
  ``%a1``... (scalars of ``input_types``), runs ``body`` (MLIR text that
  defines ``%r0``, ``%r1``...) and stores each ``%rK`` to output ``K``. The
  outputs come back as numpy arrays of the result types' numpy forms. Threads
  past the element count (the last block's padding) do nothing.
"""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np
import pytest

from heron.runtime.interpreter.capture import compile_kernel_image
from heron.runtime.interpreter.device import InterpreterDevice
from heron.runtime.interpreter.types import parse_type

#: Threads a block in run_elementwise.
BLOCK = 128


def run_kernel_text(
    text: str,
    inputs: Sequence[np.ndarray],
    output_nbytes: Sequence[int],
    grid: Sequence[int] = (1, 1, 1),
    block: Sequence[int] = (1, 1, 1),
    kernel_name: str | None = None,
) -> list[np.ndarray]:
    """Run the kernel of ``text`` on ``inputs`` then ``len(output_nbytes)`` fresh buffers."""
    device = InterpreterDevice()
    image = compile_kernel_image(text, kernel_name)
    kernel = device.load_kernel(image)
    buffers = []
    for k, array in enumerate(inputs):
        raw = np.ascontiguousarray(array).view(np.uint8).reshape(-1)
        buffer = device.allocate(raw.size, f"input {k}")
        device.copy_to_device(buffer, raw)
        buffers.append(buffer)
    outputs = [device.allocate(n, f"output {k}") for k, n in enumerate(output_nbytes)]
    device.launch(kernel, grid, block, [*buffers, *outputs])
    device.synchronize()
    return [device.copy_from_device(b) for b in outputs]


def elementwise_text(
    body: str, count: int, input_types: Sequence[str], result_types: Sequence[str]
) -> str:
    """The MLIR text of run_elementwise's kernel (see the module docstring)."""
    blocks = -(-count // BLOCK)
    params = [f"%in{k}: memref<{blocks * BLOCK}x{t}>" for k, t in enumerate(input_types)]
    params += [f"%out{k}: memref<{blocks * BLOCK}x{t}>" for k, t in enumerate(result_types)]
    lines = [
        "%tid = gpu.thread_id x",
        "%bid = gpu.block_id x",
        f"%bdim = arith.constant {BLOCK} : index",
        "%base = arith.muli %bid, %bdim : index",
        "%i = arith.addi %base, %tid : index",
        f"%count = arith.constant {count} : index",
        "%inside = arith.cmpi ult, %i, %count : index",
        "scf.if %inside {",
    ]
    for k, t in enumerate(input_types):
        lines.append(f"%a{k} = memref.load %in{k}[%i] : memref<{blocks * BLOCK}x{t}>")
    lines.append(body.strip())
    for k, t in enumerate(result_types):
        lines.append(f"memref.store %r{k}, %out{k}[%i] : memref<{blocks * BLOCK}x{t}>")
    lines += ["}", "gpu.return"]
    joined = "\n          ".join(lines)
    return f"""
    module attributes {{gpu.container_module}} {{
      gpu.module @m {{
        gpu.func @k({", ".join(params)}) kernel attributes
            {{known_block_size = array<i32: {BLOCK}, 1, 1>,
              known_grid_size = array<i32: {blocks}, 1, 1>}} {{
          {joined}
        }}
      }}
    }}
    """


def run_elementwise(
    body: str,
    inputs: Sequence[np.ndarray],
    input_types: Sequence[str],
    result_types: Sequence[str],
) -> list[np.ndarray]:
    """See the module docstring; every input has the same length (the thread count)."""
    count = len(inputs[0])
    blocks = -(-count // BLOCK)
    padded = []
    for array, t in zip(inputs, input_types, strict=True):
        dtype = parse_type(t).dtype
        array = np.asarray(array)
        if array.dtype != dtype:
            raise TypeError(f"input for {t} must be {dtype}, not {array.dtype}")
        full = np.zeros(blocks * BLOCK, dtype)
        full[:count] = array
        padded.append(full)
    dtypes = [parse_type(t).dtype for t in result_types]
    text = elementwise_text(body, count, input_types, result_types)
    raw = run_kernel_text(
        text,
        padded,
        [blocks * BLOCK * d.itemsize for d in dtypes],
        grid=(blocks, 1, 1),
        block=(BLOCK, 1, 1),
    )
    return [r.view(d)[:count] for r, d in zip(raw, dtypes, strict=True)]


@pytest.fixture
def run_kernel():
    """:func:`run_kernel_text` as a fixture."""
    return run_kernel_text


@pytest.fixture
def elementwise():
    """:func:`run_elementwise` as a fixture."""
    return run_elementwise
