"""The store's location: a SQLite file by default, or a PostgreSQL URL (a secret, from a file too),
never both, never shown with its password."""

from __future__ import annotations

from pathlib import Path

import pytest

from diagnosd.daemon.settings.loader import dumps, load_settings
from diagnosd.errors import SettingsError

BASE = {"DIAGNOSD_PROMETHEUS_URL": "http://127.0.0.1:9090"}
PASSWORD = "pg-Pa55word-0123456789"
URL = f"postgresql://diagnosd:{PASSWORD}@db.internal:5432/diagnosd"


def test_sqlite_is_the_default() -> None:
    store = load_settings(None, BASE).store
    assert (store.url, store.location(), store.shown()) == (None, Path("diagnosd.db"), "diagnosd.db")


def test_a_url_from_a_file_opens_postgresql_and_is_never_shown(tmp_path: Path) -> None:
    secret = tmp_path / "store-url"
    secret.write_text(URL + "\n")
    settings = load_settings(None, BASE | {"DIAGNOSD_STORE_URL_FILE": str(secret)})
    assert settings.store.location() == URL
    assert settings.store.shown() == "postgresql://***@db.internal:5432/diagnosd"
    assert PASSWORD not in dumps(settings)
    assert PASSWORD not in repr(settings)


def test_a_url_that_is_not_postgresql_is_refused_without_echoing_it() -> None:
    with pytest.raises(SettingsError) as error:
        load_settings(None, BASE | {"DIAGNOSD_STORE_URL": f"mysql://u:{PASSWORD}@db/x"})
    [problem] = error.value.problems
    assert problem.file == "DIAGNOSD_STORE_URL"
    assert "expected postgresql:// or postgres://user@host:port/database" in problem.message
    assert PASSWORD not in str(error.value)


def test_a_path_and_a_url_together_are_refused_naming_both() -> None:
    with pytest.raises(SettingsError) as error:
        load_settings(None, BASE | {"DIAGNOSD_STORE_URL": URL, "DIAGNOSD_STORE_PATH": "/data/diagnosd.db"})
    assert "set store.path (SQLite) or store.url (PostgreSQL), not both" in str(error.value)
    assert PASSWORD not in str(error.value)
