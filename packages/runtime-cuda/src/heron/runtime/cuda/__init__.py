"""heron.runtime.cuda: the CUDA backend.

Today this package holds ``heron.runtime.cuda.driver``, which finds out whether
a CUDA driver and device are present and, if not, says why in one line (the
GPU tests skip with that line).

What will live here (see ARCHITECTURE.md): the NVVM backend (lowering the
shared MLIR pipeline's output to PTX, optionally to cubin with ptxas) and the
CUDA device through cuda-python (module load, launches, CUDA graphs),
registered in the ``heron.backends`` entry-point group. No backend is
registered yet because none exists.
"""

__version__ = "0.1.0"
