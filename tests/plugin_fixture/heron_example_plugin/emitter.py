"""A hero emitter that claims the fusions whose name starts with ``example``."""

from heron.emitters.hookspecs import EmitterSpec, hookimpl


class ExampleEmitter:
    """What the factory builds for one fusion; a real emitter would emit MLIR."""

    def __init__(self, fusion):
        self.fusion = fusion


def claims(fusion) -> bool:
    return getattr(fusion, "name", "").startswith("example")


@hookimpl
def heron_emitter_specs():
    return [
        EmitterSpec(
            name="example",
            priority=5,
            claims=claims,
            factory=ExampleEmitter,
            description="claims fusions named example*",
        )
    ]
