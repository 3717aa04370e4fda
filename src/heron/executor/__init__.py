"""heron.executor: running a whole module's entry computation on a device.

``outline_module`` gives an unfused module (as JAX prints it) a fusion per
computing instruction; ``run_module`` runs the entry computation fusion by
fusion, in order, with the host doing what needs no kernel.
"""

from heron.executor.outline import HOST_OPCODES, REFUSED_OPCODES, outline_module
from heron.executor.sequential import KernelRecord, SequentialRun, run_module

__all__ = [
    "HOST_OPCODES",
    "REFUSED_OPCODES",
    "KernelRecord",
    "SequentialRun",
    "outline_module",
    "run_module",
]
