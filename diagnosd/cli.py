"""The `diagnosd` command line: a thin driver over runtime, engine and render.

Exit statuses: 0 the command ran (whatever the diagnosis found), 1 rules invalid or rule tests
failed, 2 bad usage or an unknown symptom, 3 Prometheus could not be reached or answered wrongly.
"""

from __future__ import annotations

import argparse
import asyncio
import importlib
import json
import os
import sys
from collections.abc import Sequence
from dataclasses import asdict
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

from pydantic import ValidationError

from diagnosd import runtime
from diagnosd.engine import ParamError, Scope
from diagnosd.engine import coverage as engine_coverage
from diagnosd.errors import DiagnosdError, RulesError, ScopeError, SourceError, UnknownSymptom, UsageError
from diagnosd.moments import parse_moment
from diagnosd.render import json as render_json
from diagnosd.render import text as render_text
from diagnosd.settings import TopologySettings
from diagnosd.sinks import alertrules
from diagnosd.sources import PrometheusConfig, PrometheusSource
from diagnosd.topology import Topology
from diagnosd.trees import catalogdoc

EXIT_OK, EXIT_RULES, EXIT_USAGE, EXIT_SOURCE = 0, 1, 2, 3
# The reader of standard output went away (`diagnosd ... | head`): 128 + SIGPIPE, what a shell
# reports for any tool a closed pipe stopped, so that `set -o pipefail` sees the output was cut.
EXIT_PIPE = 141
EXIT_INTERRUPTED = 130

DESCRIPTION = """\
diagnosd walks the troubleshooting trees that LLM-serving SREs walk by hand (TTFT jumped, the
queue backs up, GPUs idle while requests are slow...) against Prometheus, and says which branch
holds, with the evidence: the query, the value, the threshold and the baseline, the branches ruled
out, what could not be looked at and why, and what is left for a person.

Start with `diagnosd demo` (a simulated fleet and a local Prometheus, nothing else needed), then
`diagnosd diagnose SYMPTOM --prometheus URL` (`diagnosd symptoms` lists them)."""

EPILOG = """\
exit status:
  0    the command ran (a diagnosis ran, whatever it found)
  1    rules invalid or rule tests failed; demo: the scenario's expected cause was not found
  2    bad usage or an unknown symptom
  3    Prometheus could not be reached or answered wrongly
  4    triage: something was found
  130  interrupted (Ctrl-C)
  141  standard output was closed early (e.g. piped to head)

Run `diagnosd COMMAND --help` for a command's options."""


class HelpFormatter(argparse.RawDescriptionHelpFormatter):
    """Descriptions as written; every option's default shown, unless it has none worth showing."""

    def _get_help_string(self, action: argparse.Action) -> str | None:
        text = action.help or ""
        default = action.default
        if (
            "default" in text
            or default is None
            or default is argparse.SUPPRESS
            or isinstance(default, bool)
            or default == []
            or not (action.option_strings or action.nargs in ("?", "*"))
        ):
            return text
        return f"{text} (default: %(default)s)"


class Parser(argparse.ArgumentParser):
    """The parser of diagnosd and of every subcommand (add_subparsers makes more of its class)."""

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        kwargs.setdefault("formatter_class", HelpFormatter)
        super().__init__(*args, **kwargs)


# Further drivers, one module each with `register(commands)` adding its subcommand(s) and
# `run(args) -> int`; a module owns the commands it registers (args.command is one of them).
DRIVERS: tuple[str, ...] = ("diagnosd.serve_cli", "diagnosd.sim.cli", "diagnosd.triage_cli")


def parser() -> argparse.ArgumentParser:
    root = Parser(prog="diagnosd", description=DESCRIPTION, epilog=EPILOG)
    root.add_argument("--rules", type=Path, metavar="DIR", help="rules directory (default: the shipped rules)")
    version = importlib.import_module("diagnosd").__version__  # the one version: pyproject.toml reads it too
    root.add_argument("--version", action="version", version=f"%(prog)s {version}")
    commands = root.add_subparsers(dest="command", required=True)

    symptoms = commands.add_parser("symptoms", help="list the symptoms diagnosd can diagnose")
    _format_lang(symptoms)

    diagnose = commands.add_parser("diagnose", help="walk one symptom's tree against Prometheus")
    diagnose.add_argument("symptom", help="a symptom id from `diagnosd symptoms`")
    _prometheus_url(diagnose)
    diagnose.add_argument(
        "--match", action="append", default=[], metavar="LABEL=VALUE", help="narrow the scope (repeatable)"
    )
    diagnose.add_argument("--at", type=parse_time, metavar="TIME", help="RFC3339 or Unix time (default: now)")
    diagnose.add_argument(
        "--param", action="append", default=[], metavar="NAME=VALUE", help="override a tree param (repeatable)"
    )
    _prometheus_options(diagnose)
    topology_options(diagnose)
    _format_lang(diagnose)
    diagnose.add_argument("--verbose", action="store_true", help="text: every target's whole tree, not one line each")

    rules = commands.add_parser("rules", help="validate, test or check coverage of rules")
    rules_commands = rules.add_subparsers(dest="rules_command", required=True)
    validate = rules_commands.add_parser("validate", help="load every tree, report every problem")
    _rules_dir(validate)
    test = rules_commands.add_parser("test", help="run the series tests beside the trees on a real Prometheus")
    _rules_dir(test)
    test.add_argument(
        "--only", action="append", default=[], metavar="SYMPTOM", help="test these trees only (repeatable)"
    )
    test.add_argument("--prometheus-binary", default="prometheus", metavar="PATH", help="the Prometheus to run")
    test.add_argument("--promtool-binary", default="promtool", metavar="PATH", help="the promtool to run")
    coverage = rules_commands.add_parser("coverage", help="which checks can run on this Prometheus, what is missing")
    _rules_dir(coverage)
    _prometheus_url(coverage)
    coverage.add_argument(
        "--lookback", type=float, default=24.0, metavar="HOURS", help="how far back to look for series"
    )
    coverage.add_argument("--format", choices=("text", "json"), default="text", help="output format")
    _prometheus_options(coverage)
    alerts = rules_commands.add_parser("alerts", help="Prometheus alerting rules from the trees' detect conditions")
    _rules_dir(alerts)
    alerts.add_argument("--out", type=Path, metavar="FILE", help="file to write (default: standard output)")
    alerts.add_argument(
        "--for", dest="hold", default="5m", metavar="DURATION", help="how long a condition holds before it fires"
    )
    catalog = rules_commands.add_parser("catalog", help="write docs/catalog.md from the rules")
    _rules_dir(catalog)
    catalog.add_argument("--out", type=Path, metavar="FILE", help="file to write (default: standard output)")
    for name in DRIVERS:
        importlib.import_module(name).register(commands)
    return root


def _format_lang(command: argparse.ArgumentParser) -> None:
    command.add_argument("--format", choices=("text", "json"), default="text", help="output format")
    command.add_argument("--lang", choices=("en", "zh"), default="en", help="language of titles and guidance")


def _rules_dir(command: argparse.ArgumentParser) -> None:
    command.add_argument("dir", nargs="?", type=Path, help="rules directory (default: --rules, else the shipped rules)")


def _prometheus_url(command: argparse.ArgumentParser) -> None:
    command.add_argument(
        "--prometheus",
        required=True,
        metavar="URL",
        help="Prometheus HTTP API base URL (Thanos, Mimir, VictoriaMetrics work too); credentials in it are "
        "never printed",
    )


def _prometheus_options(command: argparse.ArgumentParser) -> None:
    command.add_argument(
        "--header",
        action="append",
        default=[],
        metavar="NAME=VALUE",
        help="extra HTTP header, e.g. X-Scope-OrgID=tenant",
    )
    command.add_argument("--bearer-token-file", type=Path, metavar="FILE", help="a file holding a bearer token")
    command.add_argument("--basic-auth-file", type=Path, metavar="FILE", help="a file holding USER:PASSWORD")
    command.add_argument("--ca-file", type=Path, metavar="FILE", help="CA bundle to verify Prometheus' certificate")
    command.add_argument("--insecure-skip-verify", action="store_true", help="do not verify TLS certificates")
    command.add_argument("--timeout", type=float, default=10.0, metavar="SECONDS", help="seconds per query")


def topology_options(command: argparse.ArgumentParser) -> None:
    """How this cluster tells a canary apart (the `@canary` / `@stable` recipes); settings: topology.*."""
    command.add_argument("--canary-label", default="track", metavar="LABEL", help="label that marks the canary")
    command.add_argument("--canary-value", default="canary", metavar="VALUE", help="its value on the canary")
    command.add_argument(
        "--canary-pod-pattern",
        metavar="REGEX",
        help="tell the canary by pod name instead (whole name, RE2), e.g. '.+-canary-.+'",
    )


def topology(args: argparse.Namespace) -> Topology:
    try:
        settings = TopologySettings(
            canary_label=args.canary_label, canary_value=args.canary_value, canary_pod_pattern=args.canary_pod_pattern
        )
    except ValidationError as error:
        problem = error.errors()[0]
        flag = "--" + str(problem["loc"][0]).replace("_", "-")
        raise UsageError(flag, str(problem["msg"]).removeprefix("Value error, ")) from None
    return settings.topology()


def parse_time(text: str) -> datetime:
    try:
        return parse_moment(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"{text!r} is neither RFC3339 nor a Unix time") from None


def main(argv: Sequence[str] | None = None) -> int:
    try:
        code = _main(argv)
        sys.stdout.flush()  # a closed pipe shows here, not at interpreter exit
    except BrokenPipeError:
        _stdout_to_devnull()
        return EXIT_PIPE
    except KeyboardInterrupt:
        print("\ndiagnosd: interrupted", file=sys.stderr)
        return EXIT_INTERRUPTED
    return code


def _stdout_to_devnull() -> None:
    """Nothing more reaches the closed pipe: Python's flush at exit then has nowhere to fail."""
    devnull = os.open(os.devnull, os.O_WRONLY)
    try:
        os.dup2(devnull, sys.stdout.fileno())
    except (OSError, ValueError):  # standard output is not a file (captured): nothing to redirect
        pass
    finally:
        os.close(devnull)


def _main(argv: Sequence[str] | None) -> int:
    args = parser().parse_args(argv)
    try:
        return run(args)
    except RulesError as error:
        print(error, file=sys.stderr)
        return EXIT_RULES
    except (UnknownSymptom, ScopeError, ParamError, UsageError) as error:
        print(f"diagnosd: {error}", file=sys.stderr)
        return EXIT_USAGE
    except SourceError as error:
        print(f"diagnosd: Prometheus could not be used: {error}", file=sys.stderr)
        return EXIT_SOURCE
    except DiagnosdError as error:
        print(f"diagnosd: {error}", file=sys.stderr)
        return EXIT_USAGE


def run(args: argparse.Namespace) -> int:
    if args.command == "rules":
        return rules_command(args)
    driver = getattr(args, "driver", None)
    if driver is not None:
        code: int = importlib.import_module(driver).run(args)
        return code
    rules = runtime.load(args.rules)
    if args.command == "symptoms":
        return symptoms(rules, args.format, args.lang)
    return asyncio.run(diagnose(rules, args))


def symptoms(rules: runtime.Rules, fmt: str, lang: str) -> int:
    trees = rules.ruleset.trees.values()
    if fmt == "json":
        rows = [{"id": t.id, "title": render_json.text(t.title), "target": t.target} for t in trees]
        print(json.dumps(rows, ensure_ascii=False, indent=2))
    else:
        for tree in trees:
            print(f"{tree.id:<24} {render_text.pick(tree.title, lang)}  [{', '.join(tree.target)}]")
    return EXIT_OK


async def diagnose(rules: runtime.Rules, args: argparse.Namespace) -> int:
    tree = rules.ruleset.tree(args.symptom)
    if tree is None:
        raise UnknownSymptom(args.symptom, list(rules.ruleset.trees))
    scope = Scope.parse(args.match)
    overrides = dict(_pair(item, "--param") for item in args.param)
    async with runtime.evaluator(_config(args), rules, topology=topology(args)) as evaluator:
        result = await evaluator.diagnose(tree, scope, args.at, overrides)
    if args.format == "json":
        print(json.dumps(render_json.diagnosis(result), ensure_ascii=False, indent=2))
    else:
        print(render_text.render(result, args.lang, verbose=args.verbose, tree=tree), end="")
    return EXIT_OK


def _config(args: argparse.Namespace) -> PrometheusConfig:
    headers = dict(_pair(item, "--header") for item in args.header)
    token = args.bearer_token_file.read_text().strip() if args.bearer_token_file else None
    basic = None
    if args.basic_auth_file:
        user, sep, password = args.basic_auth_file.read_text().strip().partition(":")
        if not sep:
            raise UsageError("--basic-auth-file", "the file must hold USER:PASSWORD")
        basic = (user, password)
    verify: bool | str = False if args.insecure_skip_verify else str(args.ca_file) if args.ca_file else True
    return PrometheusConfig(
        url=args.prometheus, timeout=args.timeout, headers=headers, bearer_token=token, basic_auth=basic, verify=verify
    )


def _pair(item: str, flag: str) -> tuple[str, str]:
    name, sep, value = item.partition("=")
    if not sep or not name:
        raise UsageError(flag, f"{item!r} is not NAME=VALUE")
    return name, value


def rules_command(args: argparse.Namespace) -> int:
    directory = args.dir or args.rules or runtime.default_rules_dir()
    if args.rules_command == "validate":
        rules = runtime.load(directory)
        count = len(rules.ruleset.trees)
        print(f"{directory}: {count} trees valid")
        return EXIT_OK
    if args.rules_command in ("catalog", "alerts"):
        rules = runtime.load(directory)
        if args.rules_command == "catalog":
            text = catalogdoc.render(rules.ruleset)
        else:
            text = alertrules.rule_file(list(rules.ruleset.trees.values()), rules.aliases, args.hold)
        if args.out:
            args.out.write_text(text, encoding="utf-8")
        else:
            print(text, end="")
        return EXIT_OK
    if args.rules_command == "coverage":
        return asyncio.run(coverage(runtime.load(directory), args))
    from diagnosd.rulestest.runner import run_tests

    return EXIT_OK if run_tests(directory, args) else EXIT_RULES


async def coverage(rules: runtime.Rules, args: argparse.Namespace) -> int:
    trees = list(rules.ruleset.trees.values())
    wanted = set().union(*(engine_coverage.candidates(t, rules.aliases) for t in trees))
    end = datetime.now(UTC)
    async with _config(args).client() as client:
        source = PrometheusSource(_config(args), client)
        present = await source.metric_names(wanted, end - timedelta(hours=args.lookback), end)
    rows = [row for tree in trees for row in engine_coverage.tree_coverage(tree, rules.aliases, present)]
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
