"""heron.xla_compare: heron's kernels beside XLA:GPU's, for the same module, without a GPU.

XLA:GPU compiles "deviceless" from a GpuTargetConfigProto (no device, no
driver): the jax CUDA PJRT plugin, driven through the PJRT C API in a
subprocess (:mod:`~heron.xla_compare.worker`, one process per compile: an
XLA CHECK failure aborts it), leaves its optimized HLO, thunk sequence
(launches) and PTX in a dump folder, which :mod:`~heron.xla_compare.xla_side`
reads. :mod:`~heron.xla_compare.heron_side` compiles the same module with
heron for the same target; :mod:`~heron.xla_compare.compare` pairs the
kernels and measures both PTX the same way (``heron.runtime.cuda.ptx_statistics``
and one ptxas); :mod:`~heron.xla_compare.report` prints the comparison
(``heron xla``); :mod:`~heron.xla_compare.reference` builds the corpus
reference table (``nox -s xla-reference``, tests/data/xla_reference.json).

Where XLA comes from (:mod:`~heron.xla_compare.install`): this Python when it
has jaxlib and jax-cuda13-pjrt (``pip install 'heron[xla]'``), or the Python
``HERON_XLA_PYTHON`` names; ``HERON_XLA_PLUGIN`` may name another
``xla_cuda_plugin.so``. Nothing in heron depends on this package but the
``heron xla`` command.
"""

__version__ = "0.1.0"

from heron.xla_compare.install import INSTALL_HINT, XlaInstallation, XlaNotInstalledError, find_xla
from heron.xla_compare.targets import TARGETS, target_config

__all__ = [
    "INSTALL_HINT",
    "TARGETS",
    "XlaInstallation",
    "XlaNotInstalledError",
    "find_xla",
    "target_config",
]
