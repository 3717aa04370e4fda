"""heron.emitters.dialect: the ``heron_gpu`` dialect, heron's ``xla_gpu``-style ops.

The ops are defined in IRDL (:mod:`.irdl_source`) and registered into an MLIR
context at run time (:func:`make_context`), so no C++ build is needed. IRDL
checks shapes and kinds; :func:`verify_xla_ops` adds the rules that need the
indexing map or the symbol table. :mod:`.builders` creates each op from
Python. docs/dialect.md describes every op.
"""

from heron.emitters.dialect.builders import (
    allocate_shared_op,
    apply_indexing_op,
    atomic_rmw_op,
    ldmatrix_op,
    loop_op,
    map_attr,
    predicated_extract_op,
    predicated_insert_op,
    pure_call_op,
    shuffle_reduce_op,
    sync_threads,
    sync_threads_op,
    yield_op,
)
from heron.emitters.dialect.context import ensure_dialect_loaded, make_context
from heron.emitters.dialect.irdl_source import DIALECT_NAME, OP_NAMES
from heron.emitters.dialect.verifier import (
    DialectVerificationError,
    op_indexing_map,
    verify_xla_ops,
)

__all__ = [
    "DIALECT_NAME",
    "OP_NAMES",
    "DialectVerificationError",
    "allocate_shared_op",
    "apply_indexing_op",
    "atomic_rmw_op",
    "ensure_dialect_loaded",
    "ldmatrix_op",
    "loop_op",
    "make_context",
    "map_attr",
    "op_indexing_map",
    "predicated_extract_op",
    "predicated_insert_op",
    "pure_call_op",
    "shuffle_reduce_op",
    "sync_threads",
    "sync_threads_op",
    "verify_xla_ops",
    "yield_op",
]
