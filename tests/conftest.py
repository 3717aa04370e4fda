"""Fixtures shared by the cross-package tests (the root conftest.py has the corpus and GPU ones)."""

import pytest


@pytest.fixture
def hlo(tmp_path):
    def write(text: str, name: str = "module.hlo") -> str:
        path = tmp_path / name
        path.write_text(text)
        return str(path)

    return write
