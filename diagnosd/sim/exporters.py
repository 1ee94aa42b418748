"""Everything the simulated fleet exposes, exporter by exporter, in one scrape."""

from __future__ import annotations

from diagnosd.sim import dcgm, ksm, litellm, node, sglang, vllm
from diagnosd.sim.exposition import Family
from diagnosd.sim.simulator import Simulator

EXPORTERS = {
    "vllm": vllm.families,
    "sglang": sglang.families,
    "dcgm": dcgm.families,
    "litellm": litellm.families,
    "ksm": ksm.families,
    "node": node.families,
}


def families(sim: Simulator, wanted: frozenset[str] | None = None) -> list[Family]:
    out: list[Family] = []
    for collect in EXPORTERS.values():
        out.extend(collect(sim, wanted))
    return out
