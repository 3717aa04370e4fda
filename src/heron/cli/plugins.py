"""``heron plugins``: the installed hero emitters, backends and custom-call targets,
and where they come from.

For each backend also whether it can run here (its own reason) and its compile
stages, in order, with the kind of file each makes.
"""

from __future__ import annotations

import argparse

from heron.cli.common import CommandError


def register(subparsers: argparse._SubParsersAction) -> None:
    parser = subparsers.add_parser(
        "plugins",
        help="list installed hero emitters, backends and custom-call targets",
        description=(
            "List the plugins registered in the heron.emitters, heron.backends and"
            " heron.custom_calls entry-point groups, with the distribution each comes from"
            " and, for backends, whether it can run here and the stages that compile for it."
        ),
    )
    parser.set_defaults(handler=run)


def _origin(table, name: str) -> str:
    origin = table.origin(name)
    if origin is None:
        return "registered in code"
    return f"{origin.distribution} {origin.version} ({origin.entry_point} = {origin.value})"


def run(args: argparse.Namespace) -> int:
    try:
        from heron.emitters.registry import load_emitters
        from heron.runtime.core.registry import load_backends
    except ImportError as exc:
        raise CommandError(
            f"{exc}: install heron-emitters-core and heron-runtime-core (the heron meta"
            " distribution depends on both)"
        ) from exc
    emitters = load_emitters()
    print("hero emitters (entry-point group heron.emitters):")
    if not len(emitters):
        print("  (none installed)")
    for spec in emitters.specs:
        print(f"  {spec.name}  priority {spec.priority}  from {_origin(emitters, spec.name)}")
    backends = load_backends()
    print("backends (entry-point group heron.backends):")
    if not len(backends):
        print("  (none installed)")
    for spec in backends.specs:
        status = backends.availability(spec.name)
        state = "available" if status.available else "unavailable"
        print(f"  {spec.name}  priority {spec.priority}  from {_origin(backends, spec.name)}")
        print(f"      {state}: {status.reason}")
        print(f"      stages: {describe_stages(spec.stages)}")
    _custom_calls()
    return 0


def _custom_calls() -> None:
    from heron.hlo.custom_calls.registry import load_custom_calls

    calls = load_custom_calls()
    print("custom-call targets (entry-point group heron.custom_calls, docs/custom-calls.md):")
    if not len(calls):
        print("  (none installed)")
    for target in calls.targets():
        print(f"  {target}  host  from {_origin(calls, target)}")


def describe_stages(stages) -> str:
    """``llvm-ir (.ll) -> ptx (.ptx) -> cubin (.cubin)``, or why there are none."""
    if not stages:
        return "none (it runs artefacts compiled elsewhere)"
    return " -> ".join(
        f"{stage.name} (.{stage.extension})" if stage.extension else stage.name for stage in stages
    )
