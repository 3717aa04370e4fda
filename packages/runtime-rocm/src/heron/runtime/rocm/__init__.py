"""heron.runtime.rocm: the ROCm backend.

Device side (hip-python only; no MLIR or llvmlite, which the import-linter
contracts check):

- ``driver``: whether a HIP runtime and an AMD GPU are present and, if not,
  why (the GPU tests skip with that line);
- ``backend``: the ``heron.backends`` plugin; its stages are named by
  ``"module:attribute"`` strings, imported only when something compiles.

Compile side (the ``heron-runtime-rocm[compile]`` extra: MLIR, llvmlite, lld
from ziglang):

- ``stages``: the backend's stages, ``lower-tensors`` MLIR -> LLVM IR ->
  AMDGPU object -> HSACO;
- ``compiler``, ``compiler_mlir``, ``compiler_shims``, ``compiler_tools``: the
  ROCDL lowering, the OCKL definitions it needs, the object and the lld link.

Still to come: the HIP device through hip-python (module load, launches, HIP
graphs). Until then the backend compiles but reports itself unavailable,
saying why, and ``auto`` falls back to the interpreter.
"""

__version__ = "0.1.0"
