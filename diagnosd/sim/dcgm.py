"""dcgm-exporter's /metrics in Kubernetes mode: the fields of etc/default-counters.csv, per GPU.

Labels follow internal/pkg/rendermetrics (gpu, UUID, pci_bus_id, device, modelName, hostname
[Hostname before 4.6.0-4.8.3], the DCGM_FI_DRIVER_VERSION label field, then the pod the GPU is
allocated to); integer fields print as integers and double fields with %f, as the exporter does.
"""

from __future__ import annotations

import hashlib
import math
import uuid
from collections.abc import Callable

from diagnosd.sim.exposition import Collector, Family, Format, Kind, Labels
from diagnosd.sim.hardware import Gpu, Reading, fb_free, read
from diagnosd.sim.simulator import PodState, Simulator
from diagnosd.sim.spec import GpuSpec

Field = tuple[str, Kind, Format, str, Callable[[GpuSpec, Gpu, Reading], float]]

FIELDS: list[Field] = [
    ("DCGM_FI_DEV_SM_CLOCK", Kind.GAUGE, Format.INT, "SM clock frequency (in MHz).", lambda s, g, r: r.sm_clock),
    (
        "DCGM_FI_DEV_MEM_CLOCK",
        Kind.GAUGE,
        Format.INT,
        "Memory clock frequency (in MHz).",
        lambda s, g, r: s.mem_clock_mhz,
    ),
    ("DCGM_FI_DEV_MEMORY_TEMP", Kind.GAUGE, Format.INT, "Memory temperature (in C).", lambda s, g, r: r.temp + 6.0),
    ("DCGM_FI_DEV_GPU_TEMP", Kind.GAUGE, Format.INT, "GPU temperature (in C).", lambda s, g, r: r.temp),
    ("DCGM_FI_DEV_POWER_USAGE", Kind.GAUGE, Format.FIXED, "Power draw (in W).", lambda s, g, r: r.power),
    (
        "DCGM_FI_DEV_TOTAL_ENERGY_CONSUMPTION",
        Kind.COUNTER,
        Format.INT,
        "Total energy consumption since boot (in mJ).",
        lambda s, g, r: g.energy_mj,
    ),
    ("DCGM_FI_DEV_PCIE_REPLAY_COUNTER", Kind.COUNTER, Format.INT, "Total number of PCIe retries.", lambda s, g, r: 0),
    ("DCGM_FI_DEV_GPU_UTIL", Kind.GAUGE, Format.INT, "GPU utilization (in %).", lambda s, g, r: r.util),
    ("DCGM_FI_DEV_MEM_COPY_UTIL", Kind.GAUGE, Format.INT, "Memory utilization (in %).", lambda s, g, r: r.mem_copy),
    ("DCGM_FI_DEV_ENC_UTIL", Kind.GAUGE, Format.INT, "Encoder utilization (in %).", lambda s, g, r: 0),
    ("DCGM_FI_DEV_DEC_UTIL", Kind.GAUGE, Format.INT, "Decoder utilization (in %).", lambda s, g, r: 0),
    (
        "DCGM_FI_DEV_FB_FREE",
        Kind.GAUGE,
        Format.INT,
        "Framebuffer memory free (in MiB).",
        lambda s, g, r: fb_free(s, r.fb_used),
    ),
    ("DCGM_FI_DEV_FB_USED", Kind.GAUGE, Format.INT, "Framebuffer memory used (in MiB).", lambda s, g, r: r.fb_used),
    (
        "DCGM_FI_DEV_FB_RESERVED",
        Kind.GAUGE,
        Format.INT,
        "Framebuffer memory reserved (in MiB).",
        lambda s, g, r: s.fb_reserved_mib,
    ),
    (
        "DCGM_FI_DEV_NVLINK_BANDWIDTH_TOTAL",
        Kind.COUNTER,
        Format.INT,
        "Total number of NVLink bandwidth counters for all lanes.",
        lambda s, g, r: r.nvlink_mbs,
    ),
    ("DCGM_FI_DEV_VGPU_LICENSE_STATUS", Kind.GAUGE, Format.INT, "vGPU License status", lambda s, g, r: 0),
    (
        "DCGM_FI_DEV_UNCORRECTABLE_REMAPPED_ROWS",
        Kind.COUNTER,
        Format.INT,
        "Number of remapped rows for uncorrectable errors",
        lambda s, g, r: 0,
    ),
    (
        "DCGM_FI_DEV_CORRECTABLE_REMAPPED_ROWS",
        Kind.COUNTER,
        Format.INT,
        "Number of remapped rows for correctable errors",
        lambda s, g, r: 0,
    ),
    (
        "DCGM_FI_DEV_ROW_REMAP_FAILURE",
        Kind.GAUGE,
        Format.INT,
        "Whether remapping of rows has failed",
        lambda s, g, r: 0,
    ),
    (
        "DCGM_FI_PROF_GR_ENGINE_ACTIVE",
        Kind.GAUGE,
        Format.FIXED,
        "Ratio of time the graphics engine is active.",
        lambda s, g, r: r.gr_active,
    ),
    (
        "DCGM_FI_PROF_PIPE_TENSOR_ACTIVE",
        Kind.GAUGE,
        Format.FIXED,
        "Ratio of cycles the tensor (HMMA) pipe is active.",
        lambda s, g, r: r.tensor_active,
    ),
    (
        "DCGM_FI_PROF_DRAM_ACTIVE",
        Kind.GAUGE,
        Format.FIXED,
        "Ratio of cycles the device memory interface is active sending or receiving data.",
        lambda s, g, r: r.dram_active,
    ),
    (
        "DCGM_FI_PROF_PCIE_TX_BYTES",
        Kind.GAUGE,
        Format.INT,
        (
            "The rate of data transmitted over the PCIe bus - including both protocol headers and data payloads - in "
            "bytes per second."
        ),
        lambda s, g, r: r.pcie_tx,
    ),
    (
        "DCGM_FI_PROF_PCIE_RX_BYTES",
        Kind.GAUGE,
        Format.INT,
        (
            "The rate of data received over the PCIe bus - including both protocol headers and data payloads - in "
            "bytes per second."
        ),
        lambda s, g, r: r.pcie_rx,
    ),
]


def families(sim: Simulator, wanted: frozenset[str] | None = None) -> list[Family]:
    assert sim.scenario.fleet is not None
    host_label = sim.scenario.fleet.dcgm_hostname_label
    out = Collector(wanted)
    for name, kind, fmt, help, value in FIELDS:
        family = out.family(name, kind, help, fmt)
        for state in sim.pods.values():
            if state.pending:
                continue  # its node is out of the cluster
            spec = state.pod.deployment.gpu
            for gpu in state.gpus:
                reading = value(spec, gpu, gpu.reading)
                if name == "DCGM_FI_PROF_PIPE_TENSOR_ACTIVE":
                    reading *= _expert_work(state, gpu.index)
                family.add(_labels(state, gpu.index, host_label), _clean(reading, fmt))
        for labels, spec, gpu in _spares(sim, host_label):
            family.add(labels, _clean(value(spec, gpu, gpu.reading), fmt))
    return out.families()


def _spares(sim: Simulator, host_label: str) -> list[tuple[Labels, GpuSpec, Gpu]]:
    """GPUs of a pod's node that no pod is allocated: idle, and without pod labels (as dcgm-exporter
    reports a GPU no container holds), once per node."""
    out: list[tuple[Labels, GpuSpec, Gpu]] = []
    seen: set[str] = set()
    for state in sim.pods.values():
        pod, spare = state.pod, state.knobs.node_spare_gpus
        if state.pending or spare == 0 or pod.node in seen:
            continue
        seen.add(pod.node)
        spec = pod.deployment.gpu
        for index in range(len(pod.gpus), len(pod.gpus) + spare):
            reading = read(spec, index, state.knobs, None, state.noise + index * 7, sim.time)
            gpu = Gpu(index, energy_mj=reading.power * (sim.time - sim.origin) * 1000.0, reading=reading)
            uid = uuid.UUID(bytes=hashlib.sha256(f"{pod.node}/{index}".encode()).digest()[:16])
            labels: Labels = (
                ("gpu", str(index)),
                ("UUID", f"GPU-{uid}"),
                ("pci_bus_id", f"00000000:{0x18 + 0x10 * index:02X}:00.0"),
                ("device", f"nvidia{index}"),
                ("modelName", spec.model),
                (host_label, pod.node),
                ("DCGM_FI_DRIVER_VERSION", spec.driver),
                ("instance", f"{pod.node_ip}:9400"),
                ("job", "dcgm-exporter"),
            )
            out.append((labels, spec, gpu))
    return out


def _expert_work(state: PodState, index: int) -> float:
    """GPU `index`'s expert work as a share of the busiest GPU's (1 without expert parallelism).

    With balancedness b (mean / max tokens per GPU of a forward pass, what SGLang reports) the
    first GPU holds the hot experts and the others split the rest evenly: n * mean tokens in all,
    mean / b on the first, so each other GPU computes (n * b - 1) / (n - 1) of the busiest's work
    and its tensor pipe idles the rest of the pass, waiting in the all-to-all. GPU utilisation does
    not drop with it: the waiting GPU runs the communication kernel all along.
    """
    n = len(state.gpus)
    if not state.pod.deployment.expert_parallel or n < 2 or index == 0:
        return 1.0
    b = state.knobs.expert_balancedness
    return max(0.0, (n * b - 1.0) / (n - 1.0))


def _clean(value: float, fmt: Format) -> float:
    return float(math.floor(value + 0.5)) if fmt is Format.INT else value


_cache: dict[tuple[str, str, int, str], Labels] = {}


def _labels(state: PodState, index: int, host_label: str) -> Labels:
    key = (state.pod.key, state.name, index, host_label)
    found = _cache.get(key)
    if found is None:
        pod, gpu = state.pod, state.pod.gpus[index]
        found = _cache[key] = (
            ("gpu", str(gpu.index)),
            ("UUID", gpu.uuid),
            ("pci_bus_id", gpu.pci_bus_id),
            ("device", f"nvidia{gpu.index}"),
            ("modelName", pod.deployment.gpu.model),
            (host_label, pod.node),
            ("DCGM_FI_DRIVER_VERSION", pod.deployment.gpu.driver),
            ("container", "vllm" if pod.deployment.engine == "vllm" else "sglang"),
            ("namespace", pod.namespace),
            ("pod", state.name),
            ("instance", f"{pod.node_ip}:9400"),
            ("job", "dcgm-exporter"),
        )
    return found
