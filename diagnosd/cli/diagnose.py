"""`diagnosd symptoms` and `diagnosd diagnose`: one tree walked against Prometheus, printed."""

from __future__ import annotations

import argparse
import asyncio
import json
import sys
from typing import Any

from diagnosd.cli.exits import EXIT_OK
from diagnosd.cli.options import (
    config,
    format_lang,
    pair,
    parse_time,
    prometheus_options,
    prometheus_url,
    topology,
    topology_options,
)
from diagnosd.daemon import compose
from diagnosd.engine import Scope
from diagnosd.errors import UnknownSymptom
from diagnosd.findings.lifecycle import Trigger
from diagnosd.render import json as render_json
from diagnosd.render import text as render_text


def register(commands: Any) -> None:
    symptoms_ = commands.add_parser("symptoms", help="list the symptoms diagnosd can diagnose")
    format_lang(symptoms_)
    symptoms_.set_defaults(handler=symptoms)

    diagnose_ = commands.add_parser("diagnose", help="walk one symptom's tree against Prometheus")
    diagnose_.add_argument("symptom", help="a symptom id from `diagnosd symptoms`")
    prometheus_url(diagnose_)
    diagnose_.add_argument(
        "--match", action="append", default=[], metavar="LABEL=VALUE", help="narrow the scope (repeatable)"
    )
    diagnose_.add_argument("--at", type=parse_time, metavar="TIME", help="RFC3339 or Unix time (default: now)")
    diagnose_.add_argument(
        "--param", action="append", default=[], metavar="NAME=VALUE", help="override a tree param (repeatable)"
    )
    prometheus_options(diagnose_)
    topology_options(diagnose_)
    format_lang(diagnose_)
    diagnose_.add_argument("--verbose", action="store_true", help="text: every target's whole tree, not one line each")
    diagnose_.set_defaults(handler=diagnose)


def symptoms(args: argparse.Namespace) -> int:
    trees = compose.load(args.rules).ruleset.trees.values()
    if args.format == "json":
        rows = [{"id": t.id, "title": render_json.text(t.title), "target": t.target} for t in trees]
        print(json.dumps(rows, ensure_ascii=False, indent=2))
    else:
        for tree in trees:
            print(f"{tree.id:<24} {render_text.pick(tree.title, args.lang)}  [{', '.join(tree.target)}]")
    return EXIT_OK


def diagnose(args: argparse.Namespace) -> int:
    return asyncio.run(_diagnose(compose.load(args.rules), args))


async def _diagnose(rules: compose.Rules, args: argparse.Namespace) -> int:
    tree = rules.ruleset.tree(args.symptom)
    if tree is None:
        raise UnknownSymptom(args.symptom, list(rules.ruleset.trees))
    scope = Scope.parse(args.match)
    overrides = dict(pair(item, "--param") for item in args.param)
    async with compose.diagnoser(
        config(args), rules, params={tree.id: overrides}, topology=topology(args)
    ) as diagnoser:
        looked = await diagnoser.diagnose(tree, scope, args.at, Trigger.CLI)
    result = looked.diagnosis
    for error in looked.errors:  # a partial answer: those checks read unknown; say why, once each
        print(f"diagnosd: some queries failed, their checks are unknown: {error}", file=sys.stderr)
    if args.format == "json":
        print(json.dumps(render_json.diagnosis(result), ensure_ascii=False, indent=2))
    else:
        print(render_text.render(result, args.lang, verbose=args.verbose, tree=tree), end="")
    return EXIT_OK
