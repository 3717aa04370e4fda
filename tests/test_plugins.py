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
from heron.runtime.core.hookspecs import BackendSpec, Stage
from heron.runtime.core.registry import BackendRegistry, load_backends

_counter = itertools.count()


@attrs.frozen
class FakeFusion:
    name: str


@attrs.frozen
class FakeAnalysis:
    """What the registry hands to ``claims``: a fusion's analysis (here only its fusion)."""

    fusion: FakeFusion


def _analysis(name: str) -> FakeAnalysis:
    return FakeAnalysis(FakeFusion(name))


#: A real fusion for the registry and the example emitter: x * 2 over f32[4, 8].
EXAMPLE_MODULE = """HloModule m
double {
  p = f32[4,8] parameter(0)
  ROOT d = f32[4,8] add(p, p)
}
ENTRY main {
  a = f32[4,8] parameter(0)
  ROOT {name} = f32[4,8] fusion(a), kind=kLoop, calls=double
}
"""


def _real_fusion(name: str):
    from heron.hlo.parser import parse_module

    return parse_module(EXAMPLE_MODULE.replace("{name}", name)).entry.root_instruction


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


def test_the_fixture_emitter_claims_an_analysis_and_emits_its_kernel():
    """The third-party contract end to end: claims(analysis), factory(analysis), emit."""
    from heron.emitters.fusion_analysis import analyse_fusion
    from heron.emitters.selection import emit_fusion
    from heron.target import Target

    _fixture_installed()
    h100 = Target.preset("h100")
    registry = load_emitters()
    spec = registry.get("example")
    fusion = _real_fusion("example_double")
    analysis = analyse_fusion(fusion, h100)
    assert analysis.kind == "loop"  # XLA's choice; the example outranks the loop emitter
    assert registry.select(analysis) is spec
    emitter = spec.factory(analysis)
    assert type(emitter).__name__ == "ExampleEmitter"
    assert (emitter.fusion, emitter.analysis, emitter.target) == (fusion, analysis, h100)
    kernel = emit_fusion(fusion, h100, registry)
    assert kernel.emitter == "example" and kernel.launch.num_threads == 32
    assert registry.select(analyse_fusion(_real_fusion("other"), h100)).name == "loop"
    assert not spec.claims(fusion)  # a fusion is not its analysis
    only = EmitterRegistry([(spec, None)])
    with pytest.raises(PluginError, match="no hero emitter claims fusion 'other'"):
        only.select(analyse_fusion(_real_fusion("other"), h100))


def test_installed_fixture_backend_is_found_and_its_stages_load_lazily():
    _fixture_installed()
    registry = load_backends()
    assert "example" in registry
    assert registry.origin("example").distribution == "heron-example-plugin"
    status = registry.availability("example")
    assert status.available and "always available" in status.reason
    device = registry.create_device("example", target="a target")
    assert device.target == "a target"
    device.launch("artefact")
    assert device.launched == ["artefact"]
    spec = registry.get("example")
    assert [(s.name, s.function, s.extension) for s in spec.stages] == [
        ("listing", "heron_example_plugin.compiler:listing", "txt"),
        ("image", "heron_example_plugin.compiler:image", None),
    ]
    stages = registry.load_stages("example")
    assert [s.run.__module__ for s in stages] == ["heron_example_plugin.compiler"] * 2
    assert registry.load_stages("example") is stages  # imported once per registry


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
    from heron.runtime.core.hookspecs import BackendSpec, Stage, hookimpl

    @hookimpl
    def heron_backend_specs():
        return [BackendSpec(name="lazy", priority=3, is_available=lambda: (True, "ok"),
                            device_factory=object, stages=[Stage("code", "{function}")])]
"""


def test_backend_stages_are_imported_only_when_asked_for(plugin_dir):
    fake_distribution(
        plugin_dir,
        "heron-lazy-backend",
        BACKEND_SOURCE.replace("{function}", "heron_no_such_mlir_module:compile"),
        {"heron.backends": "{module}"},
    )
    registry = load_backends(path=[str(plugin_dir)])  # loads fine without the stage's module
    assert registry.select().name == "lazy"
    with pytest.raises(PluginError) as info:
        registry.load_stages("lazy")
    message = str(info.value)
    assert "heron-lazy-backend 0.1" in message and "stage 'code'" in message
    assert "heron_no_such_mlir_module" in message
    assert "install heron-lazy-backend[compile]" in message


def test_backend_stage_that_is_not_callable_is_reported(plugin_dir):
    fake_distribution(
        plugin_dir,
        "heron-odd-backend",
        BACKEND_SOURCE.replace("{function}", "math:pi"),
        {"heron.backends": "{module}"},
    )
    with pytest.raises(PluginError, match=r"stage 'code' \('math:pi'\) is a float, not a function"):
        load_backends(path=[str(plugin_dir)]).load_stages("lazy")


def _backend(name, priority, available=(True, "ok"), stages=()):
    return BackendSpec(
        name=name,
        priority=priority,
        is_available=lambda: available,
        device_factory=lambda target: f"device of {name} for {target}",
        stages=stages,
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
    assert registry.create_device("slow", "h100") == "device of slow for h100"
    with pytest.raises(PluginError, match="'fast' .* is not available: no driver found"):
        registry.select("fast")
    with pytest.raises(PluginError, match=r"no heron.backends plugin named 'gpu' .*medium"):
        registry.select("gpu")
    with pytest.raises(PluginError, match="declares no compile stages"):
        registry.load_stages("slow")


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
        ("stages", "pkg:fn", TypeError),
        ("stages", [object()], TypeError),
        ("stages", [Stage("a", "m:f"), Stage("a", "m:g")], ValueError),
        ("image_formats", "cubin", TypeError),
        ("image_formats", ["cubin", ""], TypeError),
        ("image_formats", ["ptx", "ptx"], ValueError),
    ],
)
def test_backend_spec_rejects_bad_fields(field, value, error):
    fields = dict(name="ok", priority=0, is_available=lambda: (True, ""), device_factory=object)
    fields[field] = value
    with pytest.raises(error, match=field):
        BackendSpec(**fields)


@pytest.mark.parametrize(
    ("fields", "message"),
    [
        ({"name": "LLVM", "function": "m:f"}, "name must be a lower-case identifier"),
        ({"name": "ptx", "function": "no_colon"}, "function must be"),
        ({"name": "ptx", "function": None}, "function must be a 'module:attribute'"),
        ({"name": "ptx", "function": "m:f", "extension": ".ptx"}, "extension must be None"),
        ({"name": "ptx", "function": "m:f", "extension": ""}, "extension must be None"),
    ],
)
def test_stage_rejects_bad_fields(fields, message):
    with pytest.raises(ValueError, match=message):
        Stage(**fields)


# -- emitters --------------------------------------------------------------------


def _emitter(name, priority, claims=lambda analysis: True):
    return EmitterSpec(name=name, priority=priority, claims=claims, factory=lambda a: (name, a))


def _named(prefix):
    return lambda analysis: analysis.fusion.name.startswith(prefix)


def test_emitter_selection_takes_the_highest_priority_claimant():
    registry = EmitterRegistry(
        [
            (_emitter("loop", 0), None),
            (_emitter("reduction", 10, _named("reduce")), None),
            (_emitter("transpose", 10, _named("transpose")), None),
        ]
    )
    assert registry.select(_analysis("reduce_1")).name == "reduction"
    assert registry.select(_analysis("transpose_1")).name == "transpose"
    assert registry.select(_analysis("add_1")).name == "loop"
    assert [s.name for s in registry.claimants(_analysis("reduce_1"))] == ["reduction", "loop"]


def test_a_factory_must_build_the_emitter_its_spec_names():
    """What emitted a kernel is what the kernel says: no relabelling, a plugin error instead."""
    from heron.emitters.selection import emit_fusion
    from heron.plugins.loop import LoopEmitter
    from heron.target import Target

    spec = EmitterSpec(name="honest", priority=1, claims=lambda a: True, factory=LoopEmitter)
    registry = EmitterRegistry([(spec, None)])
    with pytest.raises(
        PluginError,
        match=r"'honest' \(registered in code\): its factory built the emitter 'loop'"
        r" \(LoopEmitter\), not 'honest'",
    ):
        emit_fusion(_real_fusion("f"), Target.preset("h100"), registry)


def test_an_error_met_while_emitting_names_the_fusion_and_its_emitter():
    """A limit met inside emission (a dialect builder's) knows no fusion: emit_fusion
    names it, once."""
    from heron.emitters.selection import emit_fusion
    from heron.hlo.errors import UnsupportedError
    from heron.plugins.loop import LoopEmitter
    from heron.target import Target

    class Limited(LoopEmitter):
        name = "limited"

        def emit(self):
            raise UnsupportedError("heron_gpu.pure_call: 9 results exceed the limit of 8")

    spec = EmitterSpec(name="limited", priority=1, claims=lambda a: True, factory=Limited)
    registry = EmitterRegistry([(spec, None)])
    with pytest.raises(UnsupportedError) as caught:
        emit_fusion(_real_fusion("f"), Target.preset("h100"), registry)
    assert caught.value.message == (
        "fusion 'f' (limited emitter): heron_gpu.pure_call: 9 results exceed the limit of 8"
    )


def test_what_is_not_an_analysis_is_claimed_by_no_installed_emitter():
    registry = load_emitters()
    with pytest.raises(PluginError, match="no hero emitter claims fusion 'f'"):
        registry.select(_real_fusion("f"))


def test_emitter_tie_is_an_error_naming_both():
    registry = EmitterRegistry([(_emitter("one", 3), None), (_emitter("two", 3), None)])
    with pytest.raises(
        PluginError, match=r"claimed by several emitters at priority 3.*'one'.*'two'"
    ):
        registry.select(_analysis("f"))


def test_emitter_claims_must_return_a_bool():
    registry = EmitterRegistry([(_emitter("vague", 1, lambda f: "yes"), None)])
    with pytest.raises(PluginError, match=r"claims\(\) returned str 'yes', expected a bool"):
        registry.select(_analysis("f"))


def test_emitter_claims_raising_is_reported():
    def claims(analysis):
        raise KeyError("kind")

    registry = EmitterRegistry([(_emitter("fragile", 1, claims), None)])
    with pytest.raises(
        PluginError, match=r"'fragile' \(registered in code\): claims\(\) raised KeyError"
    ):
        registry.select(_analysis("f"))


@pytest.mark.parametrize(
    ("field", "value", "error"),
    [
        ("name", "Loop", ValueError),
        ("name", 3, ValueError),
        ("priority", "high", TypeError),
        ("claims", None, TypeError),
        ("factory", 7, TypeError),
        ("refuses_when_built", 1, TypeError),
    ],
)
def test_emitter_spec_rejects_bad_fields(field, value, error):
    fields = dict(name="ok", priority=0, claims=lambda f: True, factory=object)
    fields[field] = value
    with pytest.raises(error, match=field):
        EmitterSpec(**fields)


def test_each_backend_declares_the_image_formats_its_devices_load():
    from heron.runtime.core.registry import default_backends

    backends = default_backends()
    assert backends.get("cuda").image_formats == ("cubin", "ptx")
    assert backends.get("rocm").image_formats == ("hsaco",)
    assert backends.get("interpreter").image_formats == ("heron-interpreter",)


def test_a_stage_says_concurrent_with_a_bool():
    from heron.runtime.core.hookspecs import Stage

    with pytest.raises(TypeError, match="concurrent"):
        Stage("cubin", "heron.runtime.cuda.stages:to_cubin", "cubin", concurrent="yes")
