"""heron.jax on the repository's JAX corpus: jit equals jax's own CPU results, and caches.

Every program of programs/definitions.py runs through ``heron.jax.jit`` on the
interpreter (lowered by jax, compiled by heron into an executable, run by the
thunk executor) and is compared with ``jax.jit`` on the CPU (XLA:CPU) under
the program corpus' tolerance (``heron_test_support.programs.assert_close``). A
second call with the same signature does not compile again; a new jitted
function with the same cache folder takes the artefact from disk.
"""

from __future__ import annotations

import importlib.util
import sys
from pathlib import Path

import jax
import numpy as np
import pytest
from heron_test_support.jax_config import jax_x64
from heron_test_support.programs import assert_close

import heron.jax as heron_jax

ROOT = Path(__file__).resolve().parents[1]


def _load(name: str, path: Path):
    spec = importlib.util.spec_from_file_location(name, path)
    module = importlib.util.module_from_spec(spec)
    sys.modules[spec.name] = module
    spec.loader.exec_module(module)
    return module


DEFINITIONS = _load("_heron_program_definitions", ROOT / "programs" / "definitions.py")
BY_NAME = {program.name: program for program in DEFINITIONS.PROGRAMS}


@pytest.fixture(autouse=True)
def jax_32_bit():
    """The corpus was lowered with jax's default 32-bit types; other suites in the same
    process turn jax_enable_x64 on (a global), which changes what a program lowers to."""
    with jax_x64(False):
        yield


@pytest.fixture(scope="module")
def cache_dir(tmp_path_factory) -> Path:
    return tmp_path_factory.mktemp("heron-jax-cache")


def _leaves(tree) -> list[np.ndarray]:
    return [np.asarray(leaf) for leaf in jax.tree_util.tree_leaves(tree)]


@pytest.mark.parametrize("name", sorted(BY_NAME))
def test_jit_equals_jax_on_the_cpu(name: str, cache_dir: Path) -> None:
    program = BY_NAME[name]
    arguments = program.arguments()
    jitted = heron_jax.jit(program.function, backend="interpreter", cache_dir=cache_dir)
    got = jitted(*arguments)
    expected = jax.jit(program.function)(*arguments)
    assert jax.tree_util.tree_structure(got) == jax.tree_util.tree_structure(expected)
    got_leaves, expected_leaves = _leaves(got), _leaves(expected)
    assert len(got_leaves) == len(expected_leaves)
    for i, (g, e) in enumerate(zip(got_leaves, expected_leaves, strict=True)):
        assert_close(g, e, f"{name} leaf {i}")
    assert jitted.compiles + jitted.disk_hits == 1


def test_a_second_call_with_the_same_signature_does_not_compile(tmp_path: Path) -> None:
    program = BY_NAME["softmax"]
    arguments = program.arguments()
    jitted = heron_jax.jit(program.function, backend="interpreter", cache_dir=tmp_path)
    first = _leaves(jitted(*arguments))
    again = _leaves(jitted(*arguments))
    assert jitted.compiles == 1 and jitted.disk_hits == 0
    assert all(a.tobytes() == b.tobytes() for a, b in zip(first, again, strict=True))
    # Another signature compiles once more; the first is still cached.
    bigger = [np.concatenate([a, a]) for a in arguments]
    jitted(*bigger)
    jitted(*arguments)
    assert jitted.compiles == 2
    # A new function object over the same cache folder loads the verified artefact.
    fresh = heron_jax.jit(program.function, backend="interpreter", cache_dir=tmp_path)
    fresh(*arguments)
    assert (fresh.compiles, fresh.disk_hits) == (0, 1)


def test_a_damaged_cache_file_is_compiled_again(tmp_path: Path) -> None:
    program = BY_NAME["softmax"]
    arguments = program.arguments()
    heron_jax.jit(program.function, backend="interpreter", cache_dir=tmp_path)(*arguments)
    (cached,) = tmp_path.glob("*.heron")
    cached.write_bytes(cached.read_bytes()[:100])
    again = heron_jax.jit(program.function, backend="interpreter", cache_dir=tmp_path)
    expected = jax.jit(program.function)(*arguments)
    assert_close(np.asarray(again(*arguments)), np.asarray(expected), "softmax")
    assert (again.compiles, again.disk_hits) == (1, 0)


def test_a_heron_whose_code_changed_compiles_again(tmp_path: Path, monkeypatch) -> None:
    """The disk cache's key holds a fingerprint of heron's source: an artefact compiled by
    other code (a fix under the same version number) is not loaded."""
    program = BY_NAME["softmax"]
    arguments = program.arguments()
    heron_jax.jit(program.function, backend="interpreter", cache_dir=tmp_path)(*arguments)
    # heron.jax.jit is the function; its module holds the name the key is made with.
    monkeypatch.setattr(sys.modules["heron.jax.jit"], "heron_fingerprint", lambda: "changed")
    changed = heron_jax.jit(program.function, backend="interpreter", cache_dir=tmp_path)
    changed(*arguments)
    assert (changed.compiles, changed.disk_hits) == (1, 0)
    assert len(list(tmp_path.glob("*.heron"))) == 2


def test_the_fingerprint_follows_every_source_file(tmp_path: Path) -> None:
    from heron.jax.cache import source_fingerprint

    one, two = tmp_path / "one" / "heron", tmp_path / "two" / "heron"
    (one / "compiler").mkdir(parents=True)
    two.mkdir(parents=True)
    (one / "compiler" / "a.py").write_text("x = 1\n")
    (two / "b.py").write_text("y = 2\n")
    (two / "notes.txt").write_text("not source")
    first = source_fingerprint([one, two])
    assert first == source_fingerprint([two, one])  # the order folders are found in
    (two / "notes.txt").write_text("still not source")
    assert source_fingerprint([one, two]) == first
    (one / "compiler" / "a.py").write_text("x = 2\n")
    assert source_fingerprint([one, two]) != first


def test_an_unavailable_backend_is_refused_with_the_reason() -> None:
    jitted = heron_jax.jit(lambda x: x + 1, backend="cuda", cache_dir=False)
    with pytest.raises(heron_jax.HeronJaxError, match="backend 'cuda' is not available here"):
        jitted(np.ones(3, np.float32))


def test_lower_gives_the_module_heron_compiles() -> None:
    program = BY_NAME["softmax"]
    lowered = heron_jax.lower(program.function, *program.arguments())
    text = (ROOT / "programs" / "softmax" / "module.hlo").read_text()
    assert lowered.hlo_text.strip() == text.strip()


def test_heron_jax_lowers_for_the_gpu_it_runs_on():
    # Issue 29: a CUDA program gets the HLO jax gives XLA:GPU (no GPU needed to lower);
    # its cuSOLVER calls run on the host (heron.jax.gpu_solvers), and a GPU custom call
    # no installed plugin runs is refused by name when compiled.
    import jax.numpy as jnp

    from heron.compiler import Target
    from heron.compiler.executable import compile_program
    from heron.hlo.errors import HloError
    from heron.hlo.plugin_loading import PluginError
    from heron.jax.lowering import lower, platform_for

    assert (platform_for("cuda"), platform_for("rocm"), platform_for("interpreter")) == (
        "cuda",
        "rocm",
        "cpu",
    )
    a = jnp.eye(4) * 2
    cpu = lower(jnp.linalg.cholesky, a).hlo_text
    cuda = lower(jnp.linalg.cholesky, a, platform="cuda").hlo_text
    assert "lapack_spotrf_ffi" in cpu and "cusolver_potrf_ffi" in cuda
    program = compile_program(lower(jnp.linalg.cholesky, a, platform="cuda").module,
                              Target.preset("h100"), ("interpreter",))  # fmt: skip
    kinds = [thunk.kind for thunk in program.artefact.program]
    assert "custom_call" in kinds

    def perturbed(m):  # jaxlib's own perturbed tridiagonal solve: no plugin runs it
        return jax.lax.linalg.tridiagonal_solve(m[0], m[1], m[2], m[:, :1],
                                                perturb_singular=True)  # fmt: skip

    with pytest.raises((HloError, PluginError), match="cu_tridiagonal_solve_perturbed"):
        compile_program(lower(perturbed, a, platform="cuda").module,
                        Target.preset("h100"), ("interpreter",))  # fmt: skip


def test_a_target_is_named_as_on_the_command_line() -> None:
    """``target="a100"`` is the A100 preset (it used to fail with an AttributeError)."""
    jitted = heron_jax.jit(lambda x: x * 2, backend="interpreter", target="a100", cache_dir=False)
    assert np.array_equal(jitted(np.arange(4.0, dtype=np.float32)), [0, 2, 4, 6])
    assert jitted.target.name == "a100"


@pytest.mark.parametrize(
    ("target", "fragment"),
    [("h1000", "unknown target preset 'h1000'"), (3, "not int")],
)
def test_a_target_that_names_nothing_is_refused(target, fragment) -> None:
    with pytest.raises(heron_jax.HeronJaxError, match=fragment):
        heron_jax.jit(lambda x: x, backend="interpreter", target=target)


def test_a_weakly_and_a_strongly_typed_array_are_two_signatures(tmp_path: Path) -> None:
    """jnp.asarray(100) is weakly typed: it takes the other operand's int8 (and wraps),
    where an int32 array promotes the sum to int32. The cached program of one was run
    for the other (int8 -56 where jax gives int32 200)."""
    import jax.numpy as jnp

    def add(x, k):
        return x + k

    jitted = heron_jax.jit(add, backend="interpreter", cache_dir=tmp_path)
    x = np.full(3, 100, np.int8)
    for k in (jnp.asarray(100, jnp.int32), jnp.asarray(100), jnp.asarray(100, jnp.int32)):
        want, got = np.asarray(jax.jit(add)(x, k)), np.asarray(jitted(x, k))
        assert got.dtype == want.dtype and np.array_equal(got, want)
    assert jitted.compiles == 2


def test_a_static_argument_named_is_found_when_passed_by_position(tmp_path: Path) -> None:
    def step(x, train):
        return x * 2 if train else x

    jitted = heron_jax.jit(step, backend="interpreter", cache_dir=tmp_path, static_argnames="train")
    x = np.arange(3, dtype=np.float32)
    np.testing.assert_array_equal(jitted(x, True), x * 2)
    np.testing.assert_array_equal(jitted(x, train=False), x)
    by_number = heron_jax.jit(step, backend="interpreter", cache_dir=tmp_path, static_argnums=1)
    np.testing.assert_array_equal(by_number(x, train=True), x * 2)


@pytest.mark.filterwarnings("ignore:Some donated buffers were not usable")
def test_donation_by_name_skips_static_keyword_arguments(tmp_path: Path) -> None:
    def f(x, a, b, c):
        return x * a + b + c

    jitted = heron_jax.jit(
        f,
        backend="interpreter",
        cache_dir=tmp_path,
        static_argnames="a",
        donate_argnames="b",
    )
    x, b, c = (np.ones(3, np.float32) * v for v in (1, 2, 3))
    np.testing.assert_array_equal(jitted(x, a=2.0, b=b, c=c), np.full(3, 7.0))
    program = jitted._program((x,), {"a": 2.0, "b": b, "c": c})[0]
    assert program.donated == frozenset({1})  # b, the leaf after x; a is no parameter
