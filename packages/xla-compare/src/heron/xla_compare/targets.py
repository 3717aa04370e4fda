"""The devices ``heron xla`` compiles for: XLA's own target specs and heron's presets.

Each name is a heron Target preset (``heron.compiler.Target.preset``) and an
XLA GpuTargetConfigProto shipped beside this module (``specs/``, copied from
openxla/xla ``xla/backends/gpu/target_config/specs``, Apache-2.0; the same
numbers heron's presets hold).
"""

from __future__ import annotations

from importlib import resources

#: target name -> (XLA spec file in specs/, the sm name XLA compiles for)
TARGETS = {
    "h100": ("h100_sxm.txtpb", "sm_90a"),
    "a100": ("a100_sxm_80.txtpb", "sm_80"),
}


def target_config(name: str) -> str:
    """The GpuTargetConfigProto text for ``name``; KeyError for a target XLA has no spec for."""
    spec, _ = TARGETS[name]
    return resources.files("heron.xla_compare").joinpath("specs", spec).read_text()
