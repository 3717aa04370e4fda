"""heron.compiler: the compile driver, from an HLO module to device code per fusion.

The steps for every fusion of the entry computation (``fusions_of``):

1. ``emit``: hero selection and emission (``heron.emitters.selection``), the
   ``emitted`` stage of docs/pipeline.md;
2. ``lower``: heron's passes (``heron.emitters.pipeline.heron_passes``), up to
   ``lower-tensors`` or the pass named by ``stop_after``;
3. a backend: NVVM to PTX (and a cubin when ptxas is found) or ROCDL to an
   HSACO (``heron.runtime.cuda.compiler`` / ``heron.runtime.rocm.compiler``).

``compile_module`` runs all three, records how long each stage took per
fusion, and can dump every stage to a directory as
``<fusion>.<NN>.<stage>.mlir`` / ``.ll`` / ``.ptx`` / ``.s``.
"""

from heron.compiler.driver import (
    DEFAULT_ARCH,
    TARGETS,
    BackendResult,
    CompiledFusion,
    compile_backend,
    compile_kernel,
    compile_module,
    emit,
    lower,
)
from heron.compiler.dumps import DumpWriter, stage_file_name
from heron.compiler.fusions import find_fusion, fusions_of
from heron.compiler.target import Target, default_target, presets

__all__ = [
    "DEFAULT_ARCH",
    "TARGETS",
    "BackendResult",
    "CompiledFusion",
    "DumpWriter",
    "compile_backend",
    "compile_kernel",
    "compile_module",
    "emit",
    "find_fusion",
    "fusions_of",
    "lower",
    "stage_file_name",
    "Target",
    "default_target",
    "presets",
]
