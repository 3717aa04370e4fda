"""Every corpus fusion gets XLA's own emitter: its folder's, with checked exceptions.

The analysis is for the H100 preset (a 32-lane warp, 132 SMs), the target the
corpus files were written against. ``XLA_EMITTER_OF_FILE`` lists the files
whose folder is not XLA's choice (checked with XLA:GPU itself: reductions of
another variant than their folder's, and the 4-bit transposes and multi-root
concatenates XLA 0.12 emits as loops).
"""

from __future__ import annotations

from pathlib import Path

import pytest

from heron.compiler import fusions_of
from heron.emitters.fusion_analysis import analyse_fusion
from heron.harness.corpus import XLA_EMITTER_OF_FILE
from heron.hlo.parser import parse_module_file
from heron.target import Target

CORPUS = Path("/work/shared/corpus/xla")
EMITTER_OF_FOLDER = {
    "common/loop": "loop",
    "gpu/convert": "loop",
    "gpu/transpose": "transpose",
    "gpu/reduce_row": "reduce_row",
    "gpu/reduce_multirow": "reduce_multirow",
    "gpu/reduce_column": "reduce_column",
    "gpu/reduce_column_small": "reduce_column_small",
    "gpu/scatter": "scatter",
    "common/concatenate": "concatenate",
    "gpu/concatenate": "concatenate",
    "common/dynamic_update_slice": "dynamic_update_slice",
}
FILES_PER_FOLDER = {
    "common/loop": 30,
    "gpu/convert": 1,
    "gpu/transpose": 22,
    "gpu/reduce_row": 13,
    "gpu/reduce_multirow": 4,
    "gpu/reduce_column": 6,
    "gpu/reduce_column_small": 3,
    "gpu/scatter": 12,
    "common/concatenate": 6,
    "gpu/concatenate": 2,
    "common/dynamic_update_slice": 6,
}
FILES = sorted(CORPUS.glob("*/*/*.hlo"))


def _folder(path: Path) -> str:
    return f"{path.parent.parent.name}/{path.parent.name}"


def test_every_file_is_seen_per_folder():
    counts: dict[str, int] = {}
    for path in FILES:
        counts[_folder(path)] = counts.get(_folder(path), 0) + 1
    assert counts == FILES_PER_FOLDER
    assert len(FILES) == 105


@pytest.mark.parametrize("path", FILES, ids=[f"{_folder(p)}/{p.stem}" for p in FILES])
def test_fusion_kind_matches_folder(path: Path):
    expected = XLA_EMITTER_OF_FILE.get(
        f"{path.parent.name}/{path.name}", EMITTER_OF_FOLDER[_folder(path)]
    )
    fusions = fusions_of(parse_module_file(path))
    assert fusions
    h100 = Target.preset("h100")
    assert [analyse_fusion(f, h100).kind for f in fusions] == [expected] * len(fusions)


def test_the_exceptions_are_xla_0_12s_own_choices():
    """Reductions of another variant than their folder's; 4-bit transposes; multi-root concats.

    XLA 0.12 (tests/data/xla_reference.json) gives reduce_column/small (kept
    minor dimension 4) its small-column launch (128 threads, a 32x5 tile),
    inefficient_codegen (rows of 4 f64) a multi-row block of 4 threads, and the
    last four files its loop emitter's launch (one thread per output element or
    byte).
    """
    assert XLA_EMITTER_OF_FILE == {
        "reduce_row/reduction_groups_two_in_same_group.hlo": "reduce_column_small",
        "reduce_column/small.hlo": "reduce_column_small",
        "reduce_row/inefficient_codegen.hlo": "reduce_multirow",
        "transpose/partial_tile_s4.hlo": "loop",
        "transpose/transpose_10_s4.hlo": "loop",
        "concatenate/multiple_roots_epilogue.hlo": "loop",
        "concatenate/multiple_roots_shared_hero.hlo": "loop",
    }


def test_every_installed_emitter_declines_what_is_not_a_fusion():
    """claims() on anything but an analysis is False for every hero, never an error."""
    from heron.emitters.registry import load_emitters

    registry = load_emitters()
    heroes = {"loop", "transpose", "scatter", "concatenate", "dynamic_update_slice"}
    assert heroes | {"input_slices", "reduce_row", "reduce_column"} <= set(registry.names())
    for spec in registry.specs:
        assert spec.claims(object()) is False, spec.name
