"""heron.harness: does a kernel compute what the reference evaluator computes?

- :mod:`~heron.harness.inputs`: random inputs with edge values per element type;
- :mod:`~heron.harness.tolerance`: how closely outputs must match (bitwise, ulps,
  reassociation bounds for reductions, a RUN line's bounds): ``output_tolerance``, the
  one decision that ``heron check`` and ``heron run --check`` both use;
- :mod:`~heron.harness.run_lines`: a corpus file's ``gpu_test_correctness`` flags;
- :mod:`~heron.harness.check`: ``check_file`` / ``check_fusion``, the ``heron check`` core.
"""

from heron.harness.check import (
    DEFAULT_MAX_ELEMENTS,
    CheckOptions,
    CheckReport,
    Finding,
    FusionReport,
    check_file,
    check_fusion,
    check_fusions,
    element_counts,
    shrunk_fusion,
)
from heron.harness.inputs import edge_array, float_values, input_sets, integer_values
from heron.harness.run_lines import RunLineError, RunSpec, parse_run_lines
from heron.harness.tolerance import (
    ErrorBounds,
    OutputTolerance,
    mismatches,
    ordered,
    output_sources,
    output_tolerance,
    ulp_bound,
    ulp_distance,
)

__all__ = [
    "DEFAULT_MAX_ELEMENTS",
    "CheckOptions",
    "CheckReport",
    "ErrorBounds",
    "Finding",
    "FusionReport",
    "OutputTolerance",
    "RunLineError",
    "RunSpec",
    "check_file",
    "check_fusion",
    "check_fusions",
    "edge_array",
    "element_counts",
    "float_values",
    "input_sets",
    "integer_values",
    "mismatches",
    "ordered",
    "output_sources",
    "output_tolerance",
    "parse_run_lines",
    "shrunk_fusion",
    "ulp_bound",
    "ulp_distance",
]
