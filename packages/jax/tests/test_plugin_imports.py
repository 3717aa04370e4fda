"""Loading heron-jax's custom-call plugins (which every compile of a module with a custom
call does, through the ``heron.custom_calls`` entry points) imports neither jax nor
scipy's LAPACK: they cost 2 s of a fresh ``heron compile`` (0.6 s with bytecode cached)
for a convolution model that calls neither."""

from __future__ import annotations

import subprocess
import sys

CODE = """
import sys
from heron.hlo.custom_calls.registry import default_custom_calls

names = default_custom_calls().targets()
assert any(name.startswith("lapack_") for name in names), names  # heron-jax's are there
heavy = sorted(m for m in ("jax", "jaxlib", "scipy.linalg") if m in sys.modules)
print(",".join(heavy))
"""


def test_loading_the_custom_call_plugins_imports_neither_jax_nor_scipy_lapack():
    done = subprocess.run(
        [sys.executable, "-c", CODE], capture_output=True, text=True, check=False, timeout=120
    )
    assert done.returncode == 0, done.stderr
    assert done.stdout.strip() == ""
