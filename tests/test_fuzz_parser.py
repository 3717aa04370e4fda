"""The parser fuzzer's property, checked without atheris (docs/reliability.md, "Fuzzing").

``nox -s fuzz-parser`` runs ``heron_fuzz.parser_atheris`` under libFuzzer's
coverage guidance; CI has no atheris, so this runs the same property
(:func:`check_one`: refused with an HloError, or parsed, printed and parsed
again) over every corpus file, seeded byte mutants of them, and the inputs the
coverage-guided runs found.
"""

from __future__ import annotations

import random
import sys
from pathlib import Path

import pytest

FUZZ_ROOT = Path(__file__).resolve().parent / "fuzz"
if str(FUZZ_ROOT) not in sys.path:
    sys.path.insert(0, str(FUZZ_ROOT))

from heron_fuzz.parser_atheris import check_one  # noqa: E402

#: Inputs the coverage-guided fuzzer found that once broke the property.
FOUND = [
    # 3,000 nested '(' in a shape: a RecursionError before MAX_TUPLE_NESTING.
    b"HloModule m\nENTRY e { ROOT p = " + b"(" * 3000 + b"f32[]" + b")" * 3000 + b" parameter(0) }",
]


def test_every_corpus_file_round_trips(corpus_dir: Path) -> None:
    files = sorted(corpus_dir.rglob("*.hlo"))
    assert files
    for path in files:
        check_one(path.read_bytes())


def test_seeded_byte_mutants_keep_the_property(corpus_dir: Path) -> None:
    files = sorted(corpus_dir.rglob("*.hlo"))
    rng = random.Random("heron-parser-mutants")
    for _ in range(2000):
        data = bytearray(rng.choice(files).read_bytes())
        for _ in range(rng.randint(1, 4)):
            at = rng.randrange(len(data))
            choice = rng.random()
            if choice < 0.5:
                data[at] = rng.randrange(256)
            elif choice < 0.75:
                del data[at]
            else:
                data[at:at] = rng.choice([b"(", b"{", b")", b"}", b",", b"=", b"\xff"])
        check_one(bytes(data))


@pytest.mark.parametrize("data", FOUND, ids=lambda d: f"{len(d)}-bytes")
def test_inputs_the_coverage_guided_fuzzer_found(data: bytes) -> None:
    check_one(data)
