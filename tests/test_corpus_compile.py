"""Acceptance: every file of the XLA corpus selects its folder's hero and compiles for both vendors.

The files are every ``.hlo`` under the corpus (the root conftest's
``corpus_dir``; a missing corpus fails the test). Each fusion is emitted
through the installed emitter plugins (the registry, as ``heron`` uses it),
the chosen emitter must be the one the folder names, and the fusion must
compile through every backend stage for the a100, h100 and mi300x presets:
PTX that ptxas accepts for sm_80 and sm_90, and an HSACO (an AMDGPU ELF) for
gfx942 (``heron.harness.corpus.compile_corpus_file``). A file
that fails shows the compiler's own error (which names the fusion and the op):
nothing is skipped.
"""

from __future__ import annotations

from collections import Counter

from heron.harness.corpus import (
    FOLDER_EMITTER,
    compile_corpus_file,
    corpus_targets,
    expected_emitter,
)

#: Files per corpus folder: a file that disappears from the parametrisation fails here.
FILES_PER_FOLDER = {
    "common/loop": 30,
    "common/concatenate": 6,
    "common/dynamic_update_slice": 6,
    "gpu/concatenate": 2,
    "gpu/convert": 1,
    "gpu/reduce_column": 6,
    "gpu/reduce_column_small": 3,
    "gpu/reduce_multirow": 4,
    "gpu/reduce_row": 13,
    "gpu/scatter": 12,
    "gpu/transpose": 22,
}


def test_the_corpus_has_the_expected_folders_and_files(corpus_dir):
    counts = Counter(str(p.parent.relative_to(corpus_dir)) for p in corpus_dir.rglob("*.hlo"))
    assert dict(counts) == FILES_PER_FOLDER
    assert {folder.rsplit("/", 1)[1] for folder in counts} <= set(FOLDER_EMITTER)


def test_selects_the_folders_hero_and_compiles_for_both_vendors(corpus_file):
    chosen, produced = compile_corpus_file(corpus_file)
    assert chosen, "no fusion found"
    assert set(chosen) == {expected_emitter(corpus_file)}
    assert produced == [target.arch for target in corpus_targets()] * len(chosen)


def test_the_corpus_targets_are_the_presets_of_its_archs():
    assert [(t.name, t.arch) for t in corpus_targets()] == [
        ("a100", "sm_80"),
        ("h100", "sm_90"),
        ("mi300x", "gfx942"),
    ]
