"""node_exporter on the GPU nodes: the netdev, netclass, infiniband and diskstats collectors.

Names and labels as in node_exporter a7dcc3a0 (metrics-infra.md 4.1, samples/node_exporter);
`instance` is `<node>:9100`, so rules can map it to kube-state-metrics' `node`.
"""

from __future__ import annotations

import math

from diagnosd.sim.exposition import Collector, Family, Format, Kind, Labels
from diagnosd.sim.simulator import PodState, Simulator


def families(sim: Simulator, wanted: frozenset[str] | None = None) -> list[Family]:
    out = Collector(wanted)
    for state in sim.pods.values():
        if not state.pending:
            _node(out, state)
    return out.families()


def _f(out: Collector, name: str, kind: Kind, help: str) -> Family:
    return out.family(name, kind, help, Format.GO)


def _node(out: Collector, state: PodState) -> None:
    k = state.knobs
    scrape: Labels = (("instance", f"{state.pod.node}:9100"), ("job", "node-exporter"))
    eth = (("device", "eth0"), *scrape)
    _f(out, "node_network_receive_bytes_total", Kind.COUNTER, "Network device statistic receive_bytes.").add(
        eth, math.floor(state.nic_rx)
    )
    _f(out, "node_network_transmit_bytes_total", Kind.COUNTER, "Network device statistic transmit_bytes.").add(
        eth, math.floor(state.nic_tx)
    )
    _f(out, "node_network_speed_bytes", Kind.GAUGE, "Network device property: speed_bytes").add(
        eth, k.nic_gbps * 1e9 / 8.0
    )
    _f(out, "node_network_up", Kind.GAUGE, "Value is 1 if operstate is 'up', 0 otherwise.").add(eth, 1)
    port = (("device", "mlx5_0"), ("port", "1"), *scrape)
    info = (
        ("board_id", "MT_0000000838"),
        ("device", "mlx5_0"),
        ("firmware_version", "28.39.1002"),
        ("hca_type", "MT4129"),
        *scrape,
    )
    _f(
        out,
        "node_infiniband_info",
        Kind.GAUGE,
        "Non-numeric data from /sys/class/infiniband/<device>, value is always 1.",
    ).add(info, 1)
    _f(
        out,
        "node_infiniband_state_id",
        Kind.GAUGE,
        "State of the InfiniBand port (0: no change, 1: down, 2: init, 3: armed, 4: active, 5: act defer)",
    ).add(port, k.ib_state_id)
    _f(
        out,
        "node_infiniband_physical_state_id",
        Kind.GAUGE,
        (
            "Physical state of the InfiniBand port (0: no change, 1: sleep, 2: polling, 3: disable, 4: shift, 5: "
            "link up, 6: link error recover, 7: phytest)"
        ),
    ).add(port, k.ib_physical_state_id)
    _f(out, "node_infiniband_rate_bytes_per_second", Kind.GAUGE, "Maximum signal transfer rate").add(
        port, k.ib_gbps * 1e9 / 8.0
    )
    for name, help, value in (
        ("port_data_transmitted_bytes_total", "Number of data octets transmitted on all links", state.ib_tx),
        ("port_data_received_bytes_total", "Number of data octets received on all links", state.ib_rx),
        (
            "link_downed_total",
            "Number of times the link failed to recover from an error state and went down",
            state.ib_errors * 0.02,
        ),
        (
            "link_error_recovery_total",
            "Number of times the link successfully recovered from an error state",
            state.ib_errors * 0.2,
        ),
        ("symbol_error_total", "Number of minor link errors detected on one or more physical lanes.", state.ib_errors),
        (
            "port_errors_received_total",
            "Number of packets containing an error that were received on this port",
            state.ib_errors * 0.5,
        ),
        (
            "local_link_integrity_errors_total",
            (
                "Number of times that the count of local physical errors exceeded the threshold specified by "
                "LocalPhyErrors."
            ),
            0.0,
        ),
    ):
        _f(out, f"node_infiniband_{name}", Kind.COUNTER, help).add(port, math.floor(value))
    disk = (("device", "nvme0n1"), *scrape)
    _f(out, "node_disk_read_bytes_total", Kind.COUNTER, "The total number of bytes read successfully.").add(
        disk, math.floor(state.disk_read)
    )
