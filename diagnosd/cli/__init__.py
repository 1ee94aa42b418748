"""The `diagnosd` command line: one module per group of commands, the parser in `main`."""

from diagnosd.cli.main import main

__all__ = ["main"]
