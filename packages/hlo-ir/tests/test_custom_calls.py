"""The heron.custom_calls contract: specs, the registry, entry points, the evaluator.

Targets are registered in code here (``registered``: the registry's direct
API); discovery through entry points uses fake distributions written to a
temporary directory (a ``*.dist-info`` folder is all importlib.metadata needs).
"""

from __future__ import annotations

import itertools
import json
import textwrap

import numpy as np
import pytest

from heron.hlo.custom_calls.call import (
    CustomCallError,
    UnknownCustomCallTarget,
    attribute_text,
    custom_call_of,
)
from heron.hlo.custom_calls.hookspecs import GROUP, CustomCallSpec
from heron.hlo.custom_calls.registry import (
    CustomCallRegistry,
    default_custom_calls,
    load_custom_calls,
    registered,
)
from heron.hlo.errors import HloEvaluationError, UnsupportedError
from heron.hlo.evaluator import evaluate_module
from heron.hlo.parser import parse_module
from heron.hlo.plugin_loading import PluginError

_counter = itertools.count()


def _scale(operands, call):
    """test.scale: x * factor, the factor from backend_config (JSON)."""
    (x,) = operands
    factor = json.loads(call.backend_config)["factor"]
    return (x * x.dtype.type(factor)).astype(x.dtype)


SCALE = CustomCallSpec("test.scale", _scale)

ONE_CALL = """HloModule m
ENTRY main {
  a = f32[2,3] parameter(0)
  ROOT cc = f32[2,3] custom-call(a), custom_call_target="TARGET", backend_config="{\\"factor\\": 3}"
}
"""


def _module(target: str, text: str = ONE_CALL):
    return parse_module(text.replace("TARGET", target), "calls.hlo")


X = np.arange(6, dtype=np.float32).reshape(2, 3)


# -- specs -----------------------------------------------------------------------------


@pytest.mark.parametrize("target", ["", "has space", 'quo"te', "é", "x" * 201, 3])
def test_a_spec_refuses_a_target_hlo_cannot_spell(target):
    with pytest.raises((ValueError, TypeError), match="custom_call_target"):
        CustomCallSpec(target, _scale)


def test_a_spec_accepts_xla_style_targets_and_needs_a_callable_host():
    assert CustomCallSpec("__cublas$gemm", _scale).target == "__cublas$gemm"
    with pytest.raises(TypeError, match="host must be callable"):
        CustomCallSpec("test.x", "not callable")


# -- the registry ----------------------------------------------------------------------


def test_double_registration_is_refused_naming_the_target():
    registry = CustomCallRegistry([(SCALE, None)])
    with pytest.raises(CustomCallError, match="'test.scale' is registered twice: by code"):
        registry.register(CustomCallSpec("test.scale", lambda o, c: o[0]))
    assert registry.targets() == ["test.scale"]
    with pytest.raises(CustomCallError, match="takes a CustomCallSpec"):
        registry.register("test.scale")  # type: ignore[arg-type]


def test_registered_adds_for_a_block_and_refuses_a_target_already_there():
    registry = default_custom_calls()
    with registered(SCALE):
        assert "test.scale" in registry
        with pytest.raises(CustomCallError, match="registered twice"), registered(SCALE):
            pass
        assert "test.scale" in registry  # the refused second registration removed nothing
    assert "test.scale" not in registry
    with pytest.raises(UnknownCustomCallTarget, match="'test.scale' is not registered"):
        registry.unregister("test.scale")


def test_an_unknown_target_is_named_with_the_call_and_the_installed_targets():
    call = custom_call_of(_module("test.nowhere").entry.root_instruction)
    registry = CustomCallRegistry([(SCALE, None)])
    with pytest.raises(UnknownCustomCallTarget) as info:
        registry.get(call)
    assert str(info.value) == (
        "custom-call 'cc' in computation 'main': custom_call_target 'test.nowhere' is"
        f" provided by no installed plugin (entry-point group {GROUP}; targets installed:"
        " test.scale)"
    )


# -- the call's attributes -------------------------------------------------------------


def test_the_call_carries_the_instructions_attributes_and_shapes():
    text = """HloModule m
    ENTRY e {
      a = f32[2,3]{0,1} parameter(0)
      b = (s32[4], pred[]) parameter(1)
      ROOT cc = (f32[3], (u8[2], f32[])) custom-call(a, b), custom_call_target="t.x",
        backend_config={key=1}, opaque="op\\"q", api_version=API_VERSION_STATUS_RETURNING
    }"""
    call = custom_call_of(parse_module(textwrap.dedent(text)).entry.root_instruction)
    assert (call.target, call.instruction, call.computation) == ("t.x", "cc", "e")
    assert [str(s) for s in call.operand_shapes] == ["f32[2,3]{0,1}", "s32[4]", "pred[]"]
    assert [str(s) for s in call.result_shapes] == ["f32[3]", "u8[2]", "f32[]"]
    assert call.tuple_result
    assert (call.backend_config, call.opaque, call.api_version) == (
        "{key=1}",
        'op"q',
        "API_VERSION_STATUS_RETURNING",
    )
    assert attribute_text(None) == ""


def test_token_operands_are_refused_at_the_instruction():
    text = """HloModule m
ENTRY e {
  t = token[] after-all()
  ROOT cc = f32[2] custom-call(t), custom_call_target="t.x"
}"""
    with pytest.raises(UnsupportedError) as info:
        custom_call_of(parse_module(text, "tok.hlo").entry.root_instruction)
    message = str(info.value)
    assert (
        "custom-call 'cc' in computation 'e'" in message and "operand leaf 0 is token[]" in message
    )
    assert message.startswith("tok.hlo:4:")


# -- the reference evaluator -----------------------------------------------------------


def test_the_evaluator_calls_the_host_implementation():
    with registered(SCALE):
        result = evaluate_module(_module("test.scale"), [X])
    np.testing.assert_array_equal(result, X * 3)


def test_an_implementation_gets_row_major_operands_whatever_their_strides():
    """A transposed view (a runtime's buffer of another layout) arrives C-contiguous:
    numpy's matrix products pick BLAS kernels by strides, so the same call gave
    other bits on a runtime than in the evaluator."""
    seen = []

    def record(operands, call):
        seen.append(operands[0].flags.c_contiguous)
        return operands[0].copy()

    registry = CustomCallRegistry([(CustomCallSpec("test.record", record), None)])
    call = custom_call_of(_module("test.record").entry.root_instruction)
    transposed = np.asfortranarray(X)
    (result,) = registry.invoke(call, [transposed])
    assert seen == [True]
    np.testing.assert_array_equal(result, X)
    assert transposed.flags.f_contiguous  # the caller's array is left alone


def test_the_evaluator_passes_tuple_operands_as_leaves_and_nests_tuple_results():
    seen = {}

    def split(operands, call):
        seen["operands"] = operands
        a, b, c = operands
        return [a + b, (c * 2,)]  # nested: the result is (f32[3], (s32[]))

    text = """HloModule m
ENTRY e {
  a = f32[3] parameter(0)
  b = f32[3] parameter(1)
  c = s32[] parameter(2)
  t = (f32[3], s32[]) tuple(b, c)
  ROOT cc = (f32[3], (s32[])) custom-call(a, t), custom_call_target="test.split"
}"""
    a, b, c = np.ones(3, np.float32), np.arange(3, dtype=np.float32), np.int32(7)
    with registered(CustomCallSpec("test.split", lambda o, call: flat(split(o, call)))):
        out = evaluate_module(parse_module(text), [a, b, np.asarray(c)])
    np.testing.assert_array_equal(out[0], a + b)
    assert out[1][0] == 14 and isinstance(out[1], tuple)
    assert all(not op.flags.writeable for op in seen["operands"])


def flat(value):
    """The leaves of a nested result (the ABI takes a flat sequence of leaves)."""
    if isinstance(value, (list, tuple)):
        return [leaf for item in value for leaf in flat(item)]
    return [value]


def test_the_evaluator_refuses_an_unknown_target_by_name_and_place():
    with pytest.raises(UnsupportedError) as info:
        evaluate_module(_module("test.nowhere"), [X])
    message = str(info.value)
    assert message.startswith("calls.hlo:4:8: error: custom-call 'cc' in computation 'main':")
    assert "custom_call_target 'test.nowhere' is provided by no installed plugin" in message
    assert "Traceback" not in message


@pytest.mark.parametrize(
    ("host", "expected"),
    [
        (lambda o, c: o[0][:1], r"wrong result 0: float32\[1, 3\] where f32\[2,3\]"),
        (lambda o, c: o[0].astype(np.float64), r"wrong result 0: float64\[2, 3\] where f32"),
        (lambda o, c: o[0].tolist(), r"wrong result 0: a list of 2 where a numpy array f32\[2,3\]"),
        (lambda o, c: [o[0]], r"wrong result 0: a list of 1 where a numpy array"),
        (lambda o, c: np.float32(1), r"wrong result 0: float32\[\] where f32\[2,3\]"),
        (lambda o, c: 1 / 0, r"raised ZeroDivisionError: division by zero"),
    ],
)
def test_a_host_implementation_that_breaks_the_abi_is_named(host, expected):
    with registered(CustomCallSpec("test.broken", host)), pytest.raises(HloEvaluationError) as info:
        evaluate_module(_module("test.broken"), [X])
    message = str(info.value)
    assert "custom-call 'cc' in computation 'main' (custom_call_target 'test.broken')" in message
    assert "its host implementation (registered in code)" in message
    assert message.startswith("calls.hlo:4:8:")
    import re

    assert re.search(expected, message), message


def test_a_tuple_result_needs_exactly_its_leaves():
    text = """HloModule m
ENTRY e {
  a = f32[2] parameter(0)
  ROOT cc = (f32[2], f32[2]) custom-call(a), custom_call_target="test.pair"
}"""
    x = np.ones(2, np.float32)
    with registered(CustomCallSpec("test.pair", lambda o, c: o[0])):
        with pytest.raises(HloEvaluationError, match="must return a sequence of 2 numpy arrays"):
            evaluate_module(parse_module(text), [x])
    with registered(CustomCallSpec("test.pair", lambda o, c: (o[0],))):
        with pytest.raises(HloEvaluationError, match=r"returned 1 arrays; the result \(f32"):
            evaluate_module(parse_module(text), [x])
    with registered(CustomCallSpec("test.pair", lambda o, c: (o[0], -o[0]))):
        first, second = evaluate_module(parse_module(text), [x])
    np.testing.assert_array_equal(second, -x)


# -- entry points ----------------------------------------------------------------------


def _distribution(root, dist: str, source: str) -> None:
    module = f"heron_fake_calls_{next(_counter)}"
    info = root / f"{dist.replace('-', '_')}-0.1.dist-info"
    info.mkdir(parents=True)
    (info / "METADATA").write_text(f"Metadata-Version: 2.1\nName: {dist}\nVersion: 0.1\n")
    (info / "entry_points.txt").write_text(f"[{GROUP}]\ncalls = {module}\n")
    (root / f"{module}.py").write_text(textwrap.dedent(source))


PLUGIN = """
    from heron.hlo.custom_calls.hookspecs import CustomCallSpec, hookimpl

    @hookimpl
    def heron_custom_call_specs():
        return [CustomCallSpec("TARGET", lambda operands, call: operands[0])]
"""


@pytest.fixture
def plugin_dir(tmp_path, monkeypatch):
    monkeypatch.syspath_prepend(str(tmp_path))
    return tmp_path


def test_targets_are_found_through_the_entry_point_group(plugin_dir):
    _distribution(plugin_dir, "heron-calls-a", PLUGIN.replace("TARGET", "a.copy"))
    registry = load_custom_calls(path=[str(plugin_dir)])
    assert registry.targets() == ["a.copy"]
    origin = registry.origin("a.copy")
    assert (origin.group, origin.distribution) == (GROUP, "heron-calls-a")
    assert "heron-calls-a 0.1" in registry.describe("a.copy")


def test_two_distributions_providing_one_target_are_refused_naming_both(plugin_dir):
    _distribution(plugin_dir, "heron-calls-a", PLUGIN.replace("TARGET", "same.target"))
    _distribution(plugin_dir, "heron-calls-b", PLUGIN.replace("TARGET", "same.target"))
    with pytest.raises(CustomCallError) as info:
        load_custom_calls(path=[str(plugin_dir)])
    message = str(info.value)
    assert "'same.target' is registered twice" in message
    assert "heron-calls-a 0.1" in message and "heron-calls-b 0.1" in message


@pytest.mark.parametrize(
    ("source", "expected"),
    [
        (
            "from heron.hlo.custom_calls.hookspecs import hookimpl\n"
            "@hookimpl\ndef heron_custom_call_specs():\n    return ['a.b']\n",
            r"returned str 'a.b'; expected CustomCallSpec",
        ),
        (
            "def heron_custom_call_specs():\n    return []\n",
            "is the function marked with @hookimpl",
        ),
        (
            "from heron.hlo.custom_calls.hookspecs import CustomCallSpec, hookimpl\n"
            "@hookimpl\ndef heron_custom_call_specs():\n"
            "    return CustomCallSpec('bad target', print)\n",
            r"raised ValueError: target must be a custom_call_target",
        ),
    ],
)
def test_a_broken_plugin_is_named_by_its_distribution(plugin_dir, source, expected):
    _distribution(plugin_dir, "heron-calls-broken", source)
    with pytest.raises(PluginError, match=expected) as info:
        load_custom_calls(path=[str(plugin_dir)])
    assert "heron-calls-broken 0.1" in str(info.value)
