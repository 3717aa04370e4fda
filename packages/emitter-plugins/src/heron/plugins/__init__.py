"""heron.plugins: the built-in hero emitters, one subpackage each (skeleton).

What will live here (see ARCHITECTURE.md): ``heron.plugins.loop``,
``.transpose``, ``.reduction``, ``.scatter``, ``.concatenate``, the in-place
dynamic-update-slice emitter and the input-slices emitter. Each is registered
through the ``heron.emitters`` entry-point group in this distribution's
pyproject.toml, exactly as a third-party emitter would be, and implements the
``heron_emitter_specs`` hook of ``heron.emitters.hookspecs``. None exists yet
in this version, so none is registered.
"""

__version__ = "0.1.0"
