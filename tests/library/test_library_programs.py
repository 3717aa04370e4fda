"""Large programs that libraries built on jax write, compiled and run as a user runs them.

The corpora (programs/, models/) hold small programs; the programs of
``benchmarks/library_programs.py`` are what brax, jax-cosmo, diffrax, numpyro, blackjax
and sax make of a physics gradient, a Fisher matrix, an ODE adjoint, NUTS chains and a
circuit: hundreds of computations and dozens of while loops each, where a compile that
only the benchmarks had timed once aborted the process (docs/reliability.md). They are
too large to commit, so ``nox -s library`` installs the libraries, writes each program
with its arguments and XLA:CPU's results (``library_programs.py DIR --io``) and runs
this file with ``HERON_LIBRARY_PROGRAMS=DIR``; without that folder every case skips,
saying so.

Each program runs through the ``heron`` command a user types: ``heron run NAME.hlo
--target T --backend interpreter --inputs ... --check`` (compiled for the h100 preset, and
for the mi300x one where its run is short, run on the interpreter, checked against the
reference evaluator under ``heron check``'s tolerance), in its own process, so that an
abort is a failure of that case and not of the session; its results must then equal
XLA:CPU's within the program corpus's bounds (``heron_test_support.programs.assert_close``).
"""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest
from heron_test_support.programs import assert_close

from heron.hlo.npz_io import load_outputs

#: The programs of benchmarks/library_programs.py, by name (the folder must hold each).
NAMES = (
    "brax_ant_grad",
    "jax_cosmo_fisher",
    "diffrax_neural_ode_grad",
    "numpyro_nuts_schools",
    "blackjax_nuts_logistic",
    "expn_grad",
    "sax_mzi_lattice",
)
FOLDER = os.environ.get("HERON_LIBRARY_PROGRAMS")
#: How much wider than the corpus's bound (16 eps of the largest result) a program's results
#: may differ from XLA:CPU's where the program itself amplifies roundings: heron's reference
#: evaluator, correct op by op, is as far from XLA:CPU there (`heron run --backend
#: reference`, measured with jax 0.10.2): sax's interferometer 134 eps (one f64 ulp of one
#: waveguide's length moves the power by 86 eps), numpyro's NUTS chain 110 eps (its
#: accept and tree-doubling decisions), while heron is within 5 and 16 eps of the
#: evaluator; jax-cosmo's Fisher matrix (a solve with the Gaussian covariance) has the
#: evaluator 13 eps from XLA:CPU and heron, whose reductions sum in another order, 28 eps
#: from the evaluator and 34 from XLA:CPU.
CONDITIONING = {"sax_mzi_lattice": 16, "numpyro_nuts_schools": 8, "jax_cosmo_fisher": 4}
#: The programs also compiled for AMD's MI300X (wavefronts of 64, its launch shapes): all
#: but the two whose interpreter runs take minutes (jax-cosmo's, brax's), which the h100
#: cases cover.
ON_MI300X = (
    "diffrax_neural_ode_grad",
    "numpyro_nuts_schools",
    "blackjax_nuts_logistic",
    "expn_grad",
    "sax_mzi_lattice",
)
CASES = [(name, "h100") for name in NAMES] + [(name, "mi300x") for name in ON_MI300X]


def _program_folder() -> Path:
    if not FOLDER:
        pytest.skip("no library programs: `nox -s library` writes them (HERON_LIBRARY_PROGRAMS)")
    return Path(FOLDER)


@pytest.mark.parametrize(("name", "target"), CASES)
def test_library_program_gives_xla_cpu_results(name: str, target: str, tmp_path: Path) -> None:
    folder = _program_folder()
    module = folder / f"{name}.hlo"
    assert module.is_file(), f"{module}: missing (library_programs.py {folder} --io writes it)"
    got_path = tmp_path / "heron.npz"
    # This environment's `heron` (beside its python), in a process of its own.
    heron = shutil.which("heron", path=str(Path(sys.executable).parent))
    assert heron is not None, f"the heron command is not installed beside {sys.executable}"
    command = [heron, "run", str(module), "--target", target]
    command += ["--backend", "interpreter", "--inputs", str(folder / f"{name}.inputs.npz")]
    command += ["--output", str(got_path), "--check", "--quiet"]
    run = subprocess.run(command, capture_output=True, text=True)
    assert run.returncode == 0, (
        f"heron run {name} --target {target} exited {run.returncode}:\n"
        f"{run.stdout[-4000:]}\n{run.stderr[-4000:]}"
    )
    got, expected = load_outputs(got_path), load_outputs(folder / f"{name}.outputs.npz")
    assert len(got) == len(expected), f"{name}: {len(got)} results, XLA:CPU's {len(expected)}"
    for index, (g, e) in enumerate(zip(got, expected, strict=True)):
        assert_close(g, e, f"{name} out{index}", factor=CONDITIONING.get(name, 1))
