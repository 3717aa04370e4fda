"""The interpreter device: a GPU on the CPU that runs the kernels heron emits.

- :mod:`.program`: the kernel module as plain data (no MLIR needed to run it);
- :mod:`.capture`: the compiler side, MLIR (lower-tensors stage) -> program;
- :mod:`.engine`, :mod:`.lanes`, :mod:`.memory`, :mod:`.semantics`: the SIMT
  engine, with the sanitizer built in (:mod:`.errors`);
- :mod:`.device`: :class:`InterpreterDevice`, the device interface over it.

docs/interpreter.md describes the execution model and lists the operations.
"""

from heron.runtime.interpreter.device import InterpreterDevice

__all__ = ["InterpreterDevice"]
