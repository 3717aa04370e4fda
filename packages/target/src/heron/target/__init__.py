"""heron.target: the one description of the GPU a program is compiled for and runs on.

:class:`Target` (presets in ``presets/``, one TOML file per device;
``Target.resolve`` for ``--target/--arch``; ``Target.from_device`` for a real
device's properties) is read by every layer: the HLO passes, the emitters and
their passes, the backends' stages, the runtimes. It depends on attrs alone,
so that none of them has to restate a device fact (an import-linter contract
keeps it a leaf).
"""

from heron.target.target import (
    BACKENDS,
    Target,
    TargetError,
    default_target,
    presets,
    ptx_isa_version,
)

__version__ = "0.1.0"

__all__ = ["BACKENDS", "Target", "TargetError", "default_target", "presets", "ptx_isa_version"]
