"""A real PostgreSQL for tests: Debian's server binaries on a free loopback port, in a temporary data
directory, always stopped and removed by its owner.

PostgreSQL refuses to run as root, so as root the server runs as the `postgres` user the package
creates, in a directory of its own under the system's temporary directory (pytest's are private
to root). Trust authentication, loopback only, except for one role that must give its password.
"""

from __future__ import annotations

import contextlib
import os
import shutil
import subprocess
import tempfile
from collections.abc import Iterator
from dataclasses import dataclass, field
from itertools import count
from pathlib import Path

import psycopg

from diagnosd.promlocal import free_port

INSTALL = Path("/usr/lib/postgresql")
SERVICE_USER = "postgres"
DATABASE = "diagnosd"
# A role that must give its password (every other one is trusted on loopback).
PASSWORD_ROLE, PASSWORD = "diagnosd_pw", "s3cret-Pa55word-never-shown"
HBA = f"""\
local all all trust
host all {PASSWORD_ROLE} 127.0.0.1/32 scram-sha-256
host all all 127.0.0.1/32 trust
"""


class PostgresMissing(Exception):
    """No PostgreSQL server binaries on this machine (Debian: apt-get install postgresql)."""


def binaries() -> Path:
    """The bin directory of the newest PostgreSQL installed; PostgresMissing if there is none."""
    versions = sorted(
        (d for d in INSTALL.glob("*") if (d / "bin" / "pg_ctl").is_file() and d.name.isdigit()),
        key=lambda d: int(d.name),
    )
    if not versions:
        raise PostgresMissing(f"no {INSTALL}/<version>/bin/pg_ctl: install Debian's postgresql package")
    return versions[-1] / "bin"


@dataclass
class LocalPostgres:
    bin: Path
    root: Path
    port: int = 0
    _names: Iterator[int] = field(default_factory=count)

    @property
    def data(self) -> Path:
        return self.root / "data"

    def url(self, database: str = DATABASE, user: str = SERVICE_USER, password: str | None = None) -> str:
        secret = f":{password}" if password is not None else ""
        return f"postgresql://{user}{secret}@127.0.0.1:{self.port}/{database}"

    def fresh_url(self, **credentials: str) -> str:
        """The URL of a new, empty place for a store: a schema of its own, first on the search path.

        A schema costs milliseconds where a database costs most of a second, and keeps each
        test's tables as apart (advisory locks are per database: tests run one at a time).
        """
        schema = f"store_{next(self._names)}"
        self.admin(f"CREATE SCHEMA {schema}")
        return f"{self.url(**credentials)}?options=-c%20search_path%3D{schema}"

    def admin(self, statement: str) -> None:
        with psycopg.connect(self.url(), autocommit=True) as connection:
            connection.execute(statement.encode())

    def start(self) -> None:
        self.port = free_port()
        self._run("initdb", "-D", str(self.data), "-U", SERVICE_USER, "-E", "UTF8", "--locale=C", "--no-sync")
        (self.data / "pg_hba.conf").write_text(HBA)
        options = " ".join(
            (
                "-c listen_addresses=127.0.0.1",
                f"-p {self.port}",
                f"-k {self.root}",  # the socket in our directory, not /var/run/postgresql
                # A test database is thrown away: durability only costs time.
                "-c fsync=off -c synchronous_commit=off -c full_page_writes=off",
            )
        )
        log = self.root / "server.log"
        self._run("pg_ctl", "-D", str(self.data), "-l", str(log), "-o", options, "-w", "-t", "60", "start")
        with psycopg.connect(self.url("postgres"), autocommit=True) as connection:
            connection.execute(f"CREATE DATABASE {DATABASE}".encode())
        self.admin(f"CREATE ROLE {PASSWORD_ROLE} LOGIN SUPERUSER PASSWORD '{PASSWORD}'")

    def stop(self) -> None:
        if (self.data / "postmaster.pid").exists():
            self._run("pg_ctl", "-D", str(self.data), "-m", "immediate", "-w", "stop", check=False)

    def _run(self, tool: str, *args: str, check: bool = True) -> None:
        command = [str(self.bin / tool), *args]
        if os.geteuid() == 0:
            command = ["runuser", "-u", SERVICE_USER, "--", *command]
        done = subprocess.run(command, capture_output=True, text=True, cwd=self.root, check=False)
        if check and done.returncode != 0:
            log = self.root / "server.log"
            tail = log.read_text()[-2000:] if log.exists() else ""
            raise RuntimeError(f"{tool} exited {done.returncode}: {done.stderr.strip()}\n{tail}")


@contextlib.contextmanager
def local_postgres() -> Iterator[LocalPostgres]:
    """A running PostgreSQL until the block ends; PostgresMissing without the binaries."""
    bin_dir = binaries()
    root = Path(tempfile.mkdtemp(prefix="diagnosd-postgres-"))
    try:
        if os.geteuid() == 0:
            shutil.chown(root, SERVICE_USER, SERVICE_USER)
        server = LocalPostgres(bin_dir, root)
        try:
            server.start()
            yield server
        finally:
            server.stop()
    finally:
        shutil.rmtree(root, ignore_errors=True)
