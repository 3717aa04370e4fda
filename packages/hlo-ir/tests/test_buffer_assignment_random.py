"""The randomised checker: random modules through copy insertion, the scheduler and assignment.

Each module mixes what buffer sharing can get wrong: while loops whose state
elements are passed through, swapped, duplicated or updated in place with
dynamic-update-slice; in-place updates (unfused, and as a fusion's root) of
parameters, constants, loop results and values still read later; tuples,
get-tuple-element and bitcasts (views of other values' bytes); conditionals;
multi-output fusions (two elementwise roots reading both operands, and two
dynamic-update-slice roots each updating its own operand in place);
outputs that are parameters, constants or the same value twice. Both checkers
of :mod:`heron.hlo.buffers.check` must pass, and the simulated run must equal
``evaluate_module`` bit for bit.
"""

from __future__ import annotations

from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from heron.hlo.parser import parse_module

A = "f32[4,8]{1,0}"
B = "f32[32]{0}"
U = "f32[1,8]{1,0}"
S = "s32[]"
SHAPES = {"A": A, "B": B, "U": U, "S": S}
CONSTANT_A = (
    "{" + ",".join("{" + ",".join(f"{r * 8 + c}.5" for c in range(8)) + "}" for r in range(4)) + "}"
)


class _Writer:
    """Builds one computation's text; values are kept by kind (A, B, U, S)."""

    def __init__(self, data: st.DataObject, names: list[int], depth: int) -> None:
        self.data = data
        self.names = names
        self.depth = depth
        self.lines: list[str] = []
        self.values: dict[str, list[str]] = {kind: [] for kind in SHAPES}
        self.computations: list[str] = []

    def fresh(self, base: str) -> str:
        self.names[0] += 1
        return f"{base}.{self.names[0]}"

    def emit(self, kind: str, text: str, base: str = "v") -> str:
        name = self.fresh(base)
        self.lines.append(f"  {name} = {SHAPES[kind]} {text}")
        self.values[kind].append(name)
        return name

    def pick(self, kind: str) -> str:
        return self.data.draw(st.sampled_from(self.values[kind]))

    def zero(self) -> str:
        return self.emit("S", "constant(0)", "zero")

    def step(self) -> None:
        choice = self.data.draw(
            st.sampled_from(
                [
                    "binary",
                    "binary",
                    "negate",
                    "dus",
                    "dus",
                    "dslice",
                    "slice",
                    "bitcast",
                    "unbitcast",
                    "tuple",
                    "constant",
                    "addu",
                    "while",
                    "conditional",
                    "fusion",
                    "outputs",
                    "stacking",
                ]
            )
        )
        pick = self.pick
        if choice == "binary":
            op = self.data.draw(st.sampled_from(["add", "multiply", "subtract", "maximum"]))
            self.emit("A", f"{op}({pick('A')}, {pick('A')})")
        elif choice == "negate":
            self.emit("A", f"negate({pick('A')})")
        elif choice == "dus":
            self.emit(
                "A", f"dynamic-update-slice({pick('A')}, {pick('U')}, {pick('S')}, {self.zero()})"
            )
        elif choice == "dslice":
            self.emit(
                "U",
                f"dynamic-slice({pick('A')}, {pick('S')}, {self.zero()}),"
                " dynamic_slice_sizes={1,8}",
            )
        elif choice == "slice":
            row = self.data.draw(st.integers(0, 3))
            self.emit("U", f"slice({pick('A')}), slice={{[{row}:{row + 1}], [0:8]}}")
        elif choice == "bitcast":
            self.emit("B", f"bitcast({pick('A')})")
        elif choice == "unbitcast" and self.values["B"]:
            self.emit("A", f"bitcast({pick('B')})")
        elif choice == "tuple":
            first, second = pick("A"), pick("U")
            name = self.fresh("t")
            self.lines.append(f"  {name} = ({A}, {U}) tuple({first}, {second})")
            self.emit("A", f"get-tuple-element({name}), index=0")
            self.emit("U", f"get-tuple-element({name}), index=1")
        elif choice == "constant":
            self.emit("A", f"constant({CONSTANT_A})", "c")
        elif choice == "addu":
            self.emit("U", f"add({pick('U')}, {pick('U')})")
        elif choice == "fusion":
            self.fusion()
        elif choice == "outputs":
            self.multi_output_fusion()
        elif choice == "stacking":
            self.stacking_fusion()
        elif choice == "while" and self.depth < 2:
            self.loop()
        elif choice == "conditional" and self.depth < 2:
            self.conditional()

    def body_writer(self) -> _Writer:
        inner = _Writer(self.data, self.names, self.depth + 1)
        return inner

    def loop(self) -> None:
        count = self.data.draw(st.integers(1, 3))
        state = f"({S}, " + ", ".join([A] * count) + ")"
        body = self.body_writer()
        param = body.fresh("state")
        body.lines.append(f"  {param} = {state} parameter(0)")
        counter = body.emit("S", f"get-tuple-element({param}), index=0", "i")
        elements = [
            body.emit("A", f"get-tuple-element({param}), index={k + 1}", "x") for k in range(count)
        ]
        body.emit("U", f"slice({elements[0]}), slice={{[0:1], [0:8]}}")
        for _ in range(self.data.draw(st.integers(1, 5))):
            body.step()
        one = body.emit("S", "constant(1)", "one")
        following = body.emit("S", f"add({counter}, {one})", "next")
        results = [body.pick("A") for _ in range(count)]
        root = body.fresh("root")
        body.lines.append(f"  ROOT {root} = {state} tuple({following}, {', '.join(results)})")
        body_name = self.fresh("body")
        self.computations += body.computations
        self.computations.append(f"{body_name} {{\n" + "\n".join(body.lines) + "\n}\n")
        condition = self.fresh("condition")
        trips = self.data.draw(st.integers(0, 3))
        self.computations.append(
            f"{condition} {{\n  s = {state} parameter(0)\n  i = {S} get-tuple-element(s), index=0\n"
            f"  n = {S} constant({trips})\n  ROOT lt = pred[] compare(i, n), direction=LT\n}}\n"
        )
        init = [self.emit("S", "constant(0)", "start")] + [self.pick("A") for _ in range(count)]
        tup = self.fresh("init")
        self.lines.append(f"  {tup} = {state} tuple({', '.join(init)})")
        loop = self.fresh("loop")
        self.lines.append(
            f"  {loop} = {state} while({tup}), condition={condition}, body={body_name}"
        )
        for k in range(count):
            self.emit("A", f"get-tuple-element({loop}), index={k + 1}", "out")

    def fusion(self) -> None:
        """A loop fusion whose root updates its parameter 0 in place (XLA's in-place fusion)."""
        name = self.fresh("fused")
        a, u, i, z, n, d = (self.fresh(base) for base in ("a", "u", "i", "z", "n", "d"))
        self.computations.append(
            f"{name} {{\n  {a} = {A} parameter(0)\n  {u} = {U} parameter(1)\n"
            f"  {i} = {S} parameter(2)\n  {z} = {S} constant(0)\n  {n} = {U} negate({u})\n"
            f"  ROOT {d} = {A} dynamic-update-slice({a}, {n}, {i}, {z})\n}}\n"
        )
        operands = f"{self.pick('A')}, {self.pick('U')}, {self.pick('S')}"
        self.emit("A", f"fusion({operands}), kind=kLoop, calls={name}", "fusion")

    def multi_output_fusion(self) -> None:
        """A loop fusion of two elementwise roots that both read both operands (threefry's
        round: each leaf may be written over an operand it reads)."""
        name = self.fresh("fused")
        a, b, s, d, t = (self.fresh(base) for base in ("a", "b", "s", "d", "t"))
        self.computations.append(
            f"{name} {{\n  {a} = {A} parameter(0)\n  {b} = {A} parameter(1)\n"
            f"  {s} = {A} add({a}, {b})\n  {d} = {A} subtract({b}, {a})\n"
            f"  ROOT {t} = ({A}, {A}) tuple({s}, {d})\n}}\n"
        )
        fused = self.fresh("mof")
        self.lines.append(
            f"  {fused} = ({A}, {A}) fusion({self.pick('A')}, {self.pick('A')}), kind=kLoop,"
            f" calls={name}"
        )
        for k in range(2):
            self.emit("A", f"get-tuple-element({fused}), index={k}", "leaf")

    def stacking_fusion(self) -> None:
        """A fusion updating two operands in place, a dynamic-update-slice root each (a
        scan's stacked outputs)."""
        name = self.fresh("fused")
        a, b, u, i, z, n, d, e, t = (
            self.fresh(base) for base in ("a", "b", "u", "i", "z", "n", "d", "e", "t")
        )
        self.computations.append(
            f"{name} {{\n  {a} = {A} parameter(0)\n  {b} = {A} parameter(1)\n"
            f"  {u} = {U} parameter(2)\n  {i} = {S} parameter(3)\n  {z} = {S} constant(0)\n"
            f"  {n} = {U} negate({u})\n"
            f"  {d} = {A} dynamic-update-slice({a}, {u}, {i}, {z})\n"
            f"  {e} = {A} dynamic-update-slice({b}, {n}, {i}, {z})\n"
            f"  ROOT {t} = ({A}, {A}) tuple({d}, {e})\n}}\n"
        )
        fused = self.fresh("stack")
        operands = f"{self.pick('A')}, {self.pick('A')}, {self.pick('U')}, {self.pick('S')}"
        self.lines.append(f"  {fused} = ({A}, {A}) fusion({operands}), kind=kLoop, calls={name}")
        for k in range(2):
            self.emit("A", f"get-tuple-element({fused}), index={k}", "stacked")

    def conditional(self) -> None:
        operand = self.pick("A")
        branches = []
        for _ in range(2):
            branch = self.body_writer()
            x = branch.emit("A", "parameter(0)", "arg")
            branch.emit("U", f"slice({x}), slice={{[1:2], [0:8]}}")
            branch.emit("S", "constant(2)", "two")
            for _ in range(self.data.draw(st.integers(0, 3))):
                branch.step()
            result = branch.pick("A")
            name = self.fresh("branch")
            branch.lines.append(f"  ROOT {branch.fresh('r')} = {A} bitcast({result})")
            self.computations += branch.computations
            self.computations.append(f"{name} {{\n" + "\n".join(branch.lines) + "\n}\n")
            branches.append(name)
        predicate = self.fresh("p")
        self.lines.append(
            f"  {predicate} = pred[] compare({self.pick('S')}, {self.zero()}), direction=GT"
        )
        self.emit(
            "A",
            f"conditional({predicate}, {operand}, {operand}), true_computation={branches[0]},"
            f" false_computation={branches[1]}",
        )


def _module_text(data: st.DataObject) -> str:
    entry = _Writer(data, [0], 0)
    entry.emit("A", "parameter(0)", "p")
    entry.emit("A", "parameter(1)", "p")
    entry.emit("S", "parameter(2)", "p")
    entry.emit("U", "slice(p.1), slice={[2:3], [0:8]}")
    for _ in range(data.draw(st.integers(1, 10))):
        entry.step()
    outputs = [
        entry.pick(data.draw(st.sampled_from(["A", "A", "U", "B"])) if entry.values["B"] else "A")
        for _ in range(data.draw(st.integers(1, 4)))
    ]
    shapes = []
    for name in outputs:
        shapes.append(next(SHAPES[k] for k, names in entry.values.items() if name in names))
    entry.lines.append(f"  ROOT out = ({', '.join(shapes)}) tuple({', '.join(outputs)})")
    return (
        "HloModule random\n\n"
        + "".join(entry.computations)
        + "ENTRY main {\n"
        + "\n".join(entry.lines)
        + "\n}\n"
    )


@settings(
    max_examples=150,
    deadline=None,
    suppress_health_check=[HealthCheck.too_slow, HealthCheck.function_scoped_fixture],
)
@given(data=st.data())
def test_random_modules_never_clash(check_buffers, data: st.DataObject) -> None:
    text = _module_text(data)
    module = parse_module(text)
    check_buffers(module, seed=data.draw(st.integers(0, 3)))
