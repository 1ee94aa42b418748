"""The simulated fleet on a clock: ticks the gateway, the engines, their GPUs and nodes forward in time.

Time starts at `anchor - history` and moves on the Schedule's ticks up to the anchor (the
history that is backfilled), then in `live_step`-second ticks (what a live scrape sees). The
schedule and every noise draw depend only on the scenario, the seed and the anchor, so a history
file and a live server built from the same three agree wherever they meet.
"""

from __future__ import annotations

import math
from collections.abc import Iterator
from dataclasses import dataclass, field

from diagnosd.sim import ledger, pd
from diagnosd.sim.fleet import Layout, Pod, layout, pod_name, pod_uid
from diagnosd.sim.gateway import Gateway, Knobs, arrivals, route
from diagnosd.sim.hardware import Gpu, read, start_refused
from diagnosd.sim.histogram import SGLANG_BOUNDS, Bounds, vllm_bounds
from diagnosd.sim.model import Capacity, Engine, account, capacity, cpu_cores, hang, step
from diagnosd.sim.noise import jitter, stream
from diagnosd.sim.scenario import Replace, Scenario, seconds
from diagnosd.sim.schedule import LOOKS, Schedule
from diagnosd.sim.spec import DeploymentKnobs, PodKnobs
from diagnosd.sim.timeline import Timeline

DAY = 86400.0
# The default: a day of baselines, and two hours before it. The drills derive theirs from the trees.
HISTORY = 26 * 3600.0
PEAK_BEFORE_ANCHOR = 3600.0
LOAD_SECONDS = 180.0  # model load before the first container became ready
CHECK_SECONDS = 20.0  # from a vLLM container's start to its memory check (imports, NCCL set-up)
BACKOFF = (10.0, 300.0)  # the kubelet's CrashLoopBackOff: first delay, doubling up to the cap


@dataclass
class Exit:
    reason: str
    code: int
    at: float


@dataclass
class PodState:
    """One pod as Kubernetes and its exporters see it: identity, phase, containers, engine, GPUs."""

    pod: Pod
    knobs: PodKnobs
    cap: Capacity
    bounds: Bounds
    engine: Engine | None  # None while the container is not serving (loading, crashed, pending)
    name: str
    uid: str
    created: float
    scheduled: float | None  # None while unschedulable
    container_started: float
    gpus: list[Gpu]
    generation: int = 0
    ready_since: float | None = None
    restarts: int = 0
    crashes: int = 0  # exits in a row without the engine coming up (the back-off doubles)
    last_exit: Exit | None = None
    down_until: float = 0.0
    loading: tuple[float, float] | None = None  # (from, until) of the last model load: the disk reads
    nic_tx: float = 0.0  # bytes, node_exporter counters of the pod's node
    nic_rx: float = 0.0
    disk_read: float = 0.0
    disk_busy: float = 0.0  # seconds the local disk had I/O in flight (node_disk_io_time_seconds_total)
    nfs_reads: float = 0.0  # NFS READ calls of the node's client
    ib_tx: float = 0.0
    ib_rx: float = 0.0
    ib_errors: float = 0.0
    ib_link_downs: float = 0.0
    cpu_seconds: float = 0.0  # the engine's API server process (reset with the container)
    noise: int = 0

    @property
    def pending(self) -> bool:
        return self.scheduled is None


@dataclass
class Simulator:
    scenario: Scenario
    anchor: float
    seed: int = 0
    history: float = HISTORY
    step: float = 60.0
    coarse: float = 900.0
    live_step: float = 1.0
    looks: tuple[tuple[float, float], ...] = LOOKS  # where the schedule ticks densely (see Schedule)
    far: float = math.inf  # before anchor - far, hourly ticks (see Schedule)
    layout: Layout = field(init=False)
    timeline: Timeline = field(init=False)
    pods: dict[str, PodState] = field(init=False)
    gateway: Gateway | None = field(init=False)
    deployments: dict[str, DeploymentKnobs | None] = field(init=False)
    time: float = field(init=False)
    schedule: Schedule = field(init=False)

    def __post_init__(self) -> None:
        assert self.scenario.fleet is not None
        if self.history % self.step or self.history % self.coarse:
            raise ValueError(f"history ({self.history:g}s) must be a whole number of steps ({self.coarse:g}s)")
        self.schedule = Schedule(self.origin, self.anchor, self.step, self.coarse, self.live_step, self.looks, self.far)
        self.layout = layout(self.scenario.fleet)
        self.timeline = Timeline(self.scenario.faults, self.anchor)
        self.time = self.origin
        self.pods = {p.key: self._start(p) for p in self.layout.pods}
        self.gateway = Gateway() if self.scenario.fleet.gateway else None
        self.deployments = {d.name: d.autoscaler for d in self.scenario.fleet.deployments}

    @property
    def origin(self) -> float:
        return self.anchor - self.history

    def _start(self, pod: Pod) -> PodState:
        knobs = self.timeline.knobs(pod.key, pod.deployment.pod, self.origin)
        created = self.origin - LOAD_SECONDS - 420.0
        state = PodState(
            pod=pod,
            knobs=knobs,
            cap=_capacity(pod, knobs),
            bounds=_bounds(pod, knobs),
            engine=Engine(started=self.origin),
            name=pod.name,
            uid=pod.uid,
            created=created,
            scheduled=created + 2.0,
            container_started=self.origin - LOAD_SECONDS,
            gpus=[Gpu(g.index) for g in pod.gpus],
            ready_since=self.origin,
            loading=(self.origin - LOAD_SECONDS, self.origin),
            noise=stream(self.seed, pod.name),
        )
        return state

    def advance(self, until: float) -> Iterator[float]:
        """Tick up to `until`, yielding the time after each tick (history samples there)."""
        while (t := self.schedule.next(self.time)) <= until + 1e-9:
            self._tick(t)
            yield t

    def run(self, until: float) -> None:
        for _ in self.advance(until):
            pass

    def diurnal(self, t: float) -> float:
        """The daily traffic cycle, peaking an hour before the anchor.

        Tied to the anchor rather than the wall clock so that a scenario loads its fleet the same
        way whenever it runs (the demo at 3 a.m. finds what the tests found); a day earlier the
        cycle is at the same phase, so baselines compare like with like.
        """
        fleet = self.scenario.fleet
        assert fleet is not None
        return 1.0 + fleet.diurnal * math.cos(2.0 * math.pi * (t - self.anchor + PEAK_BEFORE_ANCHOR) / DAY)

    def _tick(self, t: float) -> None:
        dt = t - self.time
        for state in self.pods.values():
            self._lifecycle(state, t)
        knobs = self._knobs(t)
        engines = {key: s.engine for key, s in self.pods.items()}
        rates = {key: 0.0 for key in self.pods}
        if self.gateway is not None:
            route(self.gateway, self.layout, knobs, engines, self.diurnal(t))
            rates.update(arrivals(self.gateway, knobs))
        for key, state in self.pods.items():
            direct = state.knobs.direct_rps * self.diurnal(t)
            self._pod(state, (rates[key] + direct) * jitter(state.noise, t, 0.12), t, dt)
        if self.gateway is not None:
            ledger.account(self.gateway, self.layout, knobs, engines, dt)
        self.time = t

    def _knobs(self, t: float) -> Knobs:
        fleet = self.scenario.fleet
        assert fleet is not None
        for key, state in self.pods.items():
            state.knobs = self.timeline.knobs(key, state.pod.deployment.pod, t)
        groups = {
            g.name: self.timeline.knobs(f"group/{g.name}", g, t)
            for g in (fleet.gateway.groups if fleet.gateway else [])
        }
        keys = {
            k.alias: self.timeline.knobs(f"key/{k.alias}", k, t) for k in (fleet.gateway.keys if fleet.gateway else [])
        }
        for d in fleet.deployments:
            if d.autoscaler is not None:
                self.deployments[d.name] = self.timeline.knobs(f"deployment/{d.name}", d.autoscaler, t)
        return Knobs(groups, keys, {key: s.knobs for key, s in self.pods.items()})

    def _lifecycle(self, state: PodState, t: float) -> None:
        """Replacements and container deaths in this tick, and containers whose load is over."""
        for when, replace in self.timeline.replacements(state.pod.key, self.time, t):
            self._replace(state, when, replace)
        for when, restart in self.timeline.restarts(state.pod.key, self.time, t):
            if state.engine is None and not self._loading(state, when):
                continue  # already dead (or never scheduled): nothing to kill
            state.engine = None
            state.restarts += 1
            state.last_exit = Exit(restart.reason, restart.exit_code, when)
            state.container_started = when + 1.0
            state.down_until = when + seconds(restart.downtime)
            state.loading = (state.container_started, state.down_until)
            state.ready_since = None
        self._refuse_start(state, t)
        if state.engine is None and state.scheduled is not None and state.down_until <= t:
            knobs = self.timeline.knobs(state.pod.key, state.pod.deployment.pod, t)
            state.engine = Engine(started=state.down_until)
            state.crashes = 0
            state.bounds = _bounds(state.pod, knobs)
            state.cap = _capacity(state.pod, knobs)
            state.ready_since = state.down_until
            state.cpu_seconds = 0.0

    def _loading(self, state: PodState, when: float) -> bool:
        return state.loading is not None and state.loading[0] <= when < state.down_until

    def _refuse_start(self, state: PodState, t: float) -> None:
        """vLLM V1 containers that find too little free GPU memory exit (status 1) seconds after
        they start, before reading any weight, and the kubelet starts them again after its
        CrashLoopBackOff delay: the GPU never fills, it holds only the other process's memory."""
        d = state.pod.deployment
        if state.engine is not None or state.scheduled is None or not _checks_memory(state):
            return
        while (when := state.container_started + CHECK_SECONDS) <= t and when < state.down_until:
            if not start_refused(d.gpu, self.timeline.knobs(state.pod.key, d.pod, when)):
                return
            load = state.down_until - state.container_started
            state.crashes += 1
            state.restarts += 1
            state.last_exit = Exit("Error", 1, when)
            state.container_started = when + min(BACKOFF[0] * 2.0 ** (state.crashes - 1), BACKOFF[1])
            state.down_until = state.container_started + load
            state.loading = (state.container_started, state.down_until)

    def _refused(self, state: PodState) -> bool:
        """A start that will fail the memory check: it loads nothing while it lasts."""
        return _checks_memory(state) and start_refused(state.pod.deployment.gpu, state.knobs)

    def _replace(self, state: PodState, when: float, replace: Replace) -> None:
        pod = state.pod
        state.generation += 1
        state.name = pod_name(pod.deployment.name, pod.replica, state.generation)
        state.uid = pod_uid(state.name)
        state.engine, state.ready_since, state.restarts, state.last_exit = None, None, 0, None
        state.created = when
        pending = seconds(replace.pending)
        state.scheduled = when + pending if pending < 7 * DAY else None
        start = when + pending + 3.0
        state.container_started = start
        state.down_until = start + seconds(replace.load)
        state.loading = (start, state.down_until) if state.scheduled is not None else None

    def _pod(self, state: PodState, arrivals: float, t: float, dt: float) -> None:
        d = state.pod.deployment
        pulled = 0.0
        if state.engine is not None and state.knobs.engine_hung:
            hang(state.engine, arrivals)
        elif state.engine is not None:
            step(state.engine, state.knobs, (d.model, d.gpu, state.cap), arrivals, dt)
            account(state.engine, state.knobs, state.bounds, dt)
            if d.kv_consumer:
                pulled = pd.pull(state.engine, state.knobs, d.model, d.gpu, dt)
        loading = state.engine is None and self._loading(state, t) and not self._refused(state)
        for gpu in state.gpus:
            gpu.reading = read(d.gpu, gpu.index, state.knobs, state.engine, state.noise + gpu.index * 7, t, loading)
            gpu.energy_mj += gpu.reading.power * dt * 1000.0
        served = state.engine.tick.served if state.engine else 0.0
        background = state.knobs.nic_background_gbps * 1e9 / 8.0
        state.nic_tx += dt * (background + served * 6000.0)
        state.nic_rx += dt * (background * 1.2 + served * 9000.0 + pulled)
        load = self._load_rate(state, t, dt)
        if state.knobs.weights_on_nfs:
            # Over the NIC in rsize (1 MiB) READ calls; the local disk only sees its background.
            state.nfs_reads += dt * load / float(1 << 20)
            state.nic_rx += dt * load
            load = 0.0
        disk = 2.0e6 + load
        state.disk_read += dt * disk
        # Busy in proportion to the disk's ceiling: a degraded drive saturates at a few 100 MB/s.
        state.disk_busy += dt * min(1.0, 0.004 + disk / (state.knobs.disk_read_gbps * 1e9))
        state.ib_tx += dt * state.knobs.ib_traffic_gbps * 1e9 / 8.0
        state.ib_rx += dt * state.knobs.ib_traffic_gbps * 1e9 / 8.0 * 0.9
        state.ib_errors += dt * state.knobs.ib_errors_per_s
        state.ib_link_downs += dt * state.knobs.ib_link_downs_per_h / 3600.0
        if state.engine is not None:
            state.cpu_seconds += dt * cpu_cores(state.knobs, state.engine)

    def _load_rate(self, state: PodState, t: float, dt: float) -> float:
        """Bytes/s the node reads while the pod's model loads (weights spread over the load time)."""
        if state.loading is None or (state.engine is None and self._refused(state)):
            return 0.0
        start, end = state.loading
        overlap = max(0.0, min(end, t) - max(start, t - dt))
        d = state.pod.deployment
        size = d.model.weights_gib * d.gpu.count * (1 << 30)
        return size / max(end - start, 1.0) * overlap / dt


def current_names(scenario: Scenario, at: float, anchor: float) -> dict[str, str]:
    """Each pod's name at `at`: replaced pods get a new one per replacement (pod key -> name)."""
    assert scenario.fleet is not None
    timeline = Timeline(scenario.faults, anchor)
    names: dict[str, str] = {}
    for pod in layout(scenario.fleet).pods:
        generations = sum(1 for _ in timeline.replacements(pod.key, -math.inf, at))
        names[pod.key] = pod_name(pod.deployment.name, pod.replica, generations)
    return names


def _checks_memory(state: PodState) -> bool:
    d = state.pod.deployment
    return d.engine == "vllm" and d.names == "v1"


def _capacity(pod: Pod, knobs: PodKnobs) -> Capacity:
    d = pod.deployment
    return capacity(knobs, d.model, d.gpu, d.engine, d.names)


def _bounds(pod: Pod, knobs: PodKnobs) -> Bounds:
    return SGLANG_BOUNDS if pod.deployment.engine == "sglang" else vllm_bounds(knobs.max_model_len)
