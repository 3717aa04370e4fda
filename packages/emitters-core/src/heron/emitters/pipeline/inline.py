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

One kind of small callee is left to LLVM: a function on plain scalars whose
copies would add more than :data:`SCALAR_GROWTH` ops (a sort network's
comparator, called twice per exchange). Nothing of heron's indexing passes
learns from its body in place, and every later pass walks each copy op by op
in Python; it is marked ``alwaysinline``, and LLVM's inliner makes the same
code (the PTX of the program corpus's sorts differs in one compare's form).
"""

from __future__ import annotations

from collections import Counter

from mlir import ir

from heron.emitters.callbacks import walk
from heron.emitters.ir_utils import block_ops, walk_ops
from heron.emitters.pipeline.manager import Pass, PipelineOptions
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


def _symbol_refs(attribute: ir.Attribute, found: set[str]) -> None:
    if isinstance(attribute, ir.FlatSymbolRefAttr):
        found.add(attribute.value)
    elif isinstance(attribute, ir.SymbolRefAttr):
        found.add(ir.SymbolRefAttr(attribute).value[0])
    elif isinstance(attribute, ir.ArrayAttr):
        for item in attribute:
            _symbol_refs(item, found)


def _referenced_symbols(root: ir.Operation) -> set[str]:
    """Every symbol some op under ``root`` names in an attribute (callee, reducer...)."""
    found: set[str] = set()
    for op in walk_ops(root):
        attributes = op.attributes
        for i in range(len(attributes)):
            named = attributes[i]
            if named.name != "sym_name":
                _symbol_refs(named.attr, found)
    return found


class _CallGraph:
    """Who calls whom in one symbol table, kept up to date while inlining.

    Built with one walk of the table; inlining a call only moves counts (the
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
        self.counts: Counter[str] = Counter(_callee_name(c) for c in walk_ops(table, PURE_CALL))
        self._sizes: dict[str, int] = {}
        self._components: dict[str, int] | None = None

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
        self._sizes.pop(caller, None)


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


def inline_call(call: ir.Operation, callee: ir.Operation) -> None:
    """Replace ``call`` by a copy of ``callee``'s body, results by what it returns.

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


def _inline_table(table: ir.Operation) -> None:
    functions = _functions(table)
    graph = _CallGraph(table, functions)
    for name in graph.post_order():
        # The caller's calls as they are now: calls cloned in from its callees are kept.
        for call in graph.calls[name]:
            callee_name = _callee_name(call)
            callee = functions.get(callee_name)
            if callee is None or graph.reaches(callee_name, name):
                continue
            if not list(callee.regions[0].blocks):
                continue  # a declaration: nothing to inline
            size = graph.body_size(callee_name)
            calls = graph.counts[callee_name]
            kept = size <= SMALL_FUNCTION_OPS and _kept_for_llvm(callee, size, calls)
            if kept:
                # LLVM inlines it at every call (the func-to-llvm conversion hands
                # ``passthrough`` on as the function's attributes).
                callee.attributes[PASSTHROUGH] = ir.ArrayAttr.get(
                    [ir.StringAttr.get("alwaysinline")]
                )
            elif size <= SMALL_FUNCTION_OPS or calls == 1:
                inline_call(call, callee)
                graph.inlined(name, callee_name)
    _erase_unreferenced(table)


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


def _erase_unreferenced(table: ir.Operation) -> None:
    """Drop private functions no op refers to, until none is left (they may refer to others).

    The symbols each top-level op refers to are collected once; erasing a
    function only removes its references.
    """
    used_by_table: set[str] = set()
    attributes = table.attributes
    for i in range(len(attributes)):
        if attributes[i].name != "sym_name":
            _symbol_refs(attributes[i].attr, used_by_table)
    top_level = _top_level_ops(table)
    refs = [_referenced_symbols(op) for op in top_level]
    alive = set(range(len(top_level)))
    candidates = {
        i: _symbol_name(op)
        for i, op in enumerate(top_level)
        if op.name == "func.func" and _is_private(op)
    }
    while True:
        used = used_by_table.union(*(refs[i] for i in alive))
        dead = [i for i, name in candidates.items() if name not in used]
        if not dead:
            return
        for i in dead:
            del candidates[i]
            alive.discard(i)
            top_level[i].erase()


def run(module: ir.Module, options: PipelineOptions) -> None:
    """Inline in every symbol table of the module (the module and any ``gpu.module``)."""
    # Collect first: inlining erases ops that a lazy walk would still visit.
    tables = [op for op in walk_ops(module.operation) if op.name in _SYMBOL_TABLES]
    for table in tables:
        _inline_table(table)


PASS = Pass(
    name="inline",
    run=run,
    description="inline pure_calls of small or once-called functions (post-order; small ones on "
    "scalars with many copies are left to LLVM, alwaysinline); erase unused private functions",
)
