"""heron.runtime.cuda: the CUDA backend.

- ``driver``: whether a CUDA driver and device are present and, if not, why
  (the GPU tests skip with that line).
- ``compiler``: the NVVM tail of the pipeline, a ``gpu.module`` to PTX
  (libdevice linked and internalised) and optionally cubin through ptxas. It
  needs the ``heron-runtime-cuda[compile]`` extra (MLIR, llvmlite, ptxas) and
  imports it lazily: running a compiled artefact must not need a compiler.

Still to come (see ARCHITECTURE.md): the CUDA device through cuda-python
(module load, launches, CUDA graphs) and the ``heron.backends`` registration;
nothing is registered until the backend can run what it compiles.
"""

__version__ = "0.1.0"
