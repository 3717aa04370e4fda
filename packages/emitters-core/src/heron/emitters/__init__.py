"""heron.emitters: what every hero emitter shares.

Today this package holds the plugin contract for hero emitters:
``heron.emitters.hookspecs`` (the ``heron_emitter_specs`` hook and
``EmitterSpec``) and ``heron.emitters.registry`` (loading the ``heron.emitters``
entry-point group and choosing the emitter for a fusion).

What will live here too (see ARCHITECTURE.md): the ``xla_gpu``-style ops
(loop, apply_indexing, pure_call, allocate_shared, sync_threads,
shuffle_reduce, atomic_rmw, predicated_insert/extract...), elemental
HLO-to-MLIR emission, the emitter base class, the MLIR pass pipeline and the
kernel ABI.
"""

__version__ = "0.1.0"
