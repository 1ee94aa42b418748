"""Which exporter publishes a metric, and what to say when a tree needs a family none of whose metrics exist.

One note per family, never one per name: a fleet without SGLang is not missing SGLang's metrics when
vLLM's are there (a pod runs one engine; the trees join both with `or`).
"""

from __future__ import annotations

import re
from collections.abc import Collection, Mapping
from dataclasses import dataclass

from diagnosd.trees.model import Text


@dataclass(frozen=True)
class Family:
    name: str
    prefixes: tuple[str, ...]
    hint: Text
    # Families of which one is enough: another engine stands in for this one.
    alternatives: tuple[str, ...] = ()
    # Names every version of the exporter serves: one of them present means the exporter is scraped.
    probes: tuple[str, ...] = ()


FAMILIES: tuple[Family, ...] = (
    Family(
        "vLLM",
        ("vllm:", "vllm_"),
        Text(
            en="scrape each engine pod's /metrics (vLLM serves it on its API port)",
            zh="请抓取每个引擎 Pod 的 /metrics（vLLM 在其 API 端口上提供）",
        ),
        ("SGLang",),
        ("vllm:num_requests_running", "vllm_num_requests_running", "vllm:num_requests_waiting"),
    ),
    Family(
        "SGLang",
        ("sglang:", "sglang_"),
        Text(
            en="start SGLang with --enable-metrics and scrape its /metrics",
            zh="启动 SGLang 时加 --enable-metrics，并抓取其 /metrics",
        ),
        ("vLLM",),
        ("sglang:num_running_reqs", "sglang_num_running_reqs", "sglang:num_queue_reqs"),
    ),
    Family(
        "dcgm-exporter",
        ("DCGM_",),
        Text(
            en=(
                "deploy dcgm-exporter (NVIDIA GPU Operator) with its Kubernetes pod mapping "
                "so GPU series carry `namespace` and `pod`"
            ),
            zh="部署 dcgm-exporter（NVIDIA GPU Operator）并开启 Kubernetes Pod 映射，让 GPU 序列带 `namespace`、`pod`",
        ),
        probes=("DCGM_FI_DEV_GPU_TEMP", "DCGM_FI_DEV_GPU_TEMP_CELSIUS", "DCGM_FI_DEV_FB_USED"),
    ),
    # LiteLLM: Prometheus metrics were Enterprise-only from PR #5769 (2024-09-18) until PR #16689
    # (2025-11-15, "Prometheus - make OSS"); /metrics requires an API key by default in recent
    # proxies (require_auth_for_metrics_endpoint defaults to true; litellm-docs PR #504).
    Family(
        "LiteLLM",
        ("litellm_", "deployment_state"),
        Text(
            en=(
                "add `callbacks: [prometheus]` under litellm_settings and scrape the proxy's /metrics/ with an "
                "`Authorization: Bearer <master key>` header (recent proxies require a key there by default, "
                "require_auth_for_metrics_endpoint); releases from Sept 2024 to Nov 2025 export Prometheus "
                "metrics only in LiteLLM Enterprise"
            ),
            zh=(
                "在 litellm_settings 下加 `callbacks: [prometheus]`，并带 `Authorization: Bearer <主密钥>` 请求头"
                "抓取代理的 /metrics/（较新的代理默认要求该端点鉴权，见 require_auth_for_metrics_endpoint）；"
                "2024 年 9 月至 2025 年 11 月的版本只有 LiteLLM Enterprise 才导出 Prometheus 指标"
            ),
        ),
        probes=(
            "litellm_proxy_total_requests_metric_total",
            "litellm_deployment_state",
            "litellm_requests_metric_total",
        ),
    ),
    Family(
        "node_exporter",
        ("node_",),
        Text(
            en="run node_exporter on every GPU node (with the `infiniband` collector for IB ports)",
            zh="在每个 GPU 节点上运行 node_exporter（IB 端口需开启 `infiniband` 采集器）",
        ),
        probes=("node_uname_info", "node_boot_time_seconds"),
    ),
    Family(
        "kube-state-metrics",
        ("kube_",),
        Text(en="deploy kube-state-metrics and scrape it", zh="部署 kube-state-metrics 并抓取它"),
        probes=("kube_pod_info", "kube_node_info"),
    ),
    Family(
        "prometheus_client",
        ("process_",),
        Text(
            en="scrape the engine's own process metrics (prometheus_client; absent in multiprocess mode)",
            zh="抓取引擎自身的进程指标（prometheus_client；多进程模式下没有）",
        ),
        probes=("process_start_time_seconds",),
    ),
    Family(
        "diagnosd",
        ("diagnosd_",),
        Text(en="scrape diagnosd serve's /metrics", zh="抓取 diagnosd serve 的 /metrics"),
    ),
)
OTHER = Family("other", (), Text(en="check the exporter that publishes them", zh="请检查发布这些指标的导出程序"))


def family(name: str) -> Family:
    return next((f for f in FAMILIES if name.startswith(f.prefixes)), OTHER)


def probes(candidates: Mapping[str, Collection[str]], present: Collection[str]) -> set[str]:
    """Names to ask about before calling a family absent: its own probes and its alternatives'."""
    read = {family(name).name for name in candidates}
    found = {family(name).name for variants in candidates.values() for name in variants if name in present}
    wanted = {f.name for f in FAMILIES if f.name in read - found}
    wanted |= {alt for f in FAMILIES if f.name in wanted for alt in f.alternatives}
    return {p for f in FAMILIES if f.name in wanted for p in f.probes}


def absent_notes(
    candidates: Mapping[str, Collection[str]], present: Collection[str], lang: str = "en", seen: Collection[str] = ()
) -> list[str]:
    """One line per family of which no spelling of any name the tree reads exists on the Prometheus.

    `seen` holds the probes found: a family (or its alternative engine) that serves them is scraped,
    and the few names it lacks show on the checks that read them.
    """
    needed: dict[str, list[str]] = {}
    found: set[str] = set()
    for name, variants in candidates.items():
        kind = family(name).name
        needed.setdefault(kind, []).append(name)
        if any(v in present for v in variants):
            found.add(kind)
    found |= {family(name).name for name in seen}
    notes: list[str] = []
    for fam_name, names in needed.items():
        fam = next((f for f in FAMILIES if f.name == fam_name), OTHER)
        if fam_name in found or any(alt in found for alt in fam.alternatives):
            continue
        if fam is OTHER:
            notes.extend(_note(fam_name, [name], fam, lang) for name in sorted(names))
        else:
            notes.append(_note(fam_name, sorted(names), fam, lang))
    return notes


def _note(fam_name: str, names: list[str], fam: Family, lang: str) -> str:
    shown = ", ".join(names[:3]) + (", ..." if len(names) > 3 else "")
    return _say(fam, str(len(names)), shown, lang)


def _say(fam: Family, count: str, shown: str, lang: str) -> str:
    if lang == "zh":
        who = "该指标" if fam is OTHER else f" {fam.name} 指标"
        return f"Prometheus 上没有{who}（本树读取 {count} 个：{shown}），依赖它们的检查为未知；{fam.hint.zh}"
    who = "metric" if fam is OTHER else f"{fam.name} metrics"
    return f"no {who} on this Prometheus (this tree reads {count}: {shown}); {UNKNOWN_EN}{fam.hint.en}"


UNKNOWN_EN = "the checks that need them are unknown; "


NOTE = re.compile(r"^no (?:(.+) metrics|metric) on this Prometheus \(this tree reads (\d+): (.+)\); " + UNKNOWN_EN)


def translate(note: str) -> str:
    """The Chinese of an absent note (notes travel in English, as the JSON carries them)."""
    m = NOTE.match(note)
    if m is None:
        return note
    fam = next((f for f in FAMILIES if f.name == m.group(1)), OTHER)
    return _say(fam, m.group(2), m.group(3), "zh")
