"""The interpreter device: a GPU on the CPU that runs the kernels heron emits.

The device side (numpy only; no MLIR, llvmlite or heron.emitters, which the
import-linter contracts check):

- :mod:`.program`: the kernel module as plain data (no MLIR needed to run it);
- :mod:`.engine`, :mod:`.lanes`, :mod:`.memory`, :mod:`.semantics`: the SIMT
  engine, with the sanitizer built in (:mod:`.errors`);
- :mod:`.device`: :class:`InterpreterDevice`, the device interface over it,
  with warps of 32 or 64 lanes as the Target it emulates has;
- :mod:`.backend`: the ``heron.backends`` plugin (always available, lowest
  priority), which names its one stage by string.

The compile side, :mod:`.capture` (MLIR at the ``lower-tensors`` stage ->
program), needs the ``heron-runtime-interpreter[compile]`` extra and is imported
only when something compiles.

docs/interpreter.md describes the execution model and lists the operations.
"""

from heron.runtime.interpreter.device import InterpreterDevice

__version__ = "0.1.0"

__all__ = ["InterpreterDevice"]
