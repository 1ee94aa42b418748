"""The knobs of the simulated fleet: every number a scenario sets and a fault may change.

Knobs are flat so that a fault names one with a plain key (`set: {prefix_caching: false}`).
Structural facts that decide which series exist (engine, GPU count, model) live on the
deployment and never change during a run.
"""

from __future__ import annotations

from typing import Annotated, Literal

from pydantic import Field

from diagnosd.trees.model import Strict

Share = Annotated[float, Field(ge=0.0, le=1.0)]
Positive = Annotated[float, Field(gt=0.0)]
NonNegative = Annotated[float, Field(ge=0.0)]


class PodKnobs(Strict):
    """One engine pod: its traffic, its requests, its engine flags, its GPUs and its node."""

    # Traffic: a gateway group's requests are split over its pods by weight; direct traffic
    # reaches the engine around the gateway.
    routing_weight: NonNegative = 1.0
    direct_rps: NonNegative = 0.0
    # Requests (log-normal lengths; `*_spread` is the log-normal sigma).
    prompt_tokens: Positive = 1800.0
    prompt_spread: Positive = 0.6
    long_prompt_share: Share = 0.0
    long_prompt_tokens: Positive = 120000.0
    output_tokens: Positive = 320.0
    output_spread: Positive = 0.7
    max_tokens: Positive = 2048.0
    prefix_reuse: Share = 0.6
    abort_share: Share = 0.003
    error_share: Share = 0.0
    # How long a queued client waits before giving up (an abort).
    client_patience: Positive = 300.0
    # The engine loop stopped stepping (a kernel or collective that never returns): the API server
    # stays up, answers /health and keeps exporting the gauges of its last step; no token comes
    # out, no request finishes, the gateway's calls time out.
    engine_hung: bool = False
    # Engine flags (vLLM names; SGLang equivalents in parentheses in docs/fire-drills.md).
    prefix_caching: bool = True
    # Unset: the engine's own choice at start, from its GPU (diagnosd/sim/defaults.py).
    max_num_seqs: Annotated[int, Field(ge=1)] | None = None
    max_num_batched_tokens: Annotated[int, Field(ge=16)] = 8192
    max_model_len: Annotated[int, Field(ge=256)] = 131072
    gpu_memory_utilization: Annotated[float, Field(gt=0.0, le=1.0)] = 0.9
    kv_cache_dtype: str = "auto"
    block_size: Annotated[int, Field(ge=1)] = 16
    enforce_eager: bool = False
    lora_adapters: str = ""
    lora_traffic_share: Share = 0.0
    # Performance of the model on its GPUs at full clock.
    prefill_tokens_per_s: Positive = 22000.0
    step_overhead_ms: NonNegative = 0.6
    host_ms: NonNegative = 1.5
    tokenizer_us_per_token: NonNegative = 12.0
    # GPUs the pod's manifest requests when it differs from the deployment's tensor-parallel group
    # (a manifest edited for a bigger TP size than any node has).
    gpu_request: Annotated[int, Field(ge=1)] | None = None
    # Seconds the kubelet spends pulling the image of a new pod before its container starts: the
    # first part of a replacement's `load` (a restart reuses the pulled image).
    image_pull_s: NonNegative = 0.0
    # GPUs of the pod's node that no pod is allocated (a dev box's, or a node bigger than its
    # pods): dcgm-exporter reports them, idle, without pod labels.
    node_spare_gpus: Annotated[int, Field(ge=0, le=7)] = 0
    # GPU state.
    clock_factor: Annotated[float, Field(gt=0.0, le=1.0)] = 1.0
    gpu_contention: Annotated[float, Field(ge=0.0, lt=1.0)] = 0.0
    fb_skew: Share = 0.0
    # Framebuffer the engine holds beyond its --gpu-memory-utilization budget (LoRA adapters...).
    extra_fb_mib: NonNegative = 0.0
    # Framebuffer another process holds on each of the pod's GPUs (a sidecar sharing the GPU, a
    # process left over from an earlier container): dcgm-exporter counts it whether the engine
    # runs or not, and vLLM V1 refuses to start when it leaves less free than its budget.
    other_fb_mib: NonNegative = 0.0
    # Expert parallelism (MoE): mean / max tokens per GPU of each forward pass (1 = balanced).
    expert_balancedness: Annotated[float, Field(gt=0.0, le=1.0)] = 0.9
    # Share of tensor-parallel traffic that goes over NVLink (0: peer-to-peer over PCIe / host).
    nvlink_share: Share = 1.0
    # The pod's node: Ethernet, InfiniBand (node_exporter state ids: 4 active, 5 link up), disks.
    nic_gbps: Positive = 100.0
    nic_background_gbps: NonNegative = 2.0
    ib_gbps: Positive = 400.0
    ib_traffic_gbps: NonNegative = 1.0
    ib_state_id: Annotated[int, Field(ge=0, le=5)] = 4
    ib_physical_state_id: Annotated[int, Field(ge=0, le=7)] = 5
    # Physical-layer errors (symbol, receive, link-integrity) and the link retrains that recover
    # from them (LinkErrorRecoveryCounter), per second.
    ib_errors_per_s: NonNegative = 0.0
    # Times per hour the retraining fails and the link goes down (LinkDownedCounter): a port that
    # flaps. The IB spec counts these apart from the recoveries: a marginal cable can count
    # thousands of symbol errors and retrain again and again without ever downing its link.
    ib_link_downs_per_h: NonNegative = 0.0
    # HCAs of the node with no cable (Down / Polling since boot), besides the used mlx5_0.
    ib_spare_ports: Annotated[int, Field(ge=0, le=7)] = 0
    # The node's local NVMe: its read ceiling (GB/s; a degraded PCIe link or a failing drive lowers
    # it). Weights on an NFS/EFS mount are read through the node's NFS client over the NIC instead.
    disk_read_gbps: Positive = 3.5
    weights_on_nfs: bool = False
    # Load-balancer failures the gateway sees on this backend (share of its calls, and the status).
    gateway_failure_share: Share = 0.0
    gateway_failure_status: str = "500"


class ModelSpec(Strict):
    """What the served model costs on one GPU of its tensor-parallel group."""

    weights_gib: Positive = 15.0
    kv_bytes_per_token: Positive = 131072.0
    activation_gib: NonNegative = 3.0
    # Decode compute per running sequence and step (ms): what grows a big batch's step.
    decode_ms_per_seq: NonNegative = 0.05


class GpuSpec(Strict):
    model: str = "NVIDIA H100 80GB HBM3"
    count: Annotated[int, Field(ge=1, le=8)] = 1
    fb_total_mib: Positive = 81559.0
    fb_reserved_mib: NonNegative = 510.0
    max_sm_clock_mhz: Positive = 1980.0
    mem_clock_mhz: Positive = 2619.0
    bandwidth_gbs: Positive = 3350.0
    power_limit_w: Positive = 700.0
    idle_power_w: Positive = 75.0
    driver: str = "570.133.20"


class DeploymentKnobs(Strict):
    """A Kubernetes Deployment's autoscaler (kube-state-metrics HPA series)."""

    hpa_min: Annotated[int, Field(ge=0)] = 1
    hpa_max: Annotated[int, Field(ge=1)] = 8
    # Desired minus current replicas (the autoscaler wants more than it has).
    hpa_pending: Annotated[int, Field(ge=0)] = 0
    # The Deployment's spec.replicas when it differs from its pod count (0: scaled to zero).
    spec_replicas: Annotated[int, Field(ge=0)] | None = None


class GroupKnobs(Strict):
    """A LiteLLM model group (the alias clients ask for)."""

    rps: NonNegative = 10.0
    timeout: Positive = 600.0
    num_retries: Annotated[int, Field(ge=0)] = 2
    allowed_fails: Annotated[int, Field(ge=0)] = 3
    cooldown_time: Positive = 5.0
    usd_per_m_input: NonNegative = 0.2
    usd_per_m_output: NonNegative = 0.6
    streaming_share: Share = 0.8
    # False while no LiteLLM proxy with the prometheus callback serves the group (before a fresh
    # proxy started): its series do not exist then and count from 0 from the start, as a fresh
    # proxy's do. Its traffic flows all the same (through the router that came before).
    exported: bool = True


class KeyKnobs(Strict):
    """A virtual key (tenant) of the gateway."""

    share: NonNegative = 1.0
    # A burst multiplies this key's own traffic (the others keep theirs).
    rate_multiplier: NonNegative = 1.0
    # Share of the key's requests the gateway rejects (400); each rejected request is sent again,
    # so a key with failure_share f makes 1/(1-f) times the calls it means to.
    failure_share: Annotated[float, Field(ge=0.0, lt=1.0)] = 0.0
    # Key-wide limits: no LiteLLM metric exports them.
    rpm_limit: Positive | None = 6000.0
    tpm_limit: Positive | None = 20_000_000.0
    # Model-specific limits (the key's metadata model_rpm_limit / model_tpm_limit), the only ones
    # litellm_remaining_api_key_*_for_model show; sys.maxsize without one.
    model_rpm_limit: Positive | None = None
    model_tpm_limit: Positive | None = None


EngineKind = Literal["vllm", "sglang"]
Names = Literal["v1", "v0"]
