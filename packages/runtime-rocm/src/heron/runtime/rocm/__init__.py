"""heron.runtime.rocm: the ROCm backend.

- ``driver``: whether a HIP runtime and an AMD GPU are present and, if not, why
  (the GPU tests skip with that line).
- ``compiler``: the ROCDL tail of the pipeline, a ``gpu.module`` to an AMDGPU
  code object (llvmlite) linked into a loadable HSACO by ld.lld (ziglang). It
  needs the ``heron-runtime-rocm[compile]`` extra and imports it lazily.

Still to come (see ARCHITECTURE.md): the HIP device through hip-python
(module load, launches, HIP graphs) and the ``heron.backends`` registration;
nothing is registered until the backend can run what it compiles.
"""

__version__ = "0.1.0"
