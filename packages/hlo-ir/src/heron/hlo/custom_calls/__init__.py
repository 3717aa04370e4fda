"""Custom calls: the ``heron.custom_calls`` plugin group (docs/custom-calls.md).

A ``custom-call`` instruction names a ``custom_call_target`` that no HLO
semantics defines: a plugin provides it. The contract lives here, in
heron-hlo-ir, because the three packages that meet a custom call all depend
on it: the reference evaluator (heron.hlo) evaluates one, the compiler
(heron.compiler) turns one into a ``CustomCallThunk``, and the runtime
(heron.runtime.core) runs that thunk.

- ``hookspecs``: the hook (``heron_custom_call_specs``) and ``CustomCallSpec``
  (a target name and its host implementation);
- ``call``: ``CustomCall``, what one call site hands its implementation (its
  attributes, declared shapes and where it is), and ``invoke``, which calls
  the implementation and checks what it returns;
- ``registry``: the targets by name, loaded from the entry points, with
  registration in code; an unknown target or a target registered twice is an
  error naming it.
"""
