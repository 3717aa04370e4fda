"""CI's bounded sample of the fuzzer (tests/fuzz/heron_fuzz; docs/reliability.md, "Fuzzing").

A fixed seed and 300 cases (100 corpus mutants, 100 generated fusions, 100 damaged
npz archives), each in its own subprocess under the fuzzer's time and memory
limits, must give zero findings: no internal error, traceback, signal, hang,
multi-line refusal or allocation past the budget, and no disagreement on a
generated (valid) fusion. The full runs are `nox -s fuzz`; this sample keeps the
contract from regressing between them. A finding here prints its replay
command (and is saved under the test's tmp_path).
"""

from __future__ import annotations

import sys
from pathlib import Path

FUZZ_ROOT = Path(__file__).resolve().parent / "fuzz"
if str(FUZZ_ROOT) not in sys.path:
    sys.path.insert(0, str(FUZZ_ROOT))

from heron_fuzz.runner import Options, run, summary  # noqa: E402

#: Fixed: the sample must be the same cases on every CI run.
SEED = 20261124
CASES = 300


def test_the_fuzz_sample_has_no_findings(corpus_dir: Path, tmp_path: Path) -> None:
    options = Options(
        seed=SEED,
        cases=CASES,
        jobs=2,
        timeout=120.0,  # generous: CI shares its cores with the rest of the suite
        corpus=corpus_dir,
        findings_dir=tmp_path / "findings",
    )
    outcomes = run(options, log=None)
    kinds = {o.case.kind for o in outcomes}
    assert kinds == {"mutation", "generated", "npz"}, kinds
    report = summary(outcomes, 0.0)
    findings = [f for o in outcomes for f in o.findings]
    replay = (tmp_path / "findings" / "findings.jsonl").read_text() if findings else ""
    assert not findings, f"{report}\n{replay}"
