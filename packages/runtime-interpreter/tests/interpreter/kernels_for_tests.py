"""Hand-written kernels for the interpreter's sync/atomics/sanitizer tests, and a runner.

A kernel is MLIR text at the lower-tensors stage with one ``gpu.func @k``;
:func:`run` compiles it for the interpreter device, uploads the inputs,
allocates (poisoned) outputs, launches and returns the outputs' bytes with
the device and buffers, so that a test can read the access counts too.
"""

from __future__ import annotations

from collections.abc import Sequence

import attrs
import numpy as np

from heron.runtime.core.device import DeviceBuffer
from heron.runtime.interpreter import InterpreterDevice
from heron.runtime.interpreter.capture import compile_kernel_image


def kernel_text(
    args: str,
    body: str,
    block: Sequence[int] = (64, 1, 1),
    grid: Sequence[int] = (1, 1, 1),
    workgroup: str = "",
) -> str:
    """A module with one kernel ``@k(args)`` whose body is ``body`` (``gpu.return`` added)."""
    b = ", ".join(map(str, block))
    g = ", ".join(map(str, grid))
    attributions = f" workgroup({workgroup})" if workgroup else ""
    return f"""
module attributes {{gpu.container_module}} {{
  gpu.module @m {{
    gpu.func @k({args}){attributions} kernel attributes
        {{known_block_size = array<i32: {b}>, known_grid_size = array<i32: {g}>}} {{
{body}
      gpu.return
    }}
  }}
}}
"""


@attrs.frozen
class Ran:
    """What a launch left: each buffer's bytes (inputs may be updated too), device, buffers."""

    outputs: list[np.ndarray]
    inputs: list[np.ndarray]
    device: InterpreterDevice
    #: The output buffers (``access_counts`` of them tells what the launch wrote).
    buffers: list[DeviceBuffer]
    input_buffers: list[DeviceBuffer]

    def output(self, k: int, dtype) -> np.ndarray:
        return self.outputs[k].view(dtype)

    def input(self, k: int, dtype) -> np.ndarray:
        """Input buffer ``k`` after the launch (atomics update memory in place)."""
        return self.inputs[k].view(dtype)


def run(
    text: str,
    inputs: Sequence[np.ndarray],
    output_bytes: Sequence[int],
    grid: Sequence[int] = (1, 1, 1),
    block: Sequence[int] = (64, 1, 1),
    **device_options,
) -> Ran:
    """Run ``@k`` of ``text`` on ``inputs`` followed by fresh outputs of ``output_bytes``."""
    device = InterpreterDevice(**device_options)
    kernel = device.load_kernel(compile_kernel_image(text))
    ins = [device.upload(np.ascontiguousarray(x).view(np.uint8)) for x in inputs]
    outs = [device.allocate(n) for n in output_bytes]
    device.launch(kernel, grid, block, [*ins, *outs])
    return Ran(
        [device.copy_from_device(b) for b in outs],
        [device.copy_from_device(b) for b in ins],
        device,
        outs,
        ins,
    )
