"""heron.runtime.rocm: the ROCm backend.

Device side (hip-python only; no MLIR or llvmlite, which the import-linter
contracts check):

- ``driver``: whether a HIP runtime and an AMD GPU are present and, if not,
  why (the GPU tests skip with that line);
- ``device``: the HIP device (``HipDevice``: memory, views, copies, memsets,
  launches, command buffers as HIP graphs, event timers, properties for
  ``Target.from_device``) through ``hip.hip``;
- ``code_object``: an HSACO's kernel metadata (ELF note, MessagePack) and
  kernel descriptors, and the kernarg bytes packed from them;
- ``commands``: what a device records for a command buffer;
- ``properties``: ``hipDeviceProp_t`` as Target fields;
- ``backend``: the ``heron.backends`` plugin; its stages are named by
  ``"module:attribute"`` strings, imported only when something compiles.

Compile side (the ``heron-runtime-rocm[compile]`` extra: MLIR, llvmlite, lld
from ziglang):

- ``stages``: the backend's stages, ``lower-tensors`` MLIR -> LLVM IR ->
  AMDGPU object -> HSACO;
- ``compiler``, ``compiler_mlir``, ``compiler_shims``, ``compiler_tools``: the
  ROCDL lowering, the OCKL definitions it needs, the object and the lld link.

Where no HIP runtime or AMD GPU is found the backend reports itself
unavailable, saying why, and ``auto`` falls back to the interpreter
(docs/devices.md).
"""

__version__ = "0.1.0"
