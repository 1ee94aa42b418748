"""The command line's manners: help that describes the product and every option with its default, a
quiet exit when the reader of its output goes away, and no credential of a URL ever printed."""

from __future__ import annotations

import argparse
import subprocess
import sys
from pathlib import Path

import pytest

from diagnosd.cli import diagnose, main
from diagnosd.cli.exits import EXIT_PIPE, EXIT_SOURCE
from diagnosd.cli.main import parser
from diagnosd.cli.options import config
from diagnosd.errors import UsageError
from diagnosd.promlocal import free_port
from diagnosd.urls import redact, scrub
from tests.conftest import REPO

SECRET = "s3cret-Pa55"


def _commands(root: argparse.ArgumentParser, path: tuple[str, ...] = ()) -> list[tuple[str, argparse.ArgumentParser]]:
    """Every (sub)command parser, by its command line."""
    found = [(" ".join(path) or "diagnosd", root)]
    for action in root._actions:
        if isinstance(action, argparse._SubParsersAction):
            for name, sub in action.choices.items():
                found += _commands(sub, (*path, name))
    return found


COMMANDS = _commands(parser())


def test_every_command_is_covered() -> None:
    names = {name for name, _ in COMMANDS}
    assert {"diagnosd", "symptoms", "diagnose", "serve", "simulate", "demo"} <= names
    assert {"rules validate", "rules test", "rules coverage", "rules alerts", "rules catalog"} <= names


@pytest.mark.parametrize(("name", "command"), COMMANDS, ids=[name for name, _ in COMMANDS])
def test_every_argument_has_help_and_shows_its_default(name: str, command: argparse.ArgumentParser) -> None:
    text = command.format_help()
    assert "(default: None)" not in text
    assert "(default: [])" not in text
    assert "(default: False)" not in text
    for action in command._actions:
        if isinstance(action, argparse._HelpAction | argparse._SubParsersAction):
            continue
        label = "/".join(action.option_strings) or action.dest
        assert action.help, f"{name} {label} has no help text"
        default = action.default
        shown = default not in (None, argparse.SUPPRESS, []) and not isinstance(default, bool)
        if shown:
            assert "default" in command._get_formatter()._format_action(action), f"{name} {label} hides its default"


def test_help_describes_the_product_and_its_exit_statuses(capsys: pytest.CaptureFixture[str]) -> None:
    with pytest.raises(SystemExit) as exit_:
        main(["--help"])
    assert exit_.value.code == 0
    out = capsys.readouterr().out
    assert "troubleshooting trees" in out
    assert "Prometheus" in out
    for command in ("diagnose", "symptoms", "serve", "demo", "rules"):
        assert command in out
    assert "exit status" in out
    for code in ("0 ", "1 ", "2 ", "3 ", "141"):
        assert f"\n  {code}" in out
    assert "thin driver" not in out  # the product, not the module


def test_a_closed_pipe_ends_quietly() -> None:
    """The reader is gone before diagnosd writes (`diagnosd symptoms | head` at its worst)."""
    command = [sys.executable, "-m", "diagnosd", "symptoms"]
    with subprocess.Popen(command, cwd=REPO, stdout=subprocess.PIPE, stderr=subprocess.PIPE) as process:
        assert process.stdout is not None
        assert process.stderr is not None
        process.stdout.close()
        err = process.stderr.read().decode()
        code = process.wait(timeout=60)
    assert err == ""
    assert code == EXIT_PIPE


def test_long_output_piped_to_head_ends_quietly() -> None:
    shell = f"set -o pipefail; {sys.executable} -m diagnosd rules alerts | head -1"
    done = subprocess.run(["bash", "-c", shell], cwd=REPO, capture_output=True, text=True, timeout=60)
    assert done.stdout.count("\n") == 1
    assert "Traceback" not in done.stderr
    assert "BrokenPipeError" not in done.stderr
    assert done.returncode in (0, EXIT_PIPE)  # 0 only when the output fitted the pipe before head left


@pytest.mark.parametrize(
    ("url", "shown"),
    [
        (f"http://user:{SECRET}@prometheus:9090", "http://***@prometheus:9090"),
        (f"https://{SECRET}@prometheus/api/prom?x=1", "https://***@prometheus/api/prom?x=1"),
        ("http://prometheus:9090/", "http://prometheus:9090/"),
        ("http://[::1]:9090", "http://[::1]:9090"),
        (f"http://user:{SECRET}@prometheus:9090/path@x", "http://***@prometheus:9090/path@x"),
        ("not a url", "not a url"),
    ],
)
def test_redact(url: str, shown: str) -> None:
    assert redact(url) == shown


def test_scrub_hides_the_url_and_its_password() -> None:
    url = f"http://user:{SECRET}@prometheus:9090"
    text = scrub(f"cannot reach {url}/api/v1/query (password {SECRET})", url)
    assert SECRET not in text
    assert "http://***@prometheus:9090/api/v1/query" in text


def test_credentials_in_the_prometheus_url_are_never_printed(capsys: pytest.CaptureFixture[str]) -> None:
    url = f"http://admin:{SECRET}@127.0.0.1:{free_port()}"
    for argv in (
        ["diagnose", "queue_backlog", "--prometheus", url, "--timeout", "2"],
        ["diagnose", "queue_backlog", "--prometheus", url, "--timeout", "2", "--format", "json"],
        ["rules", "coverage", "--prometheus", url, "--timeout", "2"],
    ):
        code = main(argv)
        captured = capsys.readouterr()
        printed = captured.out + captured.err
        assert code == EXIT_SOURCE, printed
        assert SECRET not in printed
        assert "admin" not in printed
        assert "http://127.0.0.1:" in printed  # the URL used and shown holds no credentials


def test_ctrl_c_is_an_exit_status_not_a_traceback(
    monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    def interrupted(args: argparse.Namespace) -> int:
        raise KeyboardInterrupt

    monkeypatch.setattr(diagnose, "symptoms", interrupted)
    assert main(["symptoms"]) == 130
    assert "interrupted" in capsys.readouterr().err


def test_a_missing_promtool_is_one_line_not_a_traceback(capsys: pytest.CaptureFixture[str]) -> None:
    code = main(["rules", "test", "--promtool-binary", "/nonexistent/promtool", "--only", "queue_backlog"])
    err = capsys.readouterr().err
    assert code == 2
    assert err == "diagnosd: '/nonexistent/promtool' not found on PATH (Debian: apt-get install prometheus)\n"


def test_the_flags_build_the_daemons_prometheus_settings(tmp_path: Path) -> None:
    """One place decides auth and TLS: URL credentials become basic auth, conflicts are refused."""
    url = f"http://admin:{SECRET}@127.0.0.1:9090/prom"
    args = parser().parse_args(["diagnose", "queue_backlog", "--prometheus", url, "--insecure-skip-verify"])
    built = config(args)
    assert (built.url, built.basic_auth, built.verify) == ("http://127.0.0.1:9090/prom", ("admin", SECRET), False)
    token = tmp_path / "token"
    token.write_text("t0ken-0123456789abcdef\n")
    both = ["diagnose", "queue_backlog", "--prometheus", url, "--bearer-token-file", str(token)]
    with pytest.raises(UsageError, match="either bearer_token or username/password"):
        config(parser().parse_args(both))
    with pytest.raises(UsageError, match=r"--prometheus: expected http\(s\)://host"):
        config(parser().parse_args(["diagnose", "queue_backlog", "--prometheus", "ftp://x"]))
