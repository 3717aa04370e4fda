"""heron.partitioner: the computation partitioner (skeleton).

What will live here (see ARCHITECTURE.md): splitting a fusion computation into
subgraphs that become one MLIR function each, choosing their roots, and
injecting the hero of an epilogue so that reductions and transposes can be
followed by elementwise code. Nothing of that exists yet in this version.
"""

__version__ = "0.1.0"
