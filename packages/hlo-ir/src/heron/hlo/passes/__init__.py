"""HLO passes: the pass manager, and the target-independent passes, one module each.

- ``manager``: :class:`HloPass`, :class:`Pipeline`, :class:`FixedPoint` and
  :func:`run_pipeline` (verify, time and dump after every pass);
- ``registry``: passes by name (``heron opt --passes``);
- ``pipelines``: the standard target-independent pipeline;
- the passes: ``call_inliner``, ``tuple_simplifier``, ``dce``, ``cse``;
- ``outline`` gives every computing instruction of an unfused entry
  computation (as JAX prints it) a fusion of its own.
"""

from heron.hlo.passes.manager import (
    FixedPoint,
    HloPass,
    PassFailure,
    PassRecord,
    Pipeline,
    PipelineReport,
    run_pipeline,
)
from heron.hlo.passes.outline import HOST_OPCODES, REFUSED_OPCODES, outline_module
from heron.hlo.passes.pipelines import simplification_pipeline
from heron.hlo.passes.registry import PASSES, hlo_pass, pass_named, register_pass

__all__ = [
    "HOST_OPCODES",
    "PASSES",
    "REFUSED_OPCODES",
    "FixedPoint",
    "HloPass",
    "PassFailure",
    "PassRecord",
    "Pipeline",
    "PipelineReport",
    "hlo_pass",
    "outline_module",
    "pass_named",
    "register_pass",
    "run_pipeline",
    "simplification_pipeline",
]
