"""heron.partitioner: cut a fused computation into functions that emit each instruction once.

Why: emitting a fusion recursively from its root re-emits an instruction once
per path that reaches it, which grows exponentially on chains of multi-user
pads and slices. The partitioner instead groups instructions that can share
one evaluation (single users, or users that all read them through the same
indexing, checked with ``heron.indexing``) into subgraphs; the emitters turn
each subgraph into one function and connect them with calls.

- ``partition(computation, heroes=...)`` -> ``PartitionedComputation``;
- ``Subgraph`` / ``Signature``: a function's instructions, roots, injected
  heroes, and its arguments (one tensor per fusion parameter, one index per
  output dimension, injected values) and results (one per root);
- heroes that choose their own iteration order (transpose, reduce,
  concatenate) get *epilogues*: the instructions after them, with the hero's
  value injected as an argument; instructions in both a prologue and an
  epilogue are computed in both and reported as ``duplicated``.
"""

from heron.partitioner.partition import partition
from heron.partitioner.partitioned import PartitionedComputation
from heron.partitioner.regions import fusion_roots
from heron.partitioner.subgraph import Signature, Subgraph, function_name

__version__ = "0.1.0"

__all__ = [
    "PartitionedComputation",
    "Signature",
    "Subgraph",
    "function_name",
    "fusion_roots",
    "partition",
]
