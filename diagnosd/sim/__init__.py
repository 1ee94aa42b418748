"""The fleet simulator: `diagnosd simulate` and `diagnosd demo` (see docs/fire-drills.md).

scenario.py (files) -> fleet.py (identities) -> simulator.py (the clock) over model.py (engines),
hardware.py (GPUs, nodes), gateway.py + ledger.py (LiteLLM) -> one module per exporter
(vllm, sglang, dcgm, litellm, ksm, node) -> exposition.py (text 0.0.4, OpenMetrics) -> server.py,
history.py; verify.py checks scenarios against the shipped rules on a real Prometheus.
"""

from diagnosd.sim.scenario import Scenario, load, names
from diagnosd.sim.server import MetricsServer
from diagnosd.sim.simulator import Simulator

__all__ = ["MetricsServer", "Scenario", "Simulator", "load", "names"]
