"""The `diagnosd` command line: the parser, the exit statuses, and the errors they stand for.

Exit statuses: 0 the command ran (whatever the diagnosis found), 1 rules invalid or rule tests
failed, 2 bad usage or an unknown symptom, 3 Prometheus could not be reached or answered wrongly,
4 triage found something.
"""

from __future__ import annotations

import argparse
import importlib
import os
import sys
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any

from diagnosd.cli import diagnose, rules, serve, sim, triage
from diagnosd.cli.exits import EXIT_INTERRUPTED, EXIT_PIPE, EXIT_RULES, EXIT_SOURCE, EXIT_USAGE
from diagnosd.errors import DiagnosdError, ParamError, RulesError, ScopeError, SourceError, UnknownSymptom, UsageError

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


# One module per group of commands: `register(commands)` adds its subcommands, each bound to its
# handler (`set_defaults(handler=...)`, `handler(args) -> int`). Handlers import what is heavy
# (the daemon, the simulator) when they run, so `diagnosd diagnose` starts without them.
COMMANDS = (diagnose, rules, triage, serve, sim)


def parser() -> argparse.ArgumentParser:
    root = Parser(prog="diagnosd", description=DESCRIPTION, epilog=EPILOG)
    root.add_argument("--rules", type=Path, metavar="DIR", help="rules directory (default: the shipped rules)")
    version = importlib.import_module("diagnosd").__version__  # the one version: pyproject.toml reads it too
    root.add_argument("--version", action="version", version=f"%(prog)s {version}")
    commands = root.add_subparsers(dest="command", required=True)
    for command in COMMANDS:
        command.register(commands)
    return root


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
        handler: Callable[[argparse.Namespace], int] = args.handler
        return handler(args)
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
