"""heron.emitters: what every hero emitter shares, from a fusion to LLVM IR.

- fusion analysis (:mod:`.fusion_analysis`, with :mod:`.heroes`,
  :mod:`.fusion_graph`, :mod:`.transposes`, :mod:`.reductions`): the hero XLA
  would choose for a fusion on a target, computed once and handed to the
  emitters, for a :class:`heron.target.Target`;
- the plugin contract (:mod:`.hookspecs`: ``EmitterSpec``, whose ``claims`` and
  ``factory`` take that analysis), the registry of the ``heron.emitters``
  entry-point group (:mod:`.registry`) and the choice of an emitter
  (:mod:`.selection`: ``emit_fusion(fusion, target)``);
- the ``heron_gpu`` dialect (:mod:`.dialect`: loop, apply_indexing, pure_call,
  allocate_shared, sync_threads, shuffle_reduce, atomic_rmw,
  predicated_insert/extract), elemental HLO-to-MLIR emission
  (:mod:`.elemental`) and the emitter base class (:mod:`.emitter_base`);
- heron's MLIR pass pipeline (:mod:`.pipeline`), down to ``lower-tensors``, and
  the backend-neutral ``gpu.module`` -> LLVM IR lowering the GPU backends'
  stages share (:mod:`.pipeline.gpu_lowering`).
"""

from heron.emitters.native_libraries import load_mlir_bindings

# Before any module of this package imports mlir: see native_libraries.
load_mlir_bindings()

__version__ = "0.1.0"
