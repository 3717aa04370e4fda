"""heron.runtime.rocm: the ROCm backend.

Today this package holds ``heron.runtime.rocm.driver``, which finds out whether
a HIP runtime and an AMD GPU are present and, if not, says why in one line (the
GPU tests skip with that line).

What will live here (see ARCHITECTURE.md): the ROCDL backend (lowering the
shared MLIR pipeline's output to an AMDGPU code object, linked with lld) and
the HIP device through hip-python (module load, launches, HIP graphs),
registered in the ``heron.backends`` entry-point group. No backend is
registered yet because none exists.
"""

__version__ = "0.1.0"
