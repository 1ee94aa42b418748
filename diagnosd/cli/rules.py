"""`diagnosd rules validate | test | coverage | alerts | catalog`: the rules as a product."""

from __future__ import annotations

import argparse
import asyncio
import json
import os
from dataclasses import asdict
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

from diagnosd.cli.exits import EXIT_OK, EXIT_RULES
from diagnosd.cli.options import config, prometheus_options, prometheus_url, rules_dir
from diagnosd.daemon import compose
from diagnosd.daemon.settings.loader import load_settings
from diagnosd.engine import coverage as engine_coverage
from diagnosd.errors import UsageError
from diagnosd.generate import alertrules, catalogdoc


def register(commands: Any) -> None:
    rules = commands.add_parser("rules", help="validate, test or check coverage of rules")
    rules_commands = rules.add_subparsers(dest="rules_command", required=True)
    validate = rules_commands.add_parser("validate", help="load every tree, report every problem")
    rules_dir(validate)
    test = rules_commands.add_parser("test", help="run the series tests beside the trees on a real Prometheus")
    rules_dir(test)
    test.add_argument(
        "--only", action="append", default=[], metavar="SYMPTOM", help="test these trees only (repeatable)"
    )
    test.add_argument("--prometheus-binary", default="prometheus", metavar="PATH", help="the Prometheus to run")
    test.add_argument("--promtool-binary", default="promtool", metavar="PATH", help="the promtool to run")
    test.add_argument(
        "--backend",
        choices=("prometheus", "victoriametrics"),
        default="prometheus",
        help="the store the series are loaded into and queried from (default: prometheus)",
    )
    test.add_argument(
        "--victoria-metrics-binary",
        default="victoria-metrics",
        metavar="PATH",
        help="the single-node VictoriaMetrics to run with --backend victoriametrics",
    )
    coverage = rules_commands.add_parser("coverage", help="which checks can run on this Prometheus, what is missing")
    rules_dir(coverage)
    prometheus_url(coverage)
    coverage.add_argument(
        "--lookback", type=float, default=24.0, metavar="HOURS", help="how far back to look for series"
    )
    coverage.add_argument("--format", choices=("text", "json"), default="text", help="output format")
    prometheus_options(coverage)
    alerts = rules_commands.add_parser("alerts", help="Prometheus alerting rules from the trees' detect conditions")
    rules_dir(alerts)
    alerts.add_argument("--out", type=Path, metavar="FILE", help="file to write (default: standard output)")
    alerts.add_argument(
        "--for", dest="hold", default="5m", metavar="DURATION", help="how long a condition holds before it fires"
    )
    alerts.add_argument(
        "--config",
        type=Path,
        metavar="FILE",
        help="the daemon's settings file (with DIAGNOSD_* variables, as serve reads them): its params apply",
    )
    alerts.add_argument(
        "--param",
        action="append",
        default=[],
        metavar="SYMPTOM.NAME=VALUE",
        help="a tree param override, over those of --config (repeatable), e.g. queue_backlog.waiting=20",
    )
    catalog = rules_commands.add_parser("catalog", help="write docs/catalog.md from the rules")
    rules_dir(catalog)
    catalog.add_argument("--out", type=Path, metavar="FILE", help="file to write (default: standard output)")
    rules.set_defaults(handler=rules_command)


def rules_command(args: argparse.Namespace) -> int:
    directory = args.dir or args.rules or compose.default_rules_dir()
    if args.rules_command == "validate":
        rules = compose.load(directory)
        count = len(rules.ruleset.trees)
        print(f"{directory}: {count} trees valid")
        return EXIT_OK
    if args.rules_command in ("catalog", "alerts"):
        if args.rules_command == "catalog":
            text = catalogdoc.render(compose.load(directory).ruleset)
        else:
            text = alerts(args, directory)
        if args.out:
            args.out.write_text(text, encoding="utf-8")
        else:
            print(text, end="")
        return EXIT_OK
    if args.rules_command == "coverage":
        return asyncio.run(coverage(compose.load(directory), args))
    from diagnosd.rulestest.runner import run_tests

    return EXIT_OK if run_tests(directory, args) else EXIT_RULES


def alerts(args: argparse.Namespace, directory: Path) -> str:
    """The rule file with the thresholds the daemon judges by: the settings' params, then --param."""
    params: dict[str, dict[str, float | str]] = {}
    if args.config is None:
        rules = compose.load(directory)
    else:
        explicit = args.dir or args.rules
        settings = load_settings(args.config, os.environ, {("rules_dir",): str(explicit)} if explicit else {})
        rules = compose.build(settings).rules  # its params checked against the trees, as serve does
        params = {symptom: dict(by) for symptom, by in settings.params.items()}
    for item in args.param:
        symptom, name, value = _param(item)
        params.setdefault(symptom, {})[name] = value
    return alertrules.rule_file(list(rules.ruleset.trees.values()), rules.ruleset.aliases, args.hold, params)


def _param(item: str) -> tuple[str, str, str]:
    key, sep, value = item.partition("=")
    symptom, dot, name = key.partition(".")
    if not (sep and dot and symptom and name and value):
        raise UsageError("--param", f"{item!r} is not SYMPTOM.NAME=VALUE")
    return symptom, name, value


async def coverage(rules: compose.Rules, args: argparse.Namespace) -> int:
    trees = list(rules.ruleset.trees.values())
    wanted = set().union(*(engine_coverage.candidates(t, rules.ruleset.aliases) for t in trees))
    end = datetime.now(UTC)
    async with compose.diagnoser(config(args), rules) as diagnoser:
        present = await diagnoser.source.metric_names(wanted, end - timedelta(hours=args.lookback), end)
    rows = [row for tree in trees for row in engine_coverage.tree_coverage(tree, rules.ruleset.aliases, present)]
    if args.format == "json":
        print(json.dumps([asdict(r) for r in rows], indent=2))
        return EXIT_OK
    for row in rows:
        found = ", ".join(f"{n}→{'|'.join(v)}" if v != [n] else n for n, v in row.found.items())
        missing = f"  missing: {', '.join(row.missing)}" if row.missing else ""
        print(f"{'ok     ' if row.runnable else 'CANNOT '} {row.tree}/{row.check}  {found}{missing}")
    blocked = sorted({r.tree for r in rows if not r.runnable})
    print(
        f"{len(trees) - len(blocked)} of {len(trees)} trees can run every check; "
        f"{sum(not r.runnable for r in rows)} of {len(rows)} queries cannot run here"
    )
    return EXIT_OK
