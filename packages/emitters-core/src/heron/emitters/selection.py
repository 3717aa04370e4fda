"""Hero selection: which installed emitter emits a fusion, and emitting it with that one.

The registry (``heron.emitters.registry``) reads the ``heron.emitters``
entry-point group; loading it scans installed distributions, so the default
registry is loaded once per process and reused. Tests and plugins pass their
own ``registry``.
"""

from __future__ import annotations

import functools

import attrs

from heron.emitters.emitter_base import EmittedKernel
from heron.emitters.hookspecs import EmitterSpec
from heron.emitters.registry import EmitterRegistry, load_emitters
from heron.hlo.ir import Instruction

__all__ = ["default_registry", "emit_fusion", "select_emitter"]


@functools.cache
def default_registry() -> EmitterRegistry:
    """The emitters installed in this environment (loaded on first use, then cached)."""
    return load_emitters()


def select_emitter(fusion: Instruction, registry: EmitterRegistry | None = None) -> EmitterSpec:
    """The emitter spec for ``fusion``: the highest-priority claimant (``PluginError`` if none)."""
    return (registry or default_registry()).select(fusion)


def emit_fusion(
    fusion: Instruction, target: object | None = None, registry: EmitterRegistry | None = None
) -> EmittedKernel:
    """Select the emitter for ``fusion`` and emit it (stage ``emitted`` of docs/pipeline.md).

    ``target`` (an ``EmitterTarget``) is the device the fusion is emitted for.
    """
    spec = select_emitter(fusion, registry)
    kernel = spec.factory(fusion).emit()
    if kernel.emitter != spec.name:  # the class's name and the registered name may differ
        kernel = attrs.evolve(kernel, emitter=spec.name)
    return kernel
