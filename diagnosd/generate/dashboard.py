"""diagnosd's Grafana dashboard, built with grafana-foundation-sdk from the series diagnosd exports:
the triage board, the active root causes, findings over time, a finding's evidence, and diagnosd's
own health. Everything deployment-specific is a template variable (data source, namespace,
symptom, pod), so one file serves every install: docs/grafana/ and the chart's ConfigMap.

The SDK is a development dependency (the daemon never imports this module); regenerate with
`python -m diagnosd.generate.dashboard docs/grafana/diagnosd.json helm/diagnosd/files/dashboard.json`.
"""

from __future__ import annotations

import sys
from pathlib import Path

from grafana_foundation_sdk.builders import bargauge, stat, statetimeline, table, timeseries
from grafana_foundation_sdk.builders import dashboard as board
from grafana_foundation_sdk.builders.prometheus import Dataquery
from grafana_foundation_sdk.cog.builder import Builder
from grafana_foundation_sdk.cog.encoder import JSONEncoder
from grafana_foundation_sdk.models import common
from grafana_foundation_sdk.models import dashboard as model
from grafana_foundation_sdk.models.prometheus import PromQueryFormat

UID = "diagnosd"
DATASOURCE = model.DataSourceRef(type_val="prometheus", uid="${datasource}")
# The scope every finding panel takes; the board and the root causes read it as regexes ("All").
SCOPE = 'namespace=~"$namespace", symptom=~"$symptom"'
SEVERITY_COLORS = {"critical": "red", "warning": "orange", "info": "blue"}
CIRCUIT = {"0": ("closed", "green"), "1": ("half-open", "orange"), "2": ("open", "red")}


def query(expr: str, legend: str = "", *, instant: bool = False, ref: str = "A") -> Dataquery:
    q = Dataquery().expr(expr).datasource(DATASOURCE).legend_format(legend or "__auto").ref_id(ref)
    return q.instant().format(PromQueryFormat.TABLE) if instant else q.range()


def rate(metric: str, by: str) -> str:
    return f"sum by ({by}) (rate({metric}[$__rate_interval]))"


def mapping(values: dict[str, tuple[str, str]]) -> model.ValueMap:
    return model.ValueMap(
        options={value: model.ValueMappingResult(text=text, color=color) for value, (text, color) in values.items()}
    )


def transform(kind: str, options: dict[str, object]) -> model.DataTransformerConfig:
    return model.DataTransformerConfig(id_val=kind, options=options)


Panels = list[Builder[model.Panel]]


def variables() -> list[Builder[model.VariableModel]]:
    def labels(name: str, source: str, *, everything: bool) -> board.QueryVariable:
        variable = (
            board.QueryVariable(name)
            .datasource(DATASOURCE)
            .query({"query": f"label_values({source}, {name})", "refId": name})
            .refresh(model.VariableRefresh.ON_TIME_RANGE_CHANGED)
            .sort(model.VariableSort.ALPHABETICAL_ASC)
        )
        return variable.multi(True).include_all(True).all_value(".*") if everything else variable

    return [
        board.DatasourceVariable("datasource").label("Prometheus").type("prometheus"),
        labels("namespace", "diagnosd_check_value", everything=True),
        # Every loaded tree, diagnosed yet or not (diagnosd exports its per-tree series from the start).
        labels("symptom", "diagnosd_tree_last_success_timestamp_seconds", everything=True),
        # A pod with a firing finding in scope: whose evidence the Evidence row shows.
        labels("pod", f"diagnosd_root_cause{{{SCOPE}}}", everything=False),
    ]


def triage_board() -> table.Panel:
    # One cell per (target, symptom): rows "namespace/pod", a column per symptom.
    active = f"max by (symptom, namespace, pod) (diagnosd_symptom_active{{{SCOPE}}})"
    present = f'label_join({active}, "target", "/", "namespace", "pod")'
    return (
        table.Panel()
        .title("Triage board: symptoms present, by target")
        .description("A cell is 'present' where the last diagnosis of that tree saw the symptom on the target.")
        .with_target(query(present, instant=True))
        .with_transformation(
            transform("groupingToMatrix", {"columnField": "symptom", "rowField": "target", "valueField": "Value"})
        )
        .mappings([mapping({"1": ("present", "red")})])
        .cell_options(common.TableColoredBackgroundCellOptions())
        .height(8)
        .span(24)
    )


def root_causes() -> table.Panel:
    hidden = {name: True for name in ("Time", "Value", "__name__", "job", "instance", "container", "endpoint")}
    order = {name: index for index, name in enumerate(("severity", "symptom", "cause", "namespace", "pod"))}
    return (
        table.Panel()
        .title("Active root causes")
        .with_target(query(f"diagnosd_root_cause{{{SCOPE}}}", instant=True))
        .with_transformation(transform("organize", {"excludeByName": hidden, "indexByName": order}))
        .override_by_name(
            "severity",
            [
                model.DynamicConfigValue("mappings", [mapping({k: (k, c) for k, c in SEVERITY_COLORS.items()})]),
                model.DynamicConfigValue("custom.cellOptions", {"type": "color-background"}),
            ],
        )
        .height(8)
        .span(12)
    )


def findings_timeline() -> statetimeline.Panel:
    firing = f"max by (symptom, cause, namespace, pod) (diagnosd_root_cause{{{SCOPE}}})"
    return (
        statetimeline.Panel()
        .title("Findings over time")
        .with_target(query(firing, "{{symptom}} · {{cause}} · {{namespace}}/{{pod}}"))
        .mappings([mapping({"1": ("firing", "red")})])
        .height(8)
        .span(12)
    )


def evidence() -> Panels:
    checks = 'diagnosd_check_value{namespace=~"$namespace", symptom=~"$symptom", pod="$pod"}'
    now = (
        table.Panel()
        .title("Evidence on $pod: what each check saw")
        .with_target(query(checks, instant=True))
        .with_transformation(transform("organize", {"excludeByName": {"Time": True, "__name__": True}}))
        .height(8)
        .span(10)
    )
    over_time = (
        timeseries.Panel()
        .title("Evidence on $pod over time")
        .with_target(query(checks, "{{symptom}} · {{check}}"))
        .height(8)
        .span(14)
    )
    return [now, over_time]


def health() -> Panels:
    steps = [model.Threshold(color="green"), model.Threshold(120, "orange"), model.Threshold(300, "red")]
    limits = board.ThresholdsConfig().mode(model.ThresholdsMode.ABSOLUTE).steps(steps)
    p95 = f"histogram_quantile(0.95, {rate('diagnosd_prometheus_query_duration_seconds_bucket', 'le, endpoint')})"
    return [
        stat.Panel()
        .title("Since the last successful round")
        .with_target(query("time() - max(diagnosd_last_successful_round_timestamp_seconds)"))
        .unit("s")
        .thresholds(limits)
        .height(6)
        .span(4),
        timeseries.Panel()
        .title("Rounds by outcome")
        .with_target(query(rate("diagnosd_rounds_total", "outcome"), "{{outcome}}"))
        .unit("ops")
        .height(6)
        .span(10),
        bargauge.Panel()
        .title("Since each tree last completed")
        .with_target(query("time() - diagnosd_tree_last_success_timestamp_seconds", "{{symptom}}", instant=True))
        .unit("s")
        .thresholds(limits)
        .height(6)
        .span(10),
        timeseries.Panel()
        .title("Tree errors by reason")
        .with_target(
            query(
                rate("diagnosd_tree_errors_total", "symptom, reason"),
                "{{symptom}} {{reason}}",
            )
        )
        .unit("ops")
        .height(6)
        .span(8),
        timeseries.Panel()
        .title("Alert queue")
        .with_target(query("max(diagnosd_alert_queue_length)", "waiting"))
        .with_target(query("max(diagnosd_alert_queue_capacity)", "capacity", ref="B"))
        .height(6)
        .span(8),
        statetimeline.Panel()
        .title("Prometheus circuit")
        .with_target(query("max by (instance) (diagnosd_prometheus_circuit_state)", "{{instance}}"))
        .mappings([mapping(CIRCUIT)])
        .height(6)
        .span(8),
        timeseries.Panel()
        .title("Prometheus query latency (p95)")
        .with_target(query(p95, "{{endpoint}}"))
        .unit("s")
        .height(6)
        .span(12),
        timeseries.Panel()
        .title("Prometheus query errors")
        .with_target(
            query(
                rate("diagnosd_prometheus_query_errors_total", "endpoint, error"),
                "{{endpoint}} {{error}}",
            )
        )
        .unit("ops")
        .height(6)
        .span(12),
    ]


def build() -> board.Dashboard:
    dash = (
        board.Dashboard("diagnosd")
        .uid(UID)
        .description("Root causes diagnosd found, their evidence, and diagnosd's own health")
        .tags(["diagnosd", "llm-serving"])
        .refresh("1m")
        .time("now-6h", "now")
        .timezone("browser")
        .variables(variables())
    )
    dash = dash.with_row(board.Row("Triage")).with_panel(triage_board())
    dash = dash.with_panel(root_causes()).with_panel(findings_timeline())
    dash = dash.with_row(board.Row("Evidence of a finding (choose symptom and pod)"))
    for panel in evidence():
        dash = dash.with_panel(panel)
    dash = dash.with_row(board.Row("diagnosd"))
    for panel in health():
        dash = dash.with_panel(panel)
    return dash


def render() -> str:
    """The dashboard JSON, stable from run to run (sorted keys), as Grafana imports it."""
    built = build().build()
    for number, panel in enumerate(built.panels or [], start=1):
        panel.id_val = number  # stable ids: links to a panel (viewPanel=) survive a regeneration
    return JSONEncoder(sort_keys=True, indent=2).encode(built) + "\n"


def main(paths: list[str]) -> int:
    text = render()
    for path in paths:
        Path(path).write_text(text, encoding="utf-8")
    if not paths:
        sys.stdout.write(text)
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
