"""heron.runtime.cuda: the CUDA backend.

Device side (cuda-python only; no MLIR or llvmlite, which the import-linter
contracts check):

- ``driver``: whether a CUDA driver and device are present and, if not, why
  (the GPU tests skip with that line);
- ``device``: the CUDA device (``CudaDevice``: memory, views, copies, memsets,
  launches, command buffers as CUDA graphs, event timers, properties for
  ``Target.from_device``) through ``cuda.bindings.driver``;
- ``kernel_abi``: heron's kernel ABI read from the PTX ``.entry``, the launch
  parameter buffer packed from it, and which cubin runs on which device;
- ``commands``: what a device records for a command buffer;
- ``conditional``: the PTX kernels that set CUDA conditional nodes (loops and
  conditionals inside graphs, CUDA 12.4+);
- ``properties``: device attributes as Target fields;
- ``backend``: the ``heron.backends`` plugin; its stages are named by
  ``"module:attribute"`` strings, imported only when something compiles.

Compile side (the ``heron-runtime-cuda[compile]`` extra: MLIR, llvmlite,
ptxas from nvidia-cuda-nvcc):

- ``stages``: the backend's stages, ``lower-tensors`` MLIR -> LLVM IR -> PTX
  -> cubin (skipped, saying why, without ptxas);
- ``compiler``, ``compiler_mlir``, ``compiler_tools``: the NVVM lowering
  (libdevice linked and internalised when used), PTX printing, ptxas.

Where no driver or device is found the backend reports itself unavailable,
saying why, and ``auto`` falls back to the interpreter (docs/devices.md).
"""

__version__ = "0.1.0"
