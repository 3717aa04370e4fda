"""heron-example-plugin: a third-party heron plugin, as small as one can be.

``emitter`` registers a hero emitter in the ``heron.emitters`` group,
``backend`` a backend in the ``heron.backends`` group and ``custom_calls`` a
custom-call target in the ``heron.custom_calls`` group; see this folder's
pyproject.toml for the entry points.
"""
