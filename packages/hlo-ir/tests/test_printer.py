"""The HLO printer: canonical text, and parse(print(m)) == m."""

from __future__ import annotations

import random
import string

import jax
import jax.numpy as jnp
import numpy as np
import pytest

from heron.hlo import parser as parser_module
from heron.hlo.attributes import (
    ComputationRef,
    ConvDimensionNumbers,
    InstructionRefs,
    KeyValueList,
    PadDim,
    PaddingConfig,
    QuotedString,
    RawAttribute,
    SliceRange,
    Window,
    WindowDim,
)
from heron.hlo.element_types import ElementType
from heron.hlo.ir import Computation, Instruction, Module, structural_difference
from heron.hlo.literals import format_literal
from heron.hlo.opcodes import OPCODES
from heron.hlo.parser import parse_module, parse_shape
from heron.hlo.printer import print_instruction, print_module
from heron.hlo.shapes import ArrayShape, Layout, TupleShape


def assert_round_trip(module: Module) -> str:
    """parse(print(m)) == m, and printing the result gives the same text."""
    text = print_module(module)
    again = parse_module(text, "<printed>")
    difference = structural_difference(module, again)
    assert difference is None, f"{difference}\n{text}"
    assert print_module(again) == text
    return text


# -- the canonical format --------------------------------------------------------------

SOURCE = """HloModule m, is_scheduled=true, entry_computation_layout={(f32[4]{0})->f32[4]{0}}

FileNames
1 "a.py"

sum {
  x = f32[] parameter(0)
  y = f32[] parameter(1)
  ROOT s = f32[] add(x, y), metadata={op_name="add" source_line=3}
}

ENTRY main {
  p = f32[4]{0} parameter(0)
  c = f32[] constant(0)
  t = (f32[4]{0}, f32[]) tuple(p, c)
  r = f32[] reduce(f32[4]{0} p, c), dimensions={0}, to_apply=sum
  ROOT b = f32[4]{0} broadcast(r), dimensions={}, frontend_attributes={a="1",b="2"}
}
"""

EXPECTED = """HloModule m, is_scheduled=true, entry_computation_layout={(f32[4]{0})->f32[4]{0}}

FileNames
1 "a.py"

%sum (x: f32[], y: f32[]) -> f32[] {
  %x = f32[] parameter(0)
  %y = f32[] parameter(1)
  ROOT %s = f32[] add(%x, %y), metadata={op_name="add" source_line=3}
}

ENTRY %main (p: f32[4]) -> f32[4] {
  %p = f32[4]{0} parameter(0)
  %c = f32[] constant(0)
  %t = (f32[4]{0}, f32[]) tuple(%p, %c)
  %r = f32[] reduce(%p, %c), dimensions={0}, to_apply=%sum
  ROOT %b = f32[4]{0} broadcast(%r), dimensions={}, frontend_attributes={a="1",b="2"}
}
"""


def test_canonical_text():
    module = parse_module(SOURCE)
    assert print_module(module) == EXPECTED
    assert_round_trip(module)


def test_print_instruction():
    module = parse_module(SOURCE)
    assert print_instruction(module.entry.instruction("r")) == (
        "%r = f32[] reduce(%p, %c), dimensions={0}, to_apply=%sum"
    )
    assert print_instruction(module.entry.root).startswith("ROOT %b = f32[4]{0} broadcast(%r)")


def test_signature_orders_parameters_by_number_and_drops_layouts():
    module = parse_module(
        """ENTRY e {
          b = (f32[2,3]{0,1}, s32[]) parameter(1)
          a = f32[2]{0} parameter(0)
          ROOT g = f32[2,3]{0,1} get-tuple-element(b), index=0
        }"""
    )
    header = print_module(module).splitlines()[2]
    assert header == "ENTRY %e (a: f32[2], b: (f32[2,3], s32[])) -> f32[2,3] {"


def test_attribute_spellings():
    text = (
        "ENTRY e {\n  p = f32[8,8] parameter(0)\n"
        "  ROOT r = f32[8,8] convolution(p, p), window={size=3x3 stride=2x2 pad=1_1x1_1"
        " rhs_reversal=1x0}, dim_labels=bf01_oi01->bf01, slice={[0:4], [2:8:2]},"
        " padding=0_0_1x1_2_0, sharding={devices=[2,1]0,1}, control-predecessors={p},"
        ' custom_call_target="a\\"b\\n\\303\\251", epsilon=0.001\n}'
    )
    printed = print_module(parse_module(text))
    line = printed.splitlines()[-2]
    assert (
        "window={size=3x3 stride=2x2 pad=1_1x1_1 rhs_reversal=1x0}, dim_labels=bf01_oi01->bf01,"
        " slice={[0:4], [2:8:2]}, padding=0_0_1x1_2_0, sharding={devices=[2,1]0,1},"
        ' control-predecessors={%p}, custom_call_target="a\\"b\\né", epsilon=0.001'
    ) in line


# -- constants -------------------------------------------------------------------------


def literal_text(dtype_name: str, values) -> str:
    element_type = ElementType.parse(dtype_name)
    array = np.asarray(values).astype(element_type.numpy_dtype)
    shape = ArrayShape(element_type, array.shape)
    return format_literal(array, shape)


def test_float_spellings():
    assert literal_text("f32", 1.0) == "1"
    assert literal_text("f32", -0.0) == "-0"
    assert literal_text("f32", 0.1) == "0.1"
    assert literal_text("f32", 0.707106769) == "0.70710677"
    assert literal_text("f64", 0.1) == "0.1"
    assert literal_text("f32", 1e20) == "1e+20"
    assert literal_text("f32", float("inf")) == "inf"
    assert literal_text("f32", float("-inf")) == "-inf"
    assert literal_text("f32", float("nan")) == "nan"
    assert literal_text("f32", -np.float32("nan")) == "-nan"
    assert literal_text("bf16", 0.1) == "0.1"
    assert literal_text("f16", 65504) == "65500"  # the shortest decimal that rounds to it
    payload = np.array([0x7F800001, 0xFFC00001], np.uint32).view(np.float32)
    assert (
        format_literal(payload, ArrayShape(ElementType.F32, (2,))) == "{nan(0x1), -nan(0x400001)}"
    )
    assert literal_text("pred", [True, False]) == "{true, false}"
    assert literal_text("s4", [-8, 7]) == "{-8, 7}"
    assert literal_text("c64", [1 + 2j, complex(0, -0.5)]) == "{(1, 2), (0, -0.5)}"
    assert literal_text("s32", [[1, 2], [3, 4]]) == "{ {1, 2}, {3, 4} }"
    assert literal_text("f32", np.zeros((2, 0))) == "{ {}, {} }"


def test_large_constants_are_printed_in_full():
    text = literal_text("s32", np.arange(3000))
    assert "..." not in text and text.count(",") == 2999


def test_elided_constants_print_back_elided():
    module = parse_module("ENTRY e {\n  ROOT c = f32[1000]{0} constant({...})\n}")
    assert "constant({...})" in assert_round_trip(module)


def all_bit_patterns(element_type: ElementType) -> np.ndarray:
    dtype = element_type.numpy_dtype
    if element_type.bit_width <= 16:
        count = 1 << element_type.bit_width
        raw = np.arange(count, dtype=np.uint16 if dtype.itemsize == 2 else np.uint8)
        return raw.astype({1: np.uint8, 2: np.uint16}[dtype.itemsize]).view(dtype)
    rng = np.random.default_rng(0)
    uint = {4: np.uint32, 8: np.uint64}[dtype.itemsize]
    raw = rng.integers(0, np.iinfo(uint).max, size=20000, dtype=uint, endpoint=True)
    specials = np.array([0, 1, 2, 3], dtype=uint)
    specials = np.concatenate(
        [specials, ~specials, specials | (uint(1) << uint(dtype.itemsize * 8 - 1))]
    )
    return np.concatenate([raw, specials]).view(dtype)


@pytest.mark.parametrize(
    "element_type", [t for t in ElementType if t.is_floating], ids=lambda t: t.value
)
def test_every_float_value_round_trips_bit_for_bit(element_type):
    """Every bit pattern of the small types (and many of f32/f64): NaN signs and
    payloads included, where the type can hold them."""
    values = all_bit_patterns(element_type)
    shape = ArrayShape(element_type, (len(values),))
    text = format_literal(values, shape)
    parsed = parse_module(f"ENTRY e {{\n  ROOT c = {shape} constant({text})\n}}").entry.root.literal
    assert parsed.dtype == values.dtype
    assert parsed.tobytes() == values.tobytes()


@pytest.mark.parametrize("element_type", [ElementType.C64, ElementType.C128], ids=str)
def test_complex_values_round_trip_bit_for_bit(element_type):
    parts = all_bit_patterns(element_type.component_type)[:4000]
    values = parts.view(element_type.numpy_dtype)
    shape = ArrayShape(element_type, (len(values),))
    text = format_literal(values, shape)
    parsed = parse_module(f"ENTRY e {{\n  ROOT c = {shape} constant({text})\n}}").entry.root.literal
    assert parsed.tobytes() == values.tobytes()


@pytest.mark.parametrize(
    "element_type", [t for t in ElementType if t.is_integral], ids=lambda t: t.value
)
def test_integer_extremes_round_trip(element_type):
    import ml_dtypes

    info = ml_dtypes.iinfo(element_type.numpy_dtype)
    values = np.array([int(info.min), -1 if info.min < 0 else 0, 0, 1, int(info.max)], dtype=object)
    array = np.array([int(v) for v in values], dtype=np.int64 if info.max < 2**63 else np.uint64)
    array = array.astype(element_type.numpy_dtype)
    shape = ArrayShape(element_type, (5,))
    text = format_literal(array, shape)
    parsed = parse_module(f"ENTRY e {{\n  ROOT c = {shape} constant({text})\n}}").entry.root.literal
    assert parsed.tobytes() == array.tobytes()


# -- random modules --------------------------------------------------------------------

NAME_CHARS = string.ascii_letters + string.digits + "_.-"
FLOAT_TYPES = [t for t in ElementType if t.is_floating]
ARRAY_TYPES = [t for t in ElementType if t.is_array_type]
LAYOUT_SUFFIXES = ["", "", "", "T(8,128)", "T(8,128)(2,1)S(1)", "E(4)"]


class RandomModules:
    """Modules made directly as IR objects, with every kind of attribute value."""

    def __init__(self, seed: int):
        self.rng = random.Random(seed)
        self.np_rng = np.random.default_rng(seed)

    def name(self, taken: set[str]) -> str:
        while True:
            first = self.rng.choice(string.ascii_letters + "_")
            rest = "".join(self.rng.choice(NAME_CHARS) for _ in range(self.rng.randint(0, 8)))
            name = first + rest
            if name not in taken and name not in ("ROOT", "ENTRY"):
                taken.add(name)
                return name

    def array_shape(self) -> ArrayShape:
        rng = self.rng
        element_type = rng.choice(ARRAY_TYPES)
        rank = rng.randint(0, 3)
        dims = tuple(rng.randint(0, 4) for _ in range(rank))
        layout = None
        if rng.random() < 0.6:
            order = list(range(rank))
            rng.shuffle(order)
            layout = Layout(tuple(order), rng.choice(LAYOUT_SUFFIXES))
        dynamic = ()
        if rank and rng.random() < 0.2:
            dynamic = tuple(rng.random() < 0.5 for _ in range(rank))
            if not any(dynamic):
                dynamic = ()
        return ArrayShape(element_type, dims, layout, dynamic)

    def shape(self, depth: int = 0):
        r = self.rng.random()
        if depth < 2 and r < 0.15:
            return TupleShape(tuple(self.shape(depth + 1) for _ in range(self.rng.randint(0, 3))))
        if r < 0.18:
            return ArrayShape(ElementType.TOKEN, ())
        return self.array_shape()

    def literal(self, shape):
        if isinstance(shape, TupleShape):
            return tuple(self.literal(e) for e in shape.elements)
        dtype = shape.element_type.numpy_dtype
        count = int(np.prod(shape.dims)) if shape.dims else 1
        raw = self.np_rng.integers(0, 256, size=count * dtype.itemsize, dtype=np.uint8)
        if shape.element_type.is_sub_byte or shape.element_type.is_pred:
            bits = shape.element_type.bit_width if not shape.element_type.is_pred else 1
            values = self.np_rng.integers(0, 1 << bits, size=count, dtype=np.uint8)
            if shape.element_type.is_pred:
                return values.astype(np.bool_).reshape(shape.dims)
            if shape.element_type.is_signed_integral:
                values = values.astype(np.int8) - (1 << (bits - 1))
            return values.astype(dtype).reshape(shape.dims)
        return raw.view(dtype).reshape(shape.dims)

    def quoted(self) -> QuotedString:
        alphabet = "ab \"\\\n\t'é∑%{}(),=" + chr(1) + chr(127)
        return QuotedString(
            "".join(self.rng.choice(alphabet) for _ in range(self.rng.randint(0, 8)))
        )

    def attributes(self, comp_names: list[str], inst_names: list[str]) -> dict:
        rng = self.rng
        choices = {
            "dimensions": lambda: tuple(rng.randint(0, 5) for _ in range(rng.randint(0, 3))),
            "index": lambda: rng.randint(0, 9),
            "is_stable": lambda: rng.random() < 0.5,
            "direction": lambda: rng.choice(["EQ", "NE", "LT", "GT"]),
            "kind": lambda: rng.choice(["kLoop", "kInput", "kCustom"]),
            "custom_call_target": self.quoted,
            "slice": lambda: tuple(
                SliceRange(rng.randint(0, 3), rng.randint(3, 9), rng.randint(1, 3))
                for _ in range(rng.randint(0, 3))
            ),
            "padding": lambda: PaddingConfig(
                tuple(
                    PadDim(rng.randint(-2, 2), rng.randint(-2, 2), rng.randint(0, 2))
                    for _ in range(rng.randint(0, 3))
                )
            ),
            "window": lambda: Window(
                tuple(
                    WindowDim(
                        rng.randint(1, 4),
                        rng.randint(1, 3),
                        rng.randint(-1, 2),
                        rng.randint(0, 2),
                        rng.randint(1, 2),
                        rng.randint(1, 2),
                        rng.random() < 0.3,
                    )
                    for _ in range(rng.randint(0, 3))
                )
            ),
            "dim_labels": self.dim_labels,
            "metadata": lambda: KeyValueList(
                (("op_name", self.quoted()), ("source_line", str(rng.randint(0, 99))))
            ),
            "frontend_attributes": lambda: KeyValueList(
                tuple((f"k{k}", self.quoted()) for k in range(rng.randint(0, 3)))
            ),
            "backend_config": lambda: RawAttribute(
                rng.choice(['{"a":[1,2],"b":{"c":"}"}}', '"quoted, text"', "{}"])
            ),
            "sharding": lambda: RawAttribute("{{replicated}, {maximal device=0}}"),
            "epsilon": lambda: rng.choice([0.001, 1e-05, 1.5, 0.0]),
            "future_attribute": lambda: RawAttribute(rng.choice(["[2,2]<=[4]", "x.y-z", "{a b}"])),
        }
        if comp_names:
            choices["to_apply"] = lambda: ComputationRef(rng.choice(comp_names))
            choices["branch_computations"] = lambda: tuple(
                ComputationRef(rng.choice(comp_names)) for _ in range(rng.randint(1, 3))
            )
        if inst_names:
            choices["control-predecessors"] = lambda: InstructionRefs(
                tuple(rng.sample(inst_names, rng.randint(1, min(2, len(inst_names)))))
            )
        keys = rng.sample(sorted(choices), rng.randint(0, 4))
        return {key: choices[key]() for key in keys}

    def dim_labels(self) -> ConvDimensionNumbers:
        rng = self.rng
        spatial = rng.randint(0, 3)

        def layout() -> tuple[int, int, tuple[int, ...]]:
            positions = list(range(spatial + 2))
            rng.shuffle(positions)
            return positions[0], positions[1], tuple(positions[2:])

        return ConvDimensionNumbers(*layout(), *layout(), *layout())

    def computation(self, name: str, comp_names: list[str], is_entry: bool) -> Computation:
        rng = self.rng
        comp = Computation(name=name, is_entry=is_entry)
        taken: set[str] = set()
        names: list[str] = []
        for k in range(rng.randint(0, 3)):
            shape = self.shape()
            names.append(self.name(taken))
            comp.add(Instruction(names[-1], "parameter", shape, parameter_number=k))
        count = rng.randint(1, 8)
        for _ in range(count):
            names.append(self.name(taken))
        body = names[len(comp.instructions) :]
        for inst_name in body:
            opcode = rng.choice(sorted(OPCODES))
            if opcode == "parameter":
                opcode = "negate"
            shape = self.shape()
            if opcode == "constant":
                if isinstance(shape, ArrayShape) and shape.is_token:
                    shape = self.array_shape()
                literal = self.literal(shape) if rng.random() < 0.9 else None
                comp.add(Instruction(inst_name, opcode, shape, literal=literal))
                continue
            inst = Instruction(inst_name, opcode, shape)
            inst.attributes = self.attributes(comp_names, [n for n in names if n != inst_name])
            if opcode == "broadcast":  # always there in heron's IR: the parser implies `{}`
                inst.attributes.setdefault("dimensions", ())
            if opcode in ("convolution", "reduce-window", "select-and-scatter"):
                inst.attributes.setdefault("window", Window(()))  # implied likewise
            comp.add(inst)
        by_name = {i.name: i for i in comp.instructions}
        for inst in comp.instructions:
            if inst.opcode not in ("constant", "parameter"):
                inst.operands = [by_name[rng.choice(names)] for _ in range(rng.randint(0, 3))]
        comp.root = rng.choice(comp.instructions)
        return comp

    def module(self) -> Module:
        rng = self.rng
        taken: set[str] = set()
        module = Module(name=self.name(set()))
        if rng.random() < 0.5:
            module.header = {
                "is_scheduled": rng.random() < 0.5,
                "entry_computation_layout": RawAttribute("{(f32[4]{0})->f32[]}"),
                "num_partitions": 2,
            }
        if rng.random() < 0.5:
            module.sections = [("FileNames", ('1 "a.py"', '2 "b.py"')), ("StackFrames", ())]
        comp_names: list[str] = []
        count = rng.randint(1, 4)
        for k in range(count):
            name = self.name(taken)
            module.computations.append(self.computation(name, list(comp_names), k == count - 1))
            comp_names.append(name)
        by_name = {c.name: c for c in module.computations}
        for inst in module.instructions():
            for value in inst.attributes.values():
                refs = value if isinstance(value, tuple) else (value,)
                for ref in refs:
                    if isinstance(ref, ComputationRef):
                        ref.computation = by_name[ref.name]
        return module


@pytest.mark.parametrize("seed", range(60))
def test_random_modules_round_trip(seed):
    module = RandomModules(seed).module()
    assert_round_trip(module)


@pytest.mark.parametrize("seed", range(10))
def test_random_modules_round_trip_through_the_grammar_alone(seed, monkeypatch):
    monkeypatch.setattr(parser_module, "_USE_FAST_PATH", False)
    assert_round_trip(RandomModules(seed).module())


# -- the corpus form -------------------------------------------------------------------

CORPUS_FORM = """
add {
  a = f32[] parameter(0)
  b = f32[] parameter(1)
  ROOT c = f32[] add(a, b)
}

fusion {
  p0 = f32[4] parameter(0)
  z = f32[] constant(0)
  ROOT r = f32[] reduce(p0, z), dimensions={0}, to_apply=add
}
"""


def test_corpus_form_prints_back_without_the_synthesised_entry():
    module = parse_module(CORPUS_FORM, "dir/reduce_test.hlo")
    text = assert_round_trip(module)
    assert "ENTRY" not in text and text.startswith("HloModule reduce_test\n")
    assert parse_module(text).fusion_under_test == "fusion"


def test_a_changed_entry_is_printed():
    module = parse_module(CORPUS_FORM)
    entry = module.entry
    entry.add(Instruction("extra", "negate", entry.root.shape, operands=[entry.root]))
    entry.root = entry.instructions[-1]
    text = print_module(module)
    assert "ENTRY %main (p0: f32[4]) -> f32[] {" in text
    assert "ROOT %extra = f32[] negate(%fusion)" in text
    assert parse_module(text).fusion_under_test is None


def test_printing_a_cyclic_module_terminates():
    module = parse_module("ENTRY e {\n  a = f32[] add(b, b)\n  ROOT b = f32[] add(a, a)\n}")
    assert_round_trip(module)


# -- jax ---------------------------------------------------------------------------------


def _while_and_sort(x, y):
    def body(carry):
        i, a = carry
        return i + 1, jnp.tanh(a) * 2 + jnp.sum(a)

    r = jax.lax.while_loop(lambda c: c[0] < 5, body, (0, x))[1]
    return r @ y.T, jnp.sort(x, axis=0), jnp.cumsum(x)


def _conv_and_cond(x, y):
    k = jnp.ones((3, 3, 4, 4), jnp.float32) * 0.125
    c = jax.lax.conv_general_dilated(
        x[None], k, (1, 1), "SAME", dimension_numbers=("NHWC", "HWIO", "NHWC")
    )
    z = jax.lax.cond(y[0, 0] > 0, lambda v: v * 2, lambda v: -v, c)
    return jax.nn.softmax(z, axis=-1), jnp.argmax(y, axis=1)


def _gather_scatter(x, y):
    idx = jnp.array([0, 2, 1], jnp.int32)
    g = x[idx]
    s = x.at[idx].add(y[:3])
    return g.astype(jnp.bfloat16), s, jnp.fft.fft(x[0]).real, jnp.nan * x - 0.0


JAX_FUNCTIONS = [_while_and_sort, _conv_and_cond, _gather_scatter]


@pytest.mark.parametrize("function", JAX_FUNCTIONS, ids=lambda f: f.__name__)
@pytest.mark.parametrize("stage", ["lowered", "compiled"])
def test_jax_hlo_round_trips(function, stage, monkeypatch):
    x = jnp.arange(16 * 4, dtype=jnp.float32).reshape(16, 4) / 7
    y = jnp.ones((16, 4), jnp.float32)
    if function is _conv_and_cond:
        x = x.reshape(4, 4, 4)
        y = y[:4]
    lowered = jax.jit(function).lower(x, y)
    text = lowered.as_text("hlo") if stage == "lowered" else lowered.compile().as_text()
    module = parse_module(text, f"<jax {stage}>")
    assert_round_trip(module)
    monkeypatch.setattr(parser_module, "_USE_FAST_PATH", False)
    slow = parse_module(text, f"<jax {stage}>")
    assert structural_difference(module, slow) is None
    assert [i.location for i in module.instructions()] == [i.location for i in slow.instructions()]
    if stage == "compiled":
        assert module.header["is_scheduled"] is True
        assert [title for title, _ in module.sections][:1] == ["FileNames"]
        assert any(i.opcode == "fusion" for i in module.instructions())
        assert any("metadata" in i.attributes for i in module.instructions())
    shape = module.entry.parameters[0].shape
    assert shape.same_type_and_dims(parse_shape(str(shape)))


# -- collectives, async, custom calls: the long tail of XLA's syntax ----------------------

EXOTIC_LINES = [
    (
        "HloModule exotic, is_scheduled=true, entry_computation_layout={(f32[4]"
        "{0}, f32[], f32[], f32[], f32[], /*index=5*/f32[])->f32[4]{0}}, num_pa"
        'rtitions=2, frontend_attributes={fingerprint_before_lhs="abc"}'
    ),
    "",
    "%add (a: f32[], b: f32[]) -> f32[] {",
    "  %a = f32[] parameter(0)",
    "  %b = f32[] parameter(1)",
    "  ROOT %s = f32[] add(%a, %b)",
    "}",
    "",
    '%async_comp (x: f32[4]) -> f32[4], execution_thread="host" {',
    "  %x = f32[4]{0} parameter(0)",
    "  ROOT %n = f32[4]{0} negate(%x)",
    "}",
    "",
    (
        "ENTRY %main (p: f32[4], q0: f32[], q1: f32[], q2: f32[], q3: f32[], /*"
        "index=5*/q4: f32[]) -> f32[4] {"
    ),
    "  %p = f32[4]{0} parameter(0), sharding={devices=[2]0,1}, parameter_replication={false}",
    "  %q0 = f32[] parameter(1)",
    "  %q1 = f32[] parameter(2)",
    "  %q2 = f32[] parameter(3)",
    "  %q3 = f32[] parameter(4)",
    "  %q4 = f32[] parameter(5)",
    (
        "  %t = (f32[], f32[], f32[], f32[], f32[], /*index=5*/f32[]) tuple(%q0"
        ", %q1, %q2, %q3, %q4, %q0)"
    ),
    (
        "  %ars = (f32[4]{0}, f32[4]{0}) all-reduce-start(f32[4]{0} %p), channe"
        "l_id=1, replica_groups={{0,1}}, use_global_device_ids=true, to_apply=%"
        'add, backend_config={"collective_backend_config":{"is_sync":false}}'
    ),
    "  %ard = f32[4]{0} all-reduce-done(%ars)",
    "  %ag = f32[8]{0} all-gather(%ard), channel_id=2, replica_groups=[1,2]<=[2], dimensions={0}",
    (
        '  %cc = f32[4]{0:T(128)} custom-call(%p), custom_call_target="foo$bar"'
        ", api_version=API_VERSION_TYPED_FFI, output_to_operand_aliasing={{}: ("
        "0, {})}, operand_layout_constraints={f32[4]{0}}, custom_call_has_side_"
        "effect=true, schedule=SCHEDULE_LATEST"
    ),
    (
        "  %as = ((f32[4]{0}), f32[4]{0}, s32[]) async-start(%p), async_executi"
        'on_thread="host", calls=%async_comp'
    ),
    '  %ad = f32[4]{0} async-done(%as), async_execution_thread="host", calls=%async_comp',
    "  %rng = (u32[2]{0}, u32[4]{0}) rng-bit-generator(u32[2]{0} %seed), algorithm=rng_three_fry",
    "  %seed = u32[2]{0} constant({1, 2})",
    "  %tok = token[] after-all()",
    '  %inf = ((f32[4]{0}), token[]) infeed(%tok), infeed_config="cfg"',
    "  %cp = f32[4]{0} collective-permute(%ad), channel_id=3, source_target_pairs={{0,1},{1,0}}",
    (
        '  %dom = f32[4]{0} domain(%cp), domain={kind="sharding", entry={maxima'
        "l device=0}, exit={replicated}}"
    ),
    (
        "  %dot = f32[4]{0} dot(%cp, %cp), lhs_contracting_dims={}, rhs_contrac"
        "ting_dims={}, operand_precision={highest,highest}, algorithm=dot_f32_f"
        "32_f32, sparsity=L.1@2:4"
    ),
    (
        "  %ts = f32[4]{0} triangular-solve(%dot, %dot), left_side=true, lower="
        "true, unit_diagonal=true, transpose_a=NO_TRANSPOSE"
    ),
    "  %tk = (f32[2]{0}, s32[2]{0}) topk(%ts), k=2, largest=true",
    (
        "  %bn = f32[4]{0} batch-norm-inference(%ts, %q0, %q0, %q0, %q0), epsil"
        "on=1e-05, feature_index=0"
    ),
    (
        "  ROOT %r = f32[4]{0} add(%bn, %dom), control-predecessors={%ts, %tk},"
        ' origin={{"r"}}, result_accuracy={tolerance={atol=0 rtol=0 ulps=1}}'
    ),
    "}",
]


def test_the_long_tail_of_xla_syntax_round_trips(monkeypatch):
    text = "\n".join(EXOTIC_LINES) + "\n"
    module = parse_module(text, "exotic.hlo")
    assert_round_trip(module)
    entry = module.entry
    assert entry.instruction("as").attributes["calls"].computation is module.computation(
        "async_comp"
    )
    assert module.computation("async_comp").trailing_attributes == 'execution_thread="host"'
    assert entry.instruction("ag").attributes["replica_groups"] == RawAttribute("[1,2]<=[2]")
    assert entry.instruction("bn").attributes["epsilon"] == 1e-05
    assert entry.instruction("rng").operands[0] is entry.instruction("seed")
    assert len(entry.instruction("t").shape.elements) == 6
    monkeypatch.setattr(parser_module, "_USE_FAST_PATH", False)
    assert structural_difference(module, parse_module(text, "exotic.hlo")) is None
