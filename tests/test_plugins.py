"""The plugin machinery: entry points in, validated specs out, errors that name the culprit.

The installed out-of-tree fixture (tests/plugin_fixture, installed by the nox
``tests`` session) shows discovery through real installed metadata. Broken
plugins are fake distributions written to a temporary directory: a
``*.dist-info`` folder with METADATA and entry_points.txt is all that
importlib.metadata needs to see a distribution, so no install is needed.
"""

from __future__ import annotations

import importlib.metadata
import itertools
import textwrap
from pathlib import Path

import attrs
import pytest

from heron.emitters.hookspecs import EmitterSpec
from heron.emitters.registry import EmitterRegistry, load_emitters
from heron.hlo.plugin_loading import PluginError, PluginOrigin
from heron.runtime.core.hookspecs import BackendSpec
from heron.runtime.core.registry import BackendRegistry, load_backends

_counter = itertools.count()


@attrs.frozen
class FakeFusion:
    name: str


def _fixture_installed() -> None:
    try:
        importlib.metadata.distribution("heron-example-plugin")
    except importlib.metadata.PackageNotFoundError:
        pytest.fail(
            "tests/plugin_fixture (heron-example-plugin) is not installed;"
            " run the tests through `nox -s tests`, which installs it",
            pytrace=False,
        )


def fake_distribution(root: Path, dist: str, module_source: str, groups: dict[str, str]) -> str:
    """Write distribution ``dist`` with one module under ``root``; return the module's name.

    ``groups`` maps an entry-point group to the entry point's value, where
    ``{module}`` stands for the generated module name.
    """
    module = f"heron_fake_plugin_{next(_counter)}"
    info = root / f"{dist.replace('-', '_')}-0.1.dist-info"
    info.mkdir(parents=True)
    (info / "METADATA").write_text(f"Metadata-Version: 2.1\nName: {dist}\nVersion: 0.1\n")
    lines = []
    for group, value in groups.items():
        lines += [f"[{group}]", f"plug = {value.format(module=module)}", ""]
    (info / "entry_points.txt").write_text("\n".join(lines))
    (root / f"{module}.py").write_text(textwrap.dedent(module_source))
    return module


EMITTER_OK = """
    from heron.emitters.hookspecs import EmitterSpec, hookimpl

    @hookimpl
    def heron_emitter_specs():
        return EmitterSpec(name="{name}", priority=1, claims=lambda f: True, factory=object)
"""


@pytest.fixture
def plugin_dir(tmp_path, monkeypatch):
    """A directory on sys.path (so fake modules import) holding fake distributions."""
    monkeypatch.syspath_prepend(str(tmp_path))
    return tmp_path


# -- the installed out-of-tree fixture ----------------------------------------


def test_installed_fixture_emitter_is_found_through_its_entry_point():
    _fixture_installed()
    registry = load_emitters()
    assert "example" in registry
    origin = registry.origin("example")
    assert origin == PluginOrigin(
        "heron.emitters", "example", "heron_example_plugin.emitter", "heron-example-plugin", "0.1.0"
    )
    spec = registry.get("example")
    assert spec.priority == 5
    assert registry.select(FakeFusion("example_fusion")) is spec
    emitter = spec.factory(FakeFusion("example_fusion"))
    assert type(emitter).__name__ == "ExampleEmitter"
    assert emitter.fusion.name == "example_fusion"
    with pytest.raises(PluginError, match="no hero emitter claims fusion 'other'"):
        registry.select(FakeFusion("other"))


def test_installed_fixture_backend_is_found_and_its_compiler_loads_lazily():
    _fixture_installed()
    registry = load_backends()
    assert "example" in registry
    assert registry.origin("example").distribution == "heron-example-plugin"
    status = registry.availability("example")
    assert status.available and "always available" in status.reason
    device = registry.create_device("example")
    device.launch("artefact")
    assert device.launched == ["artefact"]
    compiler = registry.load_compiler("example")
    assert compiler.__module__ == "heron_example_plugin.compiler"
    assert compiler(FakeModule("m", [FakeFusion("c")])) == {"module": "m", "computations": ["c"]}


@attrs.frozen
class FakeModule:
    name: str
    computations: list


# -- broken plugins ------------------------------------------------------------


def test_import_failure_names_the_distribution(plugin_dir):
    fake_distribution(
        plugin_dir, "heron-broken-plugin", "", {"heron.emitters": "no_such_module_anywhere"}
    )
    with pytest.raises(PluginError) as info:
        load_emitters(path=[str(plugin_dir)])
    message = str(info.value)
    assert "heron-broken-plugin 0.1" in message
    assert "'plug = no_such_module_anywhere'" in message
    assert "ModuleNotFoundError" in message


def test_exception_during_import_names_the_distribution(plugin_dir):
    fake_distribution(
        plugin_dir,
        "heron-raising-plugin",
        "raise RuntimeError('boom at import')",
        {"heron.emitters": "{module}"},
    )
    with pytest.raises(
        PluginError, match=r"heron-raising-plugin 0\.1.*RuntimeError: boom at import"
    ):
        load_emitters(path=[str(plugin_dir)])


@pytest.mark.parametrize(
    ("returned", "described"),
    [("42", "int 42"), ("[None]", "NoneType None"), ("None", "NoneType None"), ("'loop'", "str")],
)
def test_hook_returning_garbage_names_the_distribution(plugin_dir, returned, described):
    fake_distribution(
        plugin_dir,
        "heron-garbage-plugin",
        f"""
        from heron.emitters.hookspecs import hookimpl

        @hookimpl
        def heron_emitter_specs():
            return {returned}
        """,
        {"heron.emitters": "{module}"},
    )
    with pytest.raises(PluginError) as info:
        load_emitters(path=[str(plugin_dir)])
    message = str(info.value)
    assert "heron-garbage-plugin 0.1" in message
    assert f"heron_emitter_specs() returned {described}" in message
    assert "expected EmitterSpec or a list of them" in message


def test_hook_raising_names_the_distribution(plugin_dir):
    # An invalid spec fails in the plugin's own code, at construction.
    fake_distribution(
        plugin_dir,
        "heron-invalid-spec-plugin",
        EMITTER_OK.replace('"{name}"', '"Bad Name"'),
        {"heron.emitters": "{module}"},
    )
    with pytest.raises(PluginError) as info:
        load_emitters(path=[str(plugin_dir)])
    message = str(info.value)
    assert "heron-invalid-spec-plugin 0.1" in message
    assert "heron_emitter_specs() raised ValueError" in message
    assert "'Bad Name'" in message


def test_module_without_hookimpl_marker_is_reported(plugin_dir):
    fake_distribution(
        plugin_dir,
        "heron-unmarked-plugin",
        """
        def heron_emitter_specs():
            return []
        """,
        {"heron.emitters": "{module}"},
    )
    with pytest.raises(
        PluginError, match=r"heron-unmarked-plugin 0\.1.*implements none of the hooks"
    ):
        load_emitters(path=[str(plugin_dir)])


def test_wrong_hook_signature_is_reported(plugin_dir):
    fake_distribution(
        plugin_dir,
        "heron-signature-plugin",
        """
        from heron.emitters.hookspecs import hookimpl

        @hookimpl
        def heron_emitter_specs(fusion):
            return []
        """,
        {"heron.emitters": "{module}"},
    )
    with pytest.raises(
        PluginError, match=r"heron-signature-plugin 0\.1.*invalid hook implementation"
    ):
        load_emitters(path=[str(plugin_dir)])


def test_two_plugins_with_one_name_are_reported_with_both_origins(plugin_dir):
    for dist in ("heron-first-plugin", "heron-second-plugin"):
        fake_distribution(
            plugin_dir, dist, EMITTER_OK.replace("{name}", "same"), {"heron.emitters": "{module}"}
        )
    with pytest.raises(PluginError) as info:
        load_emitters(path=[str(plugin_dir)])
    message = str(info.value)
    assert "two heron.emitters plugins are named 'same'" in message
    assert "heron-first-plugin" in message and "heron-second-plugin" in message


def test_good_fake_plugin_is_found_on_sys_path_by_default(plugin_dir):
    fake_distribution(
        plugin_dir,
        "heron-good-fake-plugin",
        EMITTER_OK.replace("{name}", "good-fake"),
        {"heron.emitters": "{module}"},
    )
    registry = load_emitters()  # scans sys.path, which the fixture extended
    assert registry.origin("good-fake").distribution == "heron-good-fake-plugin"
    only_here = load_emitters(path=[str(plugin_dir)])
    assert only_here.names() == ["good-fake"]


def test_a_distribution_seen_twice_on_the_path_counts_once(plugin_dir, tmp_path_factory):
    second = tmp_path_factory.mktemp("second")
    source = EMITTER_OK.replace("{name}", "twice")
    module = fake_distribution(
        plugin_dir, "heron-twice-plugin", source, {"heron.emitters": "{module}"}
    )
    info = second / "heron_twice_plugin-0.1.dist-info"
    info.mkdir()
    for name in ("METADATA", "entry_points.txt"):
        (info / name).write_text(
            (plugin_dir / "heron_twice_plugin-0.1.dist-info" / name).read_text()
        )
    assert module in (info / "entry_points.txt").read_text()
    registry = load_emitters(path=[str(plugin_dir), str(second)])
    assert registry.names() == ["twice"]


def test_groups_are_separate(plugin_dir):
    fake_distribution(
        plugin_dir,
        "heron-emitter-only-plugin",
        EMITTER_OK.replace("{name}", "only"),
        {"heron.emitters": "{module}"},
    )
    assert len(load_backends(path=[str(plugin_dir)])) == 0
    assert load_emitters(path=[str(plugin_dir)]).names() == ["only"]


# -- backends --------------------------------------------------------------------


BACKEND_SOURCE = """
    from heron.runtime.core.hookspecs import BackendSpec, hookimpl

    @hookimpl
    def heron_backend_specs():
        return [BackendSpec(name="lazy", priority=3, is_available=lambda: (True, "ok"),
                            device_factory=object, compiler="{compiler}")]
"""


def test_backend_compiler_is_imported_only_when_asked_for(plugin_dir):
    fake_distribution(
        plugin_dir,
        "heron-lazy-backend",
        BACKEND_SOURCE.replace("{compiler}", "heron_no_such_mlir_module:compile"),
        {"heron.backends": "{module}"},
    )
    registry = load_backends(path=[str(plugin_dir)])  # loads fine without the compiler
    assert registry.select().name == "lazy"
    with pytest.raises(PluginError) as info:
        registry.load_compiler("lazy")
    message = str(info.value)
    assert "heron-lazy-backend 0.1" in message
    assert "heron_no_such_mlir_module" in message and "ModuleNotFoundError" in message


def test_backend_compiler_that_is_not_callable_is_reported(plugin_dir):
    fake_distribution(
        plugin_dir,
        "heron-odd-backend",
        BACKEND_SOURCE.replace("{compiler}", "math:pi"),
        {"heron.backends": "{module}"},
    )
    with pytest.raises(PluginError, match="compiler 'math:pi' is a float, not a function"):
        load_backends(path=[str(plugin_dir)]).load_compiler("lazy")


def _backend(name, priority, available=(True, "ok"), compiler=None):
    return BackendSpec(
        name=name,
        priority=priority,
        is_available=lambda: available,
        device_factory=lambda: f"device of {name}",
        compiler=compiler,
    )


def test_backend_selection_prefers_priority_among_available_backends():
    registry = BackendRegistry(
        [
            (_backend("fast", 10, (False, "no driver found")), None),
            (_backend("slow", 1), None),
            (_backend("medium", 5), None),
        ]
    )
    assert registry.names() == ["fast", "medium", "slow"]
    assert registry.select().name == "medium"
    assert registry.create_device("slow") == "device of slow"
    with pytest.raises(PluginError, match="'fast' .* is not available: no driver found"):
        registry.select("fast")
    with pytest.raises(PluginError, match=r"no heron.backends plugin named 'gpu' .*medium"):
        registry.select("gpu")
    with pytest.raises(PluginError, match="has no compiler"):
        registry.load_compiler("slow")


def test_no_available_backend_lists_every_reason():
    registry = BackendRegistry(
        [(_backend("a", 1, (False, "no A here")), None), (_backend("b", 2, (False, "no B")), None)]
    )
    with pytest.raises(PluginError, match="b: no B; a: no A here"):
        registry.select()
    with pytest.raises(PluginError, match="none is installed"):
        BackendRegistry().select()


@pytest.mark.parametrize("returned", [True, (True,), ("yes", "ok"), (True, 3), None])
def test_backend_availability_must_be_a_bool_and_a_reason(returned):
    registry = BackendRegistry([(_backend("odd", 1, returned), None)])
    with pytest.raises(PluginError, match=r"is_available\(\) returned .* expected a \(bool, str\)"):
        registry.availability("odd")


def test_backend_availability_that_raises_is_reported():
    def boom():
        raise OSError("driver exploded")

    spec = BackendSpec(name="boom", priority=0, is_available=boom, device_factory=object)
    with pytest.raises(PluginError, match="is_available\\(\\) raised OSError: driver exploded"):
        BackendRegistry([(spec, None)]).availability("boom")


@pytest.mark.parametrize(
    ("field", "value", "error"),
    [
        ("name", "", ValueError),
        ("name", "CUDA", ValueError),
        ("priority", True, TypeError),
        ("priority", 1.5, TypeError),
        ("is_available", "yes", TypeError),
        ("compiler", "no_colon", ValueError),
        ("compiler", "a:b:c", ValueError),
    ],
)
def test_backend_spec_rejects_bad_fields(field, value, error):
    fields = dict(name="ok", priority=0, is_available=lambda: (True, ""), device_factory=object)
    fields[field] = value
    with pytest.raises(error, match=field):
        BackendSpec(**fields)


# -- emitters --------------------------------------------------------------------


def _emitter(name, priority, claims=lambda fusion: True):
    return EmitterSpec(name=name, priority=priority, claims=claims, factory=lambda f: (name, f))


def test_emitter_selection_takes_the_highest_priority_claimant():
    registry = EmitterRegistry(
        [
            (_emitter("loop", 0), None),
            (_emitter("reduction", 10, lambda f: f.name.startswith("reduce")), None),
            (_emitter("transpose", 10, lambda f: f.name.startswith("transpose")), None),
        ]
    )
    assert registry.select(FakeFusion("reduce_1")).name == "reduction"
    assert registry.select(FakeFusion("transpose_1")).name == "transpose"
    assert registry.select(FakeFusion("add_1")).name == "loop"
    assert [s.name for s in registry.claimants(FakeFusion("reduce_1"))] == ["reduction", "loop"]


def test_emitter_tie_is_an_error_naming_both():
    registry = EmitterRegistry([(_emitter("one", 3), None), (_emitter("two", 3), None)])
    with pytest.raises(
        PluginError, match=r"claimed by several emitters at priority 3.*'one'.*'two'"
    ):
        registry.select(FakeFusion("f"))


def test_emitter_claims_must_return_a_bool():
    registry = EmitterRegistry([(_emitter("vague", 1, lambda f: "yes"), None)])
    with pytest.raises(PluginError, match=r"claims\(\) returned str 'yes', expected a bool"):
        registry.select(FakeFusion("f"))


def test_emitter_claims_raising_is_reported():
    def claims(fusion):
        raise KeyError("kind")

    registry = EmitterRegistry([(_emitter("fragile", 1, claims), None)])
    with pytest.raises(
        PluginError, match=r"'fragile' \(registered in code\): claims\(\) raised KeyError"
    ):
        registry.select(FakeFusion("f"))


@pytest.mark.parametrize(
    ("field", "value", "error"),
    [
        ("name", "Loop", ValueError),
        ("name", 3, ValueError),
        ("priority", "high", TypeError),
        ("claims", None, TypeError),
        ("factory", 7, TypeError),
    ],
)
def test_emitter_spec_rejects_bad_fields(field, value, error):
    fields = dict(name="ok", priority=0, claims=lambda f: True, factory=object)
    fields[field] = value
    with pytest.raises(error, match=field):
        EmitterSpec(**fields)
