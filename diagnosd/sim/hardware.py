"""The GPUs and node of a pod, read the way dcgm-exporter and node_exporter report them.

Readings follow the engine: utilisation is the share of time a kernel runs (host time per step
is idle GPU), memory-copy utilisation the memory traffic of each step, clocks and temperatures
the knobs that throttle them; framebuffer use is what vLLM reserves up front.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field

from diagnosd.sim.model import EAGER_MS, Engine
from diagnosd.sim.noise import jitter
from diagnosd.sim.spec import GpuSpec, PodKnobs

IDLE_SM_MHZ = 345.0
CONTEXT_MIB = 480.0  # CUDA context and non-torch allocations outside vLLM's budget


@dataclass(frozen=True)
class Reading:
    util: float = 0.0  # %
    mem_copy: float = 0.0  # %
    sm_clock: float = IDLE_SM_MHZ
    temp: float = 32.0
    power: float = 0.0
    fb_used: float = 0.0  # MiB
    gr_active: float = 0.0  # 0-1
    tensor_active: float = 0.0
    dram_active: float = 0.0
    pcie_tx: float = 0.0  # bytes/s
    pcie_rx: float = 0.0
    nvlink_mbs: float = 0.0


@dataclass
class Gpu:
    index: int
    energy_mj: float = 0.0
    reading: Reading = field(default_factory=Reading)


def read(
    gpu: GpuSpec, index: int, k: PodKnobs, engine: Engine | None, noise: int, t: float, loading: bool = False
) -> Reading:
    """One GPU of a pod at time t: idle when the engine is down, its memory taken while it loads;
    another process's memory on the GPU is there either way."""
    if engine is None:
        fb = _fb_used(gpu, index, k) if loading else min(k.other_fb_mib, gpu.fb_total_mib - gpu.fb_reserved_mib)
        return Reading(
            util=8.0 if loading else 0.0,
            temp=34.0 * jitter(noise, t, 0.02),
            power=gpu.idle_power_w * jitter(noise + 1, t, 0.03),
            fb_used=fb,
        )
    tick = engine.tick
    active = 1.0 - math.exp(-engine.running)
    step_ms = tick.step_s * 1000.0
    # Kernels run except while the host schedules and launches (eager mode launches every kernel).
    launch = k.step_overhead_ms + (EAGER_MS if k.enforce_eager else 0.0)
    busy = active * max(0.0, 1.0 - (k.host_ms + launch) / step_ms) if step_ms else 0.0
    util = min(1.0, busy + k.gpu_contention * (1.0 - busy))
    # Decode steps stream the weights and the KV cache (memory stays busy while math overlaps it);
    # prefill is compute-bound but its attention still reads the cached context.
    mem = active * (tick.mem_ms * 1.03 / step_ms + 0.6 * tick.prefill_share) if step_ms else 0.0
    mem = min(1.0, mem + 0.35 * k.gpu_contention)
    throttle = 1.0 - k.clock_factor
    load = 0.45 * util + 0.45 * mem
    power = gpu.idle_power_w + (gpu.power_limit_w - gpu.idle_power_w) * min(1.0, load + 1.5 * throttle)
    clock = gpu.max_sm_clock_mhz * k.clock_factor * jitter(noise + 2, t, 0.004) if util > 0.03 else IDLE_SM_MHZ
    return Reading(
        util=100.0 * util,
        mem_copy=100.0 * mem,
        sm_clock=min(clock, gpu.max_sm_clock_mhz),
        temp=(36.0 + 40.0 * util + 60.0 * throttle) * jitter(noise + 3, t, 0.015),
        power=min(power * jitter(noise + 4, t, 0.02), gpu.power_limit_w),
        fb_used=_fb_used(gpu, index, k),
        gr_active=0.96 * util,
        tensor_active=active * (0.15 + 0.55 * tick.prefill_share),
        dram_active=0.92 * mem,
        pcie_tx=2.0e6 + tick.served * tick.output_mean * 8.0,
        pcie_rx=3.0e6 + tick.served * tick.prompt_mean * 8.0,
        nvlink_mbs=0.0 if gpu.count == 1 else tick.tokens_per_step * tick.steps_per_s * 2.6 * k.nvlink_share,
    )


def _fb_used(gpu: GpuSpec, index: int, k: PodKnobs) -> float:
    used = k.gpu_memory_utilization * gpu.fb_total_mib + CONTEXT_MIB + k.extra_fb_mib + k.other_fb_mib
    if gpu.count > 1:
        used -= k.fb_skew * gpu.fb_total_mib * index / (gpu.count - 1)
    return max(0.0, min(used, gpu.fb_total_mib - gpu.fb_reserved_mib))


def start_refused(gpu: GpuSpec, k: PodKnobs) -> bool:
    """vLLM V1's start-up check (Worker.init_device, before any weight is read): the memory CUDA
    reports free, once the engine's own context exists, must hold --gpu-memory-utilization of the
    total, or the engine raises "Free memory on device ... is less than desired GPU memory
    utilization" and exits."""
    total = gpu.fb_total_mib - gpu.fb_reserved_mib
    return total - CONTEXT_MIB - k.other_fb_mib < k.gpu_memory_utilization * total


def fb_free(gpu: GpuSpec, used: float) -> float:
    return max(0.0, gpu.fb_total_mib - gpu.fb_reserved_mib - used)
