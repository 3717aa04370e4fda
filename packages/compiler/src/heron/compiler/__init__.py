"""heron.compiler: the Target, and compiling a fusion for it through a backend.

- :mod:`~heron.target`: :class:`Target`, the frozen description of
  a GPU (presets, ``Target.resolve`` for ``--target/--arch``, a real device);
- :mod:`~heron.compiler.driver`: :func:`compile_fusion`, the one compile
  driver: emission for the Target, heron's passes, then the backend's declared
  stages (``heron.runtime.core.hookspecs``), timed, dumped and checked in order,
  to a :class:`CompiledKernel` holding the KernelImage a device loads;
- :mod:`~heron.compiler.device_kernels`: running a compiled kernel on a device;
- :mod:`~heron.compiler.executable`: a module compiled into an executable
  (thunks, buffer assignment, kernel images: an artefact);
- :mod:`~heron.compiler.program_run`: the one way a module runs on a device,
  an executable compiled in memory and its thunks run (``heron run``,
  ``heron profile``, the tests);
- :mod:`~heron.compiler.fusions`: which fusions of a module are compiled;
- :mod:`~heron.compiler.dumps`: every stage of a fusion written to a directory.

Importing this package does not import MLIR; compiling does.
"""

__version__ = "0.1.0"

from heron.compiler.device_kernels import DeviceRun, run_on_device, target_for_device
from heron.compiler.driver import (
    Artefact,
    CompiledKernel,
    StageRecord,
    compile_emitted,
    compile_fusion,
    compile_fusion_for_backends,
    stage_names,
)
from heron.compiler.dumps import DumpWriter, stage_file_name
from heron.compiler.fusions import find_fusion, fusions_of, selected_fusions
from heron.target import Target, default_target, presets

__all__ = [
    "Artefact",
    "CompiledKernel",
    "DeviceRun",
    "DumpWriter",
    "StageRecord",
    "Target",
    "compile_emitted",
    "compile_fusion",
    "compile_fusion_for_backends",
    "default_target",
    "find_fusion",
    "fusions_of",
    "presets",
    "run_on_device",
    "selected_fusions",
    "stage_file_name",
    "stage_names",
    "target_for_device",
]
