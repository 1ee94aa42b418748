"""node_exporter on the GPU nodes: the netdev, netclass, infiniband and diskstats collectors.

Names and labels as in node_exporter a7dcc3a0 (metrics-infra.md 4.1, samples/node_exporter);
`instance` is `<node>:9100`, so rules can map it to kube-state-metrics' `node`.
"""

from __future__ import annotations

import math

from diagnosd.sim.exposition import Collector, Family, Format, Kind, Labels
from diagnosd.sim.simulator import PodState, Simulator

BOOTED = 30 * 86400.0  # the nodes booted this long before the anchor (a pod replacement keeps its node)


def families(sim: Simulator, wanted: frozenset[str] | None = None) -> list[Family]:
    out = Collector(wanted)
    for state in sim.pods.values():
        if not state.pending:
            _node(out, state, sim.time - (sim.anchor - BOOTED))
    return out.families()


def _f(out: Collector, name: str, kind: Kind, help: str) -> Family:
    return out.family(name, kind, help, Format.GO)


def _node(out: Collector, state: PodState, uptime: float) -> None:
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
    # The used port: its state and counters follow the pod's knobs.
    counters = (
        state.ib_tx,
        state.ib_rx,
        state.ib_link_downs,
        state.ib_errors * 0.2,
        state.ib_errors,
        state.ib_errors * 0.5,
        0.0,
    )
    _port(out, scrape, "mlx5_0", k.ib_state_id, k.ib_physical_state_id, k.ib_gbps, counters)
    # Spare HCAs with no cable: Down, the PHY polling for a partner, since boot; node_exporter still
    # lists them with every counter at 0 (it reads each port under /sys/class/infiniband).
    for spare in range(k.ib_spare_ports):
        _port(out, scrape, f"mlx5_{spare + 1}", 1, 2, k.ib_gbps, (0.0,) * len(counters))
    disk = (("device", "nvme0n1"), *scrape)
    _f(out, "node_disk_read_bytes_total", Kind.COUNTER, "The total number of bytes read successfully.").add(
        disk, math.floor(state.disk_read)
    )
    _disks(out, scrape, state, uptime)


def _disks(out: Collector, scrape: Labels, state: PodState, uptime: float) -> None:
    """Busy time per disk, the swap device, and the node's NFS client (diskstats and nfs collectors)."""
    busy = _f(out, "node_disk_io_time_seconds_total", Kind.COUNTER, "Total seconds spent doing I/Os.")
    busy.add((("device", "nvme0n1"), *scrape), state.disk_busy)
    # zram0 (compressed swap in RAM) is listed where --collector.diskstats.device-exclude is narrowed
    # (node_exporter releases before the z?ram default list it too) and has been seen at 100 % util
    # whenever swap is in use. It is no disk: the rules exclude it, so one that forgot would see a
    # saturated device on every node.
    swap = (("device", "zram0"), *scrape)
    busy.add(swap, uptime)
    _f(out, "node_disk_read_bytes_total", Kind.COUNTER, "The total number of bytes read successfully.").add(
        swap, math.floor(uptime) * 4096
    )
    # /proc/net/rpc/nfs exists once the NFS client module is loaded: READ calls per NFS version.
    nfs = _f(out, "node_nfs_requests_total", Kind.COUNTER, "Number of NFS procedures invoked.")
    nfs.add((("method", "Read"), ("proto", "3"), *scrape), 0)
    nfs.add((("method", "Read"), ("proto", "4"), *scrape), math.floor(state.nfs_reads))


# (name, help, where the counter stops): the IB PortCounters saturate at their width instead of
# wrapping (the kernel's sysfs reads link_downed and link_error_recovery as 8-bit, symbol_error and
# port_rcv_errors as 16-bit, local_link_integrity_errors as 4-bit fields; only perfquery -R clears
# them); the data counters are the 64-bit extended ones.
COUNTERS = (
    ("port_data_transmitted_bytes_total", "Number of data octets transmitted on all links", math.inf),
    ("port_data_received_bytes_total", "Number of data octets received on all links", math.inf),
    (
        "link_downed_total",
        "Number of times the link failed to recover from an error state and went down",
        255,
    ),
    ("link_error_recovery_total", "Number of times the link successfully recovered from an error state", 255),
    ("symbol_error_total", "Number of minor link errors detected on one or more physical lanes.", 65535),
    (
        "port_errors_received_total",
        "Number of packets containing an error that were received on this port",
        65535,
    ),
    (
        "local_link_integrity_errors_total",
        "Number of times that the count of local physical errors exceeded the threshold specified by LocalPhyErrors.",
        15,
    ),
)


def _port(
    out: Collector,
    scrape: Labels,
    device: str,
    state_id: int,
    physical_state_id: int,
    gbps: float,
    counters: tuple[float, ...],
) -> None:
    """One port (port 1) of one HCA: node_infiniband_info, its state, rate and counters."""
    port = (("device", device), ("port", "1"), *scrape)
    info = (
        ("board_id", "MT_0000000838"),
        ("device", device),
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
    ).add(port, state_id)
    _f(
        out,
        "node_infiniband_physical_state_id",
        Kind.GAUGE,
        (
            "Physical state of the InfiniBand port (0: no change, 1: sleep, 2: polling, 3: disable, 4: shift, 5: "
            "link up, 6: link error recover, 7: phytest)"
        ),
    ).add(port, physical_state_id)
    _f(out, "node_infiniband_rate_bytes_per_second", Kind.GAUGE, "Maximum signal transfer rate").add(
        port, gbps * 1e9 / 8.0
    )
    for (name, help, stops), value in zip(COUNTERS, counters, strict=True):
        _f(out, f"node_infiniband_{name}", Kind.COUNTER, help).add(port, math.floor(min(value, stops)))
