"""Options several commands share: Prometheus connection, canary convention, output, time."""

from __future__ import annotations

import argparse
from datetime import datetime, timedelta
from pathlib import Path
from urllib.parse import unquote, urlsplit, urlunsplit

from pydantic import ValidationError

from diagnosd.daemon.settings.model import PrometheusSettings, TopologySettings
from diagnosd.errors import UsageError
from diagnosd.moments import parse_moment
from diagnosd.sources import PrometheusConfig
from diagnosd.topology import Topology


def format_lang(command: argparse.ArgumentParser) -> None:
    command.add_argument("--format", choices=("text", "json"), default="text", help="output format")
    command.add_argument("--lang", choices=("en", "zh"), default="en", help="language of titles and guidance")


def rules_dir(command: argparse.ArgumentParser) -> None:
    command.add_argument("dir", nargs="?", type=Path, help="rules directory (default: --rules, else the shipped rules)")


def prometheus_url(command: argparse.ArgumentParser) -> None:
    command.add_argument(
        "--prometheus",
        required=True,
        metavar="URL",
        help="Prometheus HTTP API base URL (Thanos, Mimir, VictoriaMetrics work too); credentials in it are "
        "never printed",
    )


def prometheus_options(command: argparse.ArgumentParser) -> None:
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


def config(args: argparse.Namespace) -> PrometheusConfig:
    """The daemon's PrometheusSettings built from the flags, so TLS and auth are decided in one place.

    Credentials written into --prometheus (`http://user:pass@host`) become basic auth: the URL
    that is used, and printed, holds none.
    """
    parts = urlsplit(args.prometheus)
    username, password = parts.username, parts.password
    url = urlunsplit(parts._replace(netloc=parts.netloc.rpartition("@")[2])) if "@" in parts.netloc else args.prometheus
    if args.basic_auth_file:
        if username is not None:
            raise UsageError("--basic-auth-file", "the --prometheus URL holds credentials already")
        username, sep, password = args.basic_auth_file.read_text().strip().partition(":")
        if not sep:
            raise UsageError("--basic-auth-file", "the file must hold USER:PASSWORD")
    if username is not None and password is None:
        password = ""  # https://token@host: a user name only, as curl sends it
    fields = {
        "url": url,
        "timeout": timedelta(seconds=args.timeout),
        "headers": dict(pair(item, "--header") for item in args.header),
        "bearer_token": args.bearer_token_file.read_text().strip() if args.bearer_token_file else None,
        "username": unquote(username) if username is not None else None,
        "password": unquote(password) if password is not None else None,
        "ca_file": args.ca_file,
        "insecure_skip_verify": args.insecure_skip_verify,
    }
    try:
        return PrometheusSettings.model_validate(fields).config()
    except ValidationError as error:
        problem = error.errors()[0]
        where = str(problem["loc"][0]) if problem["loc"] else ""
        flag = FLAGS.get(where, "--prometheus")
        raise UsageError(flag, str(problem["msg"]).removeprefix("Value error, ")) from None


# The flag behind each PrometheusSettings field, to name it in an error.
FLAGS = {
    "url": "--prometheus",
    "timeout": "--timeout",
    "headers": "--header",
    "bearer_token": "--bearer-token-file",
    "username": "--basic-auth-file",
    "password": "--basic-auth-file",
    "ca_file": "--ca-file",
}


def pair(item: str, flag: str) -> tuple[str, str]:
    name, sep, value = item.partition("=")
    if not sep or not name:
        raise UsageError(flag, f"{item!r} is not NAME=VALUE")
    return name, value
