"""The ``inline`` pass: inline subgraph functions that are small or called once.

The partitioner outlines every subgraph into a private function called with
``heron_gpu.pure_call``; that keeps emission linear in the size of the fusion,
but a call per element is a poor kernel. Like XLA's inliner, this pass inlines
a call when its callee is small (at most :data:`SMALL_FUNCTION_OPS` ops) or
called exactly once, so that shared subgraphs used at several different
indices stay functions while everything else folds into the entry function.
Callees are processed before their callers (post-order over the call graph),
so a caller sees its callees' final bodies. Private functions that nothing
refers to any more are erased afterwards.

Inlining brings the callees' own calls into the caller, and two callees that
call one subgraph at the same indices bring the same call twice: the caller
then keeps one of them (a ``pure_call`` is pure), and a callee whose calls all
come down to one this way is inlined after all. XLA's inliner runs CSE on each
function after inlining into it for the same reason. Without it a threefry hash
(jax's random bits: twenty rounds, each reading the two before it) stayed 58
functions called 325 times, which LLVM took four seconds to inline into 3,000
lines of PTX where XLA's kernel has 500. So a big function called more than once is
inlined where that brings a call equal to one its caller's block makes (the same
callee at the same values, :func:`_brings_an_equal_call`), within a growth bound
(:class:`_Growth`); without both, a blackjax NUTS kernel's functions, whose calls
differ in their operands, doubled level after level and its compile did not end.

Calls merge within one block only, and a concatenate's operands are computed in
the arms of an ``scf.if``: where two operands share their history (a hash's two
lanes), both arms call the same subgraphs at the same values. Before merging,
such calls, and what they read that both arms compute equally, are hoisted
before the ``scf.if`` (:mod:`~heron.emitters.pipeline.hoist_common`): numpyro's
key-splitting kernel went from 593 lines of PTX to 323.

One kind of small callee is left to LLVM: a function on plain scalars whose
copies would add more than :data:`SCALAR_GROWTH` ops (a sort network's
comparator, called twice per exchange). Nothing of heron's indexing passes
learns from its body in place, and every later pass walks each copy op by op
in Python; it is marked ``alwaysinline``, and LLVM's inliner makes the same
code (the PTX of the program corpus's sorts differs in one compare's form).
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Iterable

from mlir import ir

from heron.emitters.callbacks import walk
from heron.emitters.ir_utils import block_ops, walk_ops
from heron.emitters.pipeline.hoist_common import hoist_common_ops
from heron.emitters.pipeline.manager import Pass, PipelineOptions
from heron.emitters.pipeline.upstream import upstream_pass_manager
from heron.hlo.errors import UnsupportedError

PURE_CALL = "heron_gpu.pure_call"
#: LLVM function attributes on a ``func.func``: what ``func-to-llvm`` gives the function.
PASSTHROUGH = "passthrough"

#: A callee with at most this many ops (nested ones included, terminator excluded)
#: is inlined at every call site.
SMALL_FUNCTION_OPS = 30
#: The most ops the copies of a small function on scalars may add before it is left to
#: LLVM's inliner instead (:func:`_kept_for_llvm`).
SCALAR_GROWTH = 512

#: The ops a function may grow by, beyond the largest shared callee inlined into it, by
#: inlining shared callees where its block calls a function they call (:class:`_Growth`).
SHARED_GROWTH_OPS = 2 * SMALL_FUNCTION_OPS

_SYMBOL_TABLES = ("builtin.module", "gpu.module")


def _symbol_name(op: ir.Operation) -> str:
    return ir.StringAttr(op.attributes["sym_name"]).value


def _callee_name(call: ir.Operation) -> str:
    return ir.FlatSymbolRefAttr(call.attributes["callee"]).value


def _is_private(function: ir.Operation) -> bool:
    if "sym_visibility" not in function.attributes:
        return False
    return ir.StringAttr(function.attributes["sym_visibility"]).value == "private"


def _functions(table: ir.Operation) -> dict[str, ir.Operation]:
    """The ``func.func`` ops directly inside one symbol table, by name."""
    body = table.regions[0].blocks[0]
    return {_symbol_name(op): op for op in block_ops(body) if op.name == "func.func"}


def _body_size(function: ir.Operation) -> int:
    """Ops in the function's body, nested ones included, terminators of the entry excluded."""
    return len(walk_ops(function)) - 2  # the func.func itself and its return


class _CallGraph:
    """Who calls whom in one symbol table, kept up to date while inlining.

    Built with one walk of each function; inlining a call only moves counts (the
    caller loses the call and gains the callee's calls), so no decision
    rescans the module. ``edges[f]`` counts the ``pure_call`` ops inside ``f``
    by callee; ``counts[g]`` counts every ``pure_call`` of ``g`` in the table.
    """

    def __init__(self, table: ir.Operation, functions: dict[str, ir.Operation]) -> None:
        self.functions = functions
        self.calls: dict[str, list[ir.Operation]] = {}
        self.edges: dict[str, Counter[str]] = {}
        for name, function in functions.items():
            self.calls[name] = walk_ops(function, PURE_CALL)
            self.edges[name] = Counter(_callee_name(c) for c in self.calls[name])
        # (a nested symbol table's calls name its own functions, never these)
        self.counts: Counter[str] = Counter()
        for calls in self.edges.values():
            self.counts.update(calls)
        self._sizes: dict[str, int] = {}
        self._components: dict[str, int] | None = None
        self._sizes_of_components: Counter[int] | None = None
        #: Private functions no call reaches any more (:meth:`_release`).
        self.released: set[str] = set()

    def post_order(self) -> list[str]:
        """Function names, callees before callers; calls on a cycle are never inlined."""
        order: list[str] = []
        state: dict[str, int] = {}  # 1: on the stack, 2: done

        def visit(name: str) -> None:
            state[name] = 1
            for callee in self.edges[name]:
                if callee in self.functions and callee not in state:
                    visit(callee)
            state[name] = 2
            order.append(name)

        for name in self.functions:
            if name not in state:
                visit(name)
        return order

    def reaches(self, start: str, target: str) -> bool:
        """Whether ``start`` calls ``target``, directly or not (inlining it would recurse).

        Asked only for a call ``target -> start``, so it holds exactly when both
        lie in one strongly connected component of the call graph. Inlining
        never changes the components: it replaces an edge ``f -> g`` between
        two components (``g`` does not reach ``f``) by ``g``'s edges, which
        keeps every path that does not end at ``g``, so every cycle.
        """
        if self._components is None:
            self._components = _components(self.functions, self.edges)
        component = self._components.get(start)
        return start == target or (
            component is not None and component == self._components.get(target)
        )

    def recursive(self, name: str) -> bool:
        """Whether ``name`` calls itself, directly or not."""
        if self._components is None:
            self._components = _components(self.functions, self.edges)
        if self.edges.get(name, Counter())[name] > 0:
            return True
        component = self._components.get(name)
        if self._sizes_of_components is None:
            self._sizes_of_components = Counter(self._components.values())
        return component is not None and self._sizes_of_components[component] > 1

    def body_size(self, name: str) -> int:
        size = self._sizes.get(name)
        if size is None:
            size = self._sizes[name] = _body_size(self.functions[name])
        return size

    def inlined(self, caller: str, callee: str) -> None:
        """Record that one call of ``callee`` in ``caller`` was replaced by its body."""
        self.edges[caller][callee] -= 1
        self.counts[callee] -= 1
        self.edges[caller].update(self.edges[callee])
        self.counts.update(self.edges[callee])
        size, added = self._sizes.get(caller), self._sizes.get(callee)
        if size is None or added is None:
            self._sizes.pop(caller, None)
        else:  # the call's one op gives way to the callee's body
            self._sizes[caller] = size - 1 + added
        self._release(callee)

    def measured(self, name: str, size: int) -> None:
        """Record that ``name``'s body changed otherwise (CSE) and is now ``size`` ops."""
        self._sizes[name] = size

    def merged(self, caller: str, callee: str) -> None:
        """Record that one call of ``callee`` in ``caller`` was replaced by an equal one."""
        self.edges[caller][callee] -= 1
        self.counts[callee] -= 1
        self._sizes.pop(caller, None)
        self._release(callee)

    def _release(self, name: str) -> None:
        """A private function nothing calls any more (erased at the end, unless an
        attribute names it) no longer counts among its callees' callers."""
        function = self.functions.get(name)
        if self.counts[name] > 0 or function is None or not _is_private(function):
            return
        if name in self.released:
            return
        self.released.add(name)
        for callee, n in self.edges[name].items():
            if n > 0:
                self.counts[callee] -= n
                self._release(callee)


def _components(
    functions: dict[str, ir.Operation], edges: dict[str, Counter[str]]
) -> dict[str, int]:
    """Strongly connected component number of each function (Tarjan, iterative)."""
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    component: dict[str, int] = {}
    stack: list[str] = []
    on_stack: set[str] = set()
    count = 0
    for root in functions:
        if root in index:
            continue
        work = [(root, iter(edges[root]))]
        index[root] = low[root] = len(index)
        stack.append(root)
        on_stack.add(root)
        while work:
            name, callees = work[-1]
            advanced = False
            for callee in callees:
                if callee not in functions or edges[name][callee] <= 0:
                    continue
                if callee not in index:
                    index[callee] = low[callee] = len(index)
                    stack.append(callee)
                    on_stack.add(callee)
                    work.append((callee, iter(edges[callee])))
                    advanced = True
                    break
                if callee in on_stack:
                    low[name] = min(low[name], index[callee])
            if advanced:
                continue
            work.pop()
            if work:
                parent = work[-1][0]
                low[parent] = min(low[parent], low[name])
            if low[name] == index[name]:
                while True:
                    member = stack.pop()
                    on_stack.discard(member)
                    component[member] = count
                    if member == name:
                        break
                count += 1
    return component


def _top_level_ops(function: ir.Operation) -> list[ir.Operation]:
    """The ops of the one block of ``function``'s (or a module's) region, in order.

    Found with a walk that does not descend, which hands out plain
    ``ir.Operation`` objects: iterating ``block.operations`` builds an OpView
    per op, and for ops of a dialect with no Python module every one of them
    costs a failed import.
    """
    found: list[ir.Operation] = []

    def visit(op: ir.Operation) -> ir.WalkResult:
        if op == function:
            return ir.WalkResult.ADVANCE
        found.append(op)
        return ir.WalkResult.SKIP

    walk(function, visit, ir.WalkOrder.PRE_ORDER, name="inline: top-level ops")
    return found


def inline_call(call: ir.Operation, callee: ir.Operation) -> list[ir.Operation]:
    """Replace ``call`` by a copy of ``callee``'s body, results by what it returns; the
    ops it put in the call's block.

    The callee is cloned once, as a whole (MLIR remaps the values defined inside
    it), next to the call; its arguments are replaced by the call's operands
    and its ops moved before the call, so no op is cloned or remapped one by one.
    """
    blocks = list(callee.regions[0].blocks)
    if len(blocks) != 1:
        raise UnsupportedError(
            f"inline: cannot inline @{_symbol_name(callee)}: its body has {len(blocks)} blocks"
        )
    copy = callee.operation.clone(ip=ir.InsertionPoint(call)).operation
    ops = _top_level_ops(copy)
    if not ops or ops[-1].name != "func.return":
        copy.erase()
        raise UnsupportedError(f"inline: @{_symbol_name(callee)} does not end in func.return")
    entry = copy.regions[0].blocks[0]
    for argument, operand in zip(entry.arguments, call.operands, strict=True):
        argument.replace_all_uses_with(operand)
    *body, terminator = ops
    for op in body:
        op.move_before(call)
    for old, new in zip(call.results, terminator.operands, strict=True):
        old.replace_all_uses_with(new)
    call.erase()
    copy.erase()
    return body


def _inline_table(table: ir.Operation) -> None:
    functions = _functions(table)
    graph = _CallGraph(table, functions)
    direct: dict[str, _TopLevelCalls] = {}  # each processed function's, final
    for name in graph.post_order():
        # The caller's calls as they are now, again while inlining or merging changes
        # them: calls cloned in from a callee are inlined by the same rules.
        every = calls = graph.calls[name]
        growth = _Growth(graph.body_size(name))
        while True:
            _inline_calls(functions, graph, name, calls, every, direct, growth)
            remaining = _merge_equal_calls(functions[name], graph, name)
            if remaining is None:
                break
            # Not on a cycle: copies of a recursive function's calls would unroll it.
            every = remaining
            calls = [call for call in remaining if not graph.recursive(_callee_name(call))]
        direct[name] = _TopLevelCalls(_top_level_calls(functions[name]))


class _Growth:
    """How far one function may grow by the shared-callee rule: to its size before, plus
    the largest shared callee inlined into it, plus :data:`SHARED_GROWTH_OPS`.

    Where the calls a shared callee brings in equal the caller's (a threefry hash: each
    round reads the two before it with the same operands), merging them leaves the
    caller about one callee larger than before, round after round. Where they differ in
    their operands nothing merges, and each inlining brings more calls that qualify: a
    blackjax NUTS kernel's functions doubled level after level (759, 1,493, 2,935 ops)
    and its compile did not end without a bound."""

    def __init__(self, before: int) -> None:
        self._before = before
        self._largest = 0

    def allows(self, size_now: int, callee_size: int) -> bool:
        largest = max(self._largest, callee_size)
        return size_now + callee_size <= self._before + largest + SHARED_GROWTH_OPS

    def inlined(self, callee_size: int) -> None:
        self._largest = max(self._largest, callee_size)


class _TopLevelCalls:
    """A processed function's calls at its top level (its body is final once processed:
    callees come before callers) and the callees they call."""

    def __init__(self, calls: Iterable[ir.Operation]) -> None:
        self.calls = calls
        self.callees = frozenset(_callee_name(call) for call in calls)


def _top_level_calls(function: ir.Operation) -> list[ir.Operation]:
    blocks = list(function.regions[0].blocks)
    if not blocks:
        return []
    return [op for op in block_ops(blocks[0]) if op.name == PURE_CALL]


def _inline_calls(
    functions: dict[str, ir.Operation],
    graph: _CallGraph,
    name: str,
    calls: list[ir.Operation],
    every: list[ir.Operation],
    direct: dict[str, _TopLevelCalls],
    growth: _Growth,
) -> bool:
    """Inline each of ``calls`` (in function ``name``, of ``every`` call it makes) whose
    callee is small, called once, or calls a function its call's block calls too (as
    ``growth`` allows); whether any was."""
    # The calls in each block of the caller, kept as inlining changes them (found from
    # the calls, not by listing each block's ops: a tenth of the pass's time).
    # Lists, not sets: an op's hash follows its operands, which inlining replaces.
    in_block: dict[ir.Block, list[ir.Operation]] = {}
    for call in every:
        in_block.setdefault(call.block, []).append(call)
    beside: dict[ir.Block, set[str]] = {}  # the callees called in each block of the caller
    keys: dict[ir.Block, _CallKeys] = {}  # and their calls by value (made when needed)
    inlined = False
    for call in calls:
        callee_name = _callee_name(call)
        callee = functions.get(callee_name)
        if callee is None or graph.reaches(callee_name, name):
            continue
        if not list(callee.regions[0].blocks):
            continue  # a declaration: nothing to inline
        size = graph.body_size(callee_name)
        count = graph.counts[callee_name]
        kept = size <= SMALL_FUNCTION_OPS and _kept_for_llvm(callee, size, count)
        if kept:
            # LLVM inlines it at every call (the func-to-llvm conversion hands
            # ``passthrough`` on as the function's attributes).
            callee.attributes[PASSTHROUGH] = ir.ArrayAttr.get([ir.StringAttr.get("alwaysinline")])
            continue
        block = call.block
        if size > SMALL_FUNCTION_OPS and count > 1:
            own = direct.get(callee_name)
            if own is None or not own.callees:
                continue
            called = beside.get(block)
            if called is None:
                called = beside[block] = {_callee_name(op) for op in in_block[block]}
            if called.isdisjoint(own.callees) or not growth.allows(graph.body_size(name), size):
                continue
            made = keys.get(block)
            if made is None:
                made = keys[block] = _CallKeys(in_block[block])
            if not _brings_an_equal_call(call, callee, own.calls, made):
                continue
            growth.inlined(size)
        block_calls = in_block[block]
        block_calls.remove(call)  # before it is erased
        moved = inline_call(call, callee)
        graph.inlined(name, callee_name)
        inlined = True
        block_calls.extend(op for op in moved if op.name == PURE_CALL)
        keys.pop(block, None)
        if block in beside:
            beside[block].update(direct[callee_name].callees if callee_name in direct else ())
    return inlined


class _CallKeys:
    """The calls of one block by what they compute: the callee and their operands' value
    numbers (:class:`_ValueNumbers`), as the merge after CSE would find them equal."""

    def __init__(self, calls: Iterable[ir.Operation]) -> None:
        """``calls``: the block's ``pure_call`` ops."""
        self.numbers: dict[object, int] = {}
        values = _ValueNumbers({}, self.numbers)
        self.calls = {(_callee_name(op), tuple(values.of(v) for v in op.operands)) for op in calls}


def _brings_an_equal_call(
    call: ir.Operation, callee: ir.Operation, callee_calls: list[ir.Operation], beside: _CallKeys
) -> bool:
    """Whether inlining ``call`` of ``callee`` brings into its block a call equal to one
    already there (the same callee at the same values, read through the call's
    operands): then CSE and :func:`_merge_equal_calls` make the two one, which is what
    the shared-callee rule inlines for (a threefry hash's rounds). Where the calls it
    brings differ in their operands nothing merges and the caller only grows: a blackjax
    NUTS kernel's functions doubled level after level (759, 1,493, 2,935 ops)."""
    entry = callee.regions[0].blocks[0]
    outside = _ValueNumbers({}, beside.numbers)
    arguments = {
        argument: outside.of(operand)
        for argument, operand in zip(entry.arguments, call.operands, strict=True)
    }
    values = _ValueNumbers(arguments, beside.numbers)
    for op in callee_calls:
        if (_callee_name(op), tuple(values.of(v) for v in op.operands)) in beside.calls:
            return True
    return False


class _ValueNumbers:
    """A number per value that two equal computations share (value numbering, the numbers
    in ``numbers``): a constant by its type and value, a result of a region-free op by
    the op's name, attributes, type, result number and operands' numbers, anything else
    by the value itself; ``given`` numbers some values up front (a callee's arguments as
    its call's operands). Numbers, not nested keys: a chain of ``x + x`` hashed as
    nested tuples doubles at every step."""

    def __init__(self, given: dict[ir.Value, int], numbers: dict[object, int]) -> None:
        self._known: dict[ir.Value, int] = dict(given)
        self._numbers = numbers

    def _number(self, key: object) -> int:
        return self._numbers.setdefault(key, len(self._numbers))

    def of(self, value: ir.Value) -> int:
        known = self._known.get(value)
        if known is not None:
            return known
        pending = [value]
        while pending:
            top = pending[-1]
            if top in self._known:
                pending.pop()
                continue
            owner = top.owner
            if not isinstance(owner, ir.Operation | ir.OpView) or len(owner.regions):
                self._known[top] = self._number(("value", top))
                pending.pop()
                continue
            operation = owner.operation
            missing = [v for v in operation.operands if v not in self._known]
            if missing:
                pending.extend(missing)
                continue
            pending.pop()
            if operation.name == "arith.constant":
                key: object = (str(top.type), str(operation.attributes["value"]))
            else:
                named = operation.attributes
                attributes = tuple(
                    sorted((a.name, str(a.attr)) for a in map(named.__getitem__, range(len(named))))
                )
                key = (
                    operation.name,
                    attributes,
                    str(top.type),
                    ir.OpResult(top).result_number,
                    tuple(self._known[v] for v in operation.operands),
                )
            self._known[top] = self._number(key)
        return self._known[value]


def _merge_equal_calls(
    function: ir.Operation, graph: _CallGraph, name: str
) -> list[ir.Operation] | None:
    """Replace each ``pure_call`` of ``function`` that an earlier one of its block equals
    (the callee and the operands, a constant operand by its value) by that one, after
    upstream CSE has shared the rest; the calls left if any was merged, else None. A
    function that calls no callee twice has nothing to merge and is left as it is (CSE
    would change the code LLVM sees: a GEMM kernel's K loop unrolled otherwise).

    Calls equal in both arms of an ``scf.if`` are first hoisted before it
    (:func:`~heron.emitters.pipeline.hoist_common.hoist_common_ops`), where they merge."""
    if max(graph.edges[name].values(), default=0) < 2:  # the calls it makes, kept counted
        return None
    upstream_pass_manager("func.func(cse)", function.context).run(function)
    # One walk for the calls and the size CSE left (the func.func and its return aside).
    ops = walk_ops(function)
    size = len(ops) - 2
    calls = [op for op in ops if op.name == PURE_CALL]
    names = [_callee_name(call) for call in calls]
    repeated = {callee for callee, n in Counter(names).items() if n > 1}
    hoisted = hoist_common_ops([c for c, n in zip(calls, names, strict=True) if n in repeated])
    if hoisted:
        size -= len(hoisted)  # the twins erased
        for callee in hoisted:
            if callee is not None:  # a call erased: its equal, hoisted, calls the callee
                graph.merged(name, callee)
        calls = walk_ops(function, PURE_CALL)
    first: dict[tuple, ir.Operation] = {}
    kept: list[ir.Operation] = []
    merged = False
    for call in calls:
        callee = _callee_name(call)  # (again: a hoist erased some calls named above)
        key = (call.block, callee, *(_operand_key(v) for v in call.operands))
        earlier = first.get(key)
        if earlier is None:
            first[key] = call
            kept.append(call)
            continue
        for old, new in zip(call.results, earlier.results, strict=True):
            old.replace_all_uses_with(new)
        call.erase()
        graph.merged(name, callee)
        size -= 1
        merged = True
    graph.measured(name, size)
    return kept if merged or hoisted else None


def _operand_key(value: ir.Value) -> object:
    """``value``, or for a constant its type and value (equal constants are one operand)."""
    owner = value.owner
    if isinstance(owner, ir.Operation | ir.OpView) and owner.name == "arith.constant":
        return (str(value.type), str(owner.attributes["value"]))
    return value


def _kept_for_llvm(callee: ir.Operation, size: int, calls: int) -> bool:
    """Whether a small callee stays a function for LLVM's inliner: one on scalars only
    (no tensor and no ``index``, so none of heron's indexing passes learns anything from
    its body in place) whose copies would add more than :data:`SCALAR_GROWTH` ops.

    A sort network calls its comparator twice per exchange: a 32-element row's 15
    stages made 30 copies of a 26-op comparator, three quarters of the kernel every
    later pass walked op by op. LLVM inlines it (``alwaysinline``, given it in
    lower-tensors) into the same code."""
    if size * calls <= SCALAR_GROWTH:
        return False
    function_type = ir.FunctionType(ir.TypeAttr(callee.attributes["function_type"]).value)
    return all(_plain_scalar(t) for t in [*function_type.inputs, *function_type.results])


def _plain_scalar(t: ir.Type) -> bool:
    return isinstance(t, ir.IntegerType | ir.FloatType)


def run(module: ir.Module, options: PipelineOptions) -> None:
    """Inline in every symbol table of the module (the module and any ``gpu.module``)."""
    # Collect first: inlining erases ops that a lazy walk would still visit.
    tables = [op for op in walk_ops(module.operation) if op.name in _SYMBOL_TABLES]
    for table in tables:
        _inline_table(table)
    # Private functions nothing refers to any more (a callee inlined everywhere), until
    # none is left, in every symbol table: MLIR's own pass finds the references (any
    # attribute of any op naming a symbol) in C++, where a walk of every op's attributes
    # in Python was a tenth of this pass.
    upstream_pass_manager("builtin.module(symbol-dce)", module.context).run(module.operation)


PASS = Pass(
    name="inline",
    run=run,
    description="inline pure_calls of small or once-called functions (post-order; small ones on "
    "scalars with many copies are left to LLVM, alwaysinline); erase unused private functions",
)
