"""benchmarks/cost_model_vs_xla.py and what it checks: heron's fusion prices are XLA's."""

from __future__ import annotations

from pathlib import Path

import pytest
from heron_test_support.benchmarks import load_benchmark
from heron_test_support.hlo_modules import division_chain

from heron.compiler.fusion.priority_fusion import first_priorities
from heron.hlo.parser import parse_module
from heron.hlo.printer import print_module
from heron.target import Target

ROOT = Path(__file__).resolve().parents[1]
SCRIPT = ROOT / "benchmarks" / "cost_model_vs_xla.py"

#: The first steps of XLA:GPU's priority_fusion_dump.txt for ``division_chain("c128")``
#: (jax-cuda13-pjrt 0.12, ``../shared/tools/xla_gpu``,
#: ``--flag xla_dump_hlo_pass_re=priority-fusion``), cut after its first fusion and the
#: price that follows it.
XLA_DUMP = """fusion_steps {
  update_priority {
    producer_name: "d1.1"
    consumer_names: "q1.1"
    us_fused: 1.583
    us_unfused: 2.6205
  }
}
fusion_steps {
  update_priority {
    producer_name: "d4.1"
    consumer_names: "use_a.1"
    consumer_names: "use_b.1"
    us_fused: 3.173
    us_unfused: 3.662
  }
}
fusion_steps {
  producer_ineligible {
    producer_name: "use_a.1"
    reason: "the consumer is not fusible"
  }
}
fusion_steps {
  fusion {
    fusion_name: "fusion"
    producer_name: "d3.1"
    consumer_name: "q3.1"
  }
}
fusion_steps {
  update_priority {
    producer_name: "q2.1"
    consumer_names: "fusion"
    us_fused: 1.00375
    us_unfused: 1.00375
  }
}
"""


def test_xlas_first_round_is_read_up_to_its_first_fusion() -> None:
    benchmark = load_benchmark(SCRIPT)
    assert benchmark.xla_first_round(XLA_DUMP) == {
        "d1": (("q1",), 1.583, 2.6205),
        "d4": (("use_a", "use_b"), 3.173, 3.662),
    }


def test_herons_first_prices_are_xlas_on_a_chain_of_complex_divisions() -> None:
    """Since the fifty-third session heron's model is XLA's where it has XLA's numbers
    (the h100's measured op profile): the same module priced by both within 1%."""
    module = parse_module(division_chain("c128"))
    before = print_module(module)
    prices = {p.producer: p for p in first_priorities(module, Target.preset("h100"))}
    assert print_module(module) == before  # pricing fuses nothing
    xla = load_benchmark(SCRIPT).xla_first_round(XLA_DUMP)
    for producer, (users, fused, apart) in xla.items():
        mine = prices[producer]
        assert tuple(sorted(mine.users)) == users
        assert mine.fused_seconds * 1e6 == pytest.approx(fused, rel=0.01)
        assert mine.apart_seconds * 1e6 == pytest.approx(apart, rel=0.01)
