"""heron.runtime.cuda: the CUDA backend.

Device side (cuda-python only; no MLIR or llvmlite, which the import-linter
contracts check):

- ``driver``: whether a CUDA driver and device are present and, if not, why
  (the GPU tests skip with that line);
- ``backend``: the ``heron.backends`` plugin; its stages are named by
  ``"module:attribute"`` strings, imported only when something compiles.

Compile side (the ``heron-runtime-cuda[compile]`` extra: MLIR, llvmlite,
ptxas from nvidia-cuda-nvcc):

- ``stages``: the backend's stages, ``lower-tensors`` MLIR -> LLVM IR -> PTX
  -> cubin (skipped, saying why, without ptxas);
- ``compiler``, ``compiler_mlir``, ``compiler_tools``: the NVVM lowering
  (libdevice linked and internalised when used), PTX printing, ptxas.

Still to come: the CUDA device through cuda-python (module load, launches,
CUDA graphs). Until then the backend compiles but reports itself unavailable,
saying why, and ``auto`` falls back to the interpreter.
"""

__version__ = "0.1.0"
