"""Fixtures of the emitter plugins' tests."""

from __future__ import annotations

import pytest

import heron.plugins.loop as loop_plugin
from heron.emitters import selection
from heron.emitters.hookspecs import EmitterSpec
from heron.emitters.registry import EmitterRegistry


@pytest.fixture
def force_emitter(monkeypatch):
    """``force(name, factory)``: that emitter takes every fusion (the loop emitter stays below).

    So an emitter is tested on a fusion whatever hero selection decides; the
    corpus acceptance (tests/test_corpus_*.py) uses the real registry.
    """

    def force(name, factory):
        specs = [(s, None) for s in loop_plugin.heron_emitter_specs()]
        specs.append(
            (EmitterSpec(name=name, priority=100, claims=lambda f: True, factory=factory), None)
        )
        monkeypatch.setattr(selection, "default_registry", lambda: EmitterRegistry(specs))

    return force
