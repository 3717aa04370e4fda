"""heron.indexing: indexing maps and the analyses built on them.

Everything in codegen and cost modelling asks "which input element does this
output element read?"; the answer is an ``IndexingMap`` (an affine map with a
domain). This package holds:

- ``affine``: affine expressions over dimensions and symbols;
- ``interval``, ``indexing_map``: ranges and the map itself (dimensions, range
  and runtime symbols, constraints), with its text form (``parser``);
- ``range_analysis``, ``simplifier``, ``mod_expansion``, ``composition``: interval
  analysis, the range-aware simplifier (and its variant that also tries ``mod``s
  written out), composition of maps;
- ``hlo_indexing``, ``fusion_indexing``: output-to-input maps per HLO op and
  through whole fused computations;
- ``thread_maps``: launch dimensions and the loop emitter's thread-to-output map;
- ``mlir_text``: conversion to and from MLIR ``affine_map`` text for emission.
"""

from heron.indexing.affine import AffineExpr, Constant, Dim, Symbol
from heron.indexing.composition import compose
from heron.indexing.fusion_indexing import fusion_input_maps
from heron.indexing.hlo_indexing import input_to_output_map, output_to_input_maps
from heron.indexing.indexing_map import IndexingError, IndexingMap, Variable
from heron.indexing.interval import Interval
from heron.indexing.parser import parse_affine_expr, parse_indexing_map
from heron.indexing.simplifier import is_known_empty, rescale_symbols, simplify

__version__ = "0.1.0"


def forget_memos() -> None:
    """Forget every memo of the package (ops' maps, simplified and composed maps, the
    domains' simplifiers, parsed maps, expressions' variables, interned expressions): what a
    benchmark calls between runs so that each starts cold, as a fresh process would."""
    from heron.indexing import (
        affine,
        composition,
        hlo_indexing,
        mod_expansion,
        parser,
        simplifier,
    )

    hlo_indexing.forget_maps()
    simplifier.simplify.cache_clear()
    mod_expansion.simplify_with_mod_expansion.cache_clear()
    composition.compose.cache_clear()
    simplifier.forget_domains()
    parser.forget_parsed()
    affine.used_variables.cache_clear()
    affine.forget_interned()


__all__ = [
    "AffineExpr",
    "Constant",
    "Dim",
    "IndexingError",
    "IndexingMap",
    "Interval",
    "Symbol",
    "Variable",
    "compose",
    "forget_memos",
    "fusion_input_maps",
    "input_to_output_map",
    "is_known_empty",
    "output_to_input_maps",
    "parse_affine_expr",
    "parse_indexing_map",
    "rescale_symbols",
    "simplify",
]
