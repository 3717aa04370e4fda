"""local-packages.txt, plain pip's way to install heron from a checkout (issue 31).

`pip install -r local-packages.txt -e '.[cuda,jax]'` resolves the meta distribution's
pins on heron's own packages from the folders the file lists; `nox -s xla` runs that
command (a dry run, with the package index) in a fresh venv. This is the part without
the network: the file names every package folder, and every heron distribution the meta
distribution or one of its extras requires.
"""

from __future__ import annotations

import re
import tomllib
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent


def _listed() -> list[str]:
    lines = (ROOT / "local-packages.txt").read_text().splitlines()
    return [line.split(None, 1)[1] for line in lines if line.startswith("-e ")]


def _distribution(folder: str) -> str:
    return tomllib.loads((ROOT / folder / "pyproject.toml").read_text())["project"]["name"]


def test_every_package_folder_is_listed_editable() -> None:
    listed = _listed()
    folders = sorted(
        p.parent.relative_to(ROOT).as_posix() for p in ROOT.glob("packages/*/pyproject.toml")
    )
    assert sorted(listed) == folders
    assert len(set(listed)) == len(listed)
    # Every other line is a comment: the file holds nothing that pip would install from
    # an index.
    for line in (ROOT / "local-packages.txt").read_text().splitlines():
        assert not line.strip() or line.startswith(("#", "-e packages/")), line


def test_every_heron_requirement_of_the_meta_distribution_comes_from_a_listed_folder() -> None:
    project = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]
    requirements = list(project["dependencies"])
    for extra in project["optional-dependencies"].values():
        requirements += extra
    names = {re.split(r"[\[=<>~! ;]", r, maxsplit=1)[0] for r in requirements}
    provided = {_distribution(folder) for folder in _listed()}
    assert {n for n in names if n.startswith("heron-")} <= provided
