"""heron.plugins: the built-in hero emitters, one module each.

``loop`` (the default: it claims every fusion, at the lowest priority),
``transpose``, ``reduction`` (row, multi-row, column and small-column, in
``reduction_row`` and ``reduction_column``), ``scatter``, ``concatenate``,
``dynamic_update_slice`` (in place), ``input_slices``, ``sort``, ``gemm`` and
``row_normalization`` (softmax and norms, a row in registers: one kernel); ``iteration``,
``reduction_base`` and ``transpose_tiling`` are what several of them share.

Each emitter is registered through the ``heron.emitters`` entry-point group in
this distribution's pyproject.toml, exactly as a third-party emitter would be,
implements the ``heron_emitter_specs`` hook of ``heron.emitters.hookspecs``,
and claims the fusions whose analysis (``heron.emitters.fusion_analysis``)
names its hero. The package imports heron.hlo, heron.indexing,
heron.partitioner and heron.emitters only (docs/architecture.md); nothing
imports it: hero selection finds the emitters through their entry points.
docs/emitters.md describes each one.
"""

__version__ = "0.1.0"
