"""heron.hlo.xla_dump: which module of an XLA dump folder heron compiles."""

from __future__ import annotations

import pytest

from heron.hlo.xla_dump import XlaDumpError, dumped_modules, is_xla_dump, pick_module

MODULE = "HloModule m\nENTRY e {\n  ROOT p = f32[2] parameter(0)\n}\n"


def _dump(folder, *names):
    for name in names:
        (folder / f"{name}.before_optimizations.txt").write_text(MODULE)
        (folder / f"{name}.cpu_after_optimizations.txt").write_text(MODULE)
        (folder / f"{name}.debug_options").write_text("")
    return folder


def test_one_module_needs_no_selector(tmp_path):
    _dump(tmp_path, "module_0004.jit__lambda")
    module = pick_module(tmp_path)
    assert (module.number, module.name) == (4, "jit__lambda")
    assert module.path.name == "module_0004.jit__lambda.before_optimizations.txt"


def test_several_modules_are_listed_until_one_is_named(tmp_path):
    _dump(tmp_path, "module_0000.jit_broadcast_in_dim", "module_0003.jit_f", "module_0010.jit_g")
    assert [m.number for m in dumped_modules(tmp_path)] == [0, 3, 10]
    with pytest.raises(XlaDumpError, match="holds 3 modules.*module_0003.jit_f"):
        pick_module(tmp_path)
    assert pick_module(tmp_path, "3").name == "jit_f"
    assert pick_module(tmp_path, "0010").name == "jit_g"
    assert pick_module(tmp_path, "jit_f").number == 3
    assert pick_module(tmp_path, "module_0000.jit_broadcast_in_dim").number == 0
    with pytest.raises(XlaDumpError, match="no module 'jit_h'"):
        pick_module(tmp_path, "jit_h")


def test_a_folder_without_dumped_modules_is_refused_saying_how_to_dump(tmp_path):
    (tmp_path / "notes.txt").write_text("x")
    assert not is_xla_dump(tmp_path)
    with pytest.raises(XlaDumpError, match="--xla_dump_to"):
        pick_module(tmp_path)
    with pytest.raises(XlaDumpError, match="not a folder"):
        pick_module(tmp_path / "notes.txt")


def test_a_real_jax_dump(tmp_path):
    """jax's own dump: helpers beside the program; the program is picked by name."""
    import os
    import subprocess
    import sys

    script = (
        "import jax, jax.numpy as jnp\n"
        "f = jax.jit(lambda x: jnp.tanh(x) * 2)\n"
        "f(jnp.ones(4)).block_until_ready()\n"
    )
    env = dict(os.environ, XLA_FLAGS=f"--xla_dump_to={tmp_path} --xla_dump_hlo_as_text")
    env["JAX_PLATFORMS"] = "cpu"
    subprocess.run([sys.executable, "-c", script], check=True, env=env, timeout=120)
    assert is_xla_dump(tmp_path)
    module = pick_module(tmp_path, "jit__lambda")
    text = module.path.read_text()
    assert "tanh" in text and "HloModule jit__lambda" in text
