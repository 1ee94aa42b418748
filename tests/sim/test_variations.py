"""Each cluster variation on its own, on hand-made series and on a short simulated fleet (no Prometheus)."""

from __future__ import annotations

import itertools
from array import array

import pytest

from diagnosd.sim import history
from diagnosd.sim.fleet import layout
from diagnosd.sim.history import Series
from diagnosd.sim.variations import (
    Cluster,
    DcgmLabels,
    Dips,
    KsmLabels,
    Missing,
    Mix,
    NodeExporterLabels,
    Noise,
    Scrape,
    Spelling,
    draw,
    relabel,
)
from tests.sim.conftest import short

CLUSTER = Cluster({"gpu-node-1": "10.0.1.11"})
MINUTES = [600.0 + 60.0 * i for i in range(6)]


def pts(values: list[float], times: list[float] | None = None) -> tuple[array[float], array[float]]:
    return array("d", times or MINUTES[: len(values)]), array("d", values)


def one(series: Series, name: str) -> dict[str, str]:
    [labels] = [dict(labels) for n, labels in series if n == name]
    return labels


DCGM = (
    ("gpu", "0"),
    ("Hostname", "gpu-node-1"),
    ("container", "vllm"),
    ("namespace", "prod"),
    ("pod", "vllm-0"),
    ("instance", "10.0.1.11:9400"),
    ("job", "dcgm-exporter"),
)
NODE = (("device", "eth0"), ("instance", "gpu-node-1:9100"), ("job", "node-exporter"))
KSM = (("instance", "10.0.3.4:8080"), ("job", "kube-state-metrics"))
SAMPLE: Series = {
    ("DCGM_FI_DEV_GPU_UTIL", DCGM): pts([90, 91, 92]),
    ("node_network_receive_bytes_total", NODE): pts([1, 2, 3]),
    ("kube_pod_info", (("namespace", "prod"), ("node", "gpu-node-1"), ("pod", "vllm-0"), *KSM)): pts([1, 1, 1]),
    ("kube_node_info", (("internal_ip", "10.0.1.11"), ("node", "gpu-node-1"), *KSM)): pts([1, 1, 1]),
    ("vllm:kv_cache_usage_perc", (("namespace", "prod"), ("pod", "vllm-0"))): pts([0.5, 0.6, 0.7]),
    ("vllm:prefix_cache_hits_total", (("namespace", "prod"), ("pod", "vllm-0"))): pts([10, 20, 30]),
}


@pytest.mark.parametrize("exporter", ["dcgm", "node", "ksm"])
def test_a_missing_exporter_takes_all_its_series_and_nothing_else(exporter: str) -> None:
    out = Missing(exporter).apply(SAMPLE, CLUSTER)  # type: ignore[arg-type]
    prefix = {"dcgm": "DCGM_", "node": "node_", "ksm": "kube_"}[exporter]
    assert {n for n, _ in out} == {n for n, _ in SAMPLE if not n.startswith(prefix)}


def test_node_exporter_instance_as_ip_port_maps_the_node_to_its_ip() -> None:
    out = NodeExporterLabels("ip_port").apply(SAMPLE, CLUSTER)
    assert one(out, "node_network_receive_bytes_total")["instance"] == "10.0.1.11:9100"
    assert one(out, "DCGM_FI_DEV_GPU_UTIL") == dict(DCGM)  # other exporters untouched
    assert NodeExporterLabels("node_port").apply(SAMPLE, CLUSTER) is SAMPLE


def test_node_exporter_behind_kube_prometheus_stack_names_the_node_and_the_exporter_pod() -> None:
    labels = one(NodeExporterLabels("kube_prometheus_stack").apply(SAMPLE, CLUSTER), "node_network_receive_bytes_total")
    assert labels["instance"] == "gpu-node-1"
    assert labels["namespace"] == "monitoring"
    assert labels["pod"].startswith("kube-prometheus-stack-prometheus-node-exporter-")
    assert len(labels["pod"].rsplit("-", 1)[1]) == 5
    assert {labels["service"], labels["endpoint"], labels["device"]} == {
        "kube-prometheus-stack-prometheus-node-exporter",
        "http-metrics",
        "eth0",
    }


def test_ksm_with_honor_labels_keeps_the_objects_labels_and_fills_the_rest_with_its_own() -> None:
    out = KsmLabels("kube_prometheus_stack").apply(SAMPLE, CLUSTER)
    pod = one(out, "kube_pod_info")
    assert (pod["namespace"], pod["pod"]) == ("prod", "vllm-0")
    assert "exported_pod" not in pod
    node = one(out, "kube_node_info")
    assert node["namespace"] == "monitoring"
    assert node["pod"].startswith("kube-prometheus-stack-kube-state-metrics-")
    assert KsmLabels("plain").apply(SAMPLE, CLUSTER) is SAMPLE


def test_ksm_without_honor_labels_moves_the_objects_labels_to_exported() -> None:
    pod = one(KsmLabels("honor_off").apply(SAMPLE, CLUSTER), "kube_pod_info")
    assert (pod["exported_namespace"], pod["exported_pod"]) == ("prod", "vllm-0")
    assert pod["namespace"] == "monitoring"
    assert pod["node"] == "gpu-node-1"


def test_dcgm_without_honor_labels_carries_the_exporter_pod_and_the_gpu_user_as_exported() -> None:
    labels = one(DcgmLabels(honor=False).apply(SAMPLE, CLUSTER), "DCGM_FI_DEV_GPU_UTIL")
    assert (labels["exported_namespace"], labels["exported_pod"], labels["exported_container"]) == (
        "prod",
        "vllm-0",
        "vllm",
    )
    assert labels["namespace"] == "gpu-operator"
    assert labels["pod"].startswith("nvidia-dcgm-exporter-")
    kept = one(DcgmLabels(honor=True).apply(SAMPLE, CLUSTER), "DCGM_FI_DEV_GPU_UTIL")
    assert (kept["namespace"], kept["pod"], kept["service"]) == ("prod", "vllm-0", "nvidia-dcgm-exporter")
    assert "exported_pod" not in kept


def test_underscore_spelling_rewrites_engine_colons_only() -> None:
    out = Spelling("underscore").apply(SAMPLE, CLUSTER)
    names = {n for n, _ in out}
    assert {"vllm_kv_cache_usage_perc", "vllm_prefix_cache_hits_total", "DCGM_FI_DEV_GPU_UTIL"} <= names
    assert not any(":" in n for n in names)


def test_old_and_new_vllm_names_side_by_side_carry_the_same_values() -> None:
    out = Spelling("old_and_new").apply(SAMPLE, CLUSTER)
    labels = (("namespace", "prod"), ("pod", "vllm-0"))
    assert list(out[("vllm:gpu_cache_usage_perc", labels)][1]) == [0.5, 0.6, 0.7]
    assert list(out[("vllm:gpu_prefix_cache_hits_total", labels)][1]) == [10, 20, 30]
    assert ("vllm:kv_cache_usage_perc", labels) in out
    # Underscored names get underscored twins; an engine that already has the old name keeps it alone.
    under = Spelling("old_and_new").apply(Spelling("underscore").apply(SAMPLE, CLUSTER), CLUSTER)
    assert ("vllm_gpu_cache_usage_perc", labels) in under
    v0 = {("vllm:gpu_cache_usage_perc", labels): pts([0.1])}
    assert Spelling("old_and_new").apply(v0, CLUSTER) == v0


def test_a_faster_scrape_fills_each_minute_and_never_ramps_a_counter_down() -> None:
    counter = {("vllm:prefix_cache_hits_total", ()): pts([0, 60, 120, 5], MINUTES[:4])}
    times, values = Scrape(15.0).apply(counter, CLUSTER)[("vllm:prefix_cache_hits_total", ())]
    assert list(times) == [600.0 + 15.0 * i for i in range(13)]
    assert list(values[:5]) == [0, 15, 30, 45, 60]
    assert list(values[8:]) == [120, 120, 120, 120, 5]  # the restart happens at once, at its sample


def test_a_scrape_phase_moves_every_sample_and_gaps_stay_gaps() -> None:
    hourly = {("g", ()): pts([1, 2, 3], [0.0, 3600.0, 3660.0])}
    times, values = Scrape(30.0, phase=7.0).apply(hourly, CLUSTER)[("g", ())]
    assert list(times) == [-7.0, 3593.0, 3623.0, 3653.0]
    assert list(values) == [1, 2, 2.5, 3]
    assert Scrape(60.0).apply(hourly, CLUSTER) == hourly


def test_noise_moves_fractional_gauges_within_bounds_and_leaves_counts_exact() -> None:
    out = Noise(0.05, seed=3).apply(SAMPLE, CLUSTER)
    key = ("vllm:kv_cache_usage_perc", (("namespace", "prod"), ("pod", "vllm-0")))
    noisy = list(out[key][1])
    assert noisy != [0.5, 0.6, 0.7]
    assert all(0.95 * v <= n <= 1.05 * v for n, v in zip(noisy, [0.5, 0.6, 0.7], strict=True))
    for name, labels in SAMPLE:
        if name != key[0]:
            assert out[(name, labels)] == SAMPLE[(name, labels)]
    assert Noise(0.05, seed=3).apply(SAMPLE, CLUSTER) == out  # the same run draws the same noise


def test_dips_drop_single_samples_of_engine_gauges_only() -> None:
    many = [600.0 + 60.0 * i for i in range(600)]
    series: Series = {
        ("DCGM_FI_DEV_GPU_UTIL", DCGM): pts([90.0] * 600, many),
        ("vllm:prefix_cache_hits_total", ()): pts([float(i) for i in range(600)], many),
        ("kube_pod_info", KSM): pts([1.0] * 600, many),
    }
    out = Dips(6.0, seed=1).apply(series, CLUSTER)
    dipped = list(out[("DCGM_FI_DEV_GPU_UTIL", DCGM)][1])
    low = [i for i, v in enumerate(dipped) if v < 90.0]
    assert 20 < len(low) < 120  # about 6 an hour over 10 hours
    assert all(dipped[i] <= 45.0 for i in low)  # to at most half its value
    assert all(v == 90.0 for i, v in enumerate(dipped) if i not in low)  # each dip is its one sample
    assert out[("vllm:prefix_cache_hits_total", ())] == series[("vllm:prefix_cache_hits_total", ())]
    assert out[("kube_pod_info", KSM)] == series[("kube_pod_info", KSM)]


def test_a_draw_is_reproducible_per_seed_scenario_and_index() -> None:
    assert draw(7, "queueing", 0) == draw(7, "queueing", 0)
    drawn = {draw(7, "queueing", k).name for k in range(8)}
    assert len(drawn) > 4
    assert draw(7, "queueing", 0, missing=None).missing is None
    assert draw(7, "queueing", 0, missing="ksm").missing == "ksm"
    assert {draw(s, "x", 0).missing for s in range(40)} == {None, "dcgm", "node", "ksm"}


def test_a_mix_applies_in_its_fixed_order_and_names_every_part() -> None:
    mix = Mix((Spelling("underscore"), Missing("dcgm"), Scrape(30.0)))
    assert mix.name == "names=underscore no-dcgm scrape=30s"
    assert mix.missing == "dcgm"
    out = mix.apply(SAMPLE, CLUSTER)
    assert not any(n.startswith("DCGM_") for n, _ in out)
    assert len(out[("vllm_kv_cache_usage_perc", (("namespace", "prod"), ("pod", "vllm-0")))][0]) == 5


def test_relabel_sets_the_isolation_label_on_every_series() -> None:
    out = relabel(SAMPLE, "diagnosd_scenario", "queueing.v1")
    assert all(dict(labels)["diagnosd_scenario"] == "queueing.v1" for _, labels in out)
    assert len(out) == len(SAMPLE)


@pytest.fixture(scope="module")
def fleet() -> tuple[Series, Cluster]:
    sim = short("healthy", history=1800.0, run=False)
    assert sim.scenario.fleet is not None
    cluster = Cluster({p.node: p.node_ip for p in layout(sim.scenario.fleet).pods})
    return history.collect(sim, names=None), cluster


def test_every_mix_keeps_a_simulated_fleet_well_formed(fleet: tuple[Series, Cluster]) -> None:
    """Sorted timestamps, one value each, finite where they were, for any drawn mix."""
    series, cluster = fleet
    for k in range(6):
        mix = draw(0, "healthy", k)
        out = mix.apply(series, cluster)
        assert out, mix.name
        for key, (times, values) in out.items():
            assert len(times) == len(values), (mix.name, key)
            assert all(a < b for a, b in itertools.pairwise(times)), (mix.name, key)


def test_kube_prometheus_stack_node_labels_name_every_node_of_the_fleet(fleet: tuple[Series, Cluster]) -> None:
    series, cluster = fleet
    out = NodeExporterLabels("kube_prometheus_stack").apply(series, cluster)
    instances = {dict(labels)["instance"] for name, labels in out if name.startswith("node_")}
    assert instances == set(cluster.node_ips)
    ips = NodeExporterLabels("ip_port").apply(series, cluster)
    assert {dict(labels)["instance"] for name, labels in ips if name.startswith("node_")} == {
        f"{ip}:9100" for ip in cluster.node_ips.values()
    }


def test_dips_are_sized_per_scrape_where_history_far_back_is_sparse() -> None:
    # A week-long series as the drills store it: a sample an hour far back, then 15 s scrapes.
    sparse = [3600.0 * i for i in range(166)]
    dense = [sparse[-1] + 3600.0 + 15.0 * i for i in range(100)]
    times = sparse + dense
    series: Series = {("DCGM_FI_DEV_SM_CLOCK", DCGM): pts([1980.0] * len(times), times)}
    out = Dips(1.0, seed=2).apply(series, CLUSTER)
    low = [t for t, v in zip(times, out[("DCGM_FI_DEV_SM_CLOCK", DCGM)][1], strict=True) if v < 1980.0]
    # About one an hour of scrapes: 266 samples at 15 s apiece make a few at most, not half of them.
    assert len(low) <= 5
