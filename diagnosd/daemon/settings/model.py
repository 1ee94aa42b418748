"""Daemon settings: defaults, then an optional YAML file, then DIAGNOSD_* variables, then flags.

Built once by the `serve` driver and passed down (no import-time singleton). Validated completely
at start: every problem at once, each with where its value came from. Secrets are SecretStr, may
come from files (`*_file`), and never appear in a message.
"""

from __future__ import annotations

import ipaddress
import json
import re
from collections.abc import Mapping
from datetime import timedelta
from enum import StrEnum
from pathlib import Path
from typing import Annotated, Any
from urllib.parse import urlsplit

from pydantic import (
    AfterValidator,
    BaseModel,
    BeforeValidator,
    ConfigDict,
    Field,
    PlainSerializer,
    SecretStr,
    field_validator,
    model_validator,
)
from pydantic_settings import BaseSettings, PydanticBaseSettingsSource, SettingsConfigDict

from diagnosd.sinks.alertmanager import AlertmanagerConfig
from diagnosd.sinks.grafana import GrafanaConfig
from diagnosd.sources import PrometheusConfig
from diagnosd.sources.circuit import Policy
from diagnosd.sources.prometheus import Stack
from diagnosd.storage import POSTGRES_SCHEMES, is_url
from diagnosd.topology import Topology
from diagnosd.trees.model import LABEL_NAME
from diagnosd.trees.promql import format_duration, parse_duration
from diagnosd.urls import redact

MIN_SECRET = 16


def _duration(value: Any) -> Any:
    """`30s`, `1h30m` (Prometheus durations) or a number of seconds."""
    if isinstance(value, bool):
        raise ValueError("a duration such as 30s, 5m or 1h")
    if isinstance(value, int | float):
        return timedelta(seconds=value)
    if isinstance(value, str):
        return parse_duration(value.strip())
    return value


def _label(name: str) -> str:
    if not LABEL_NAME.match(name) or name.startswith("__"):
        raise ValueError(f"{name!r} is not a label name ([a-zA-Z_][a-zA-Z0-9_]*, not starting with __)")
    return name


def _strong(secret: SecretStr) -> SecretStr:
    if len(secret.get_secret_value()) < MIN_SECRET:
        raise ValueError(f"too short: use at least {MIN_SECRET} characters (e.g. `openssl rand -hex 16`)")
    return secret


Duration = Annotated[
    timedelta,
    BeforeValidator(_duration),
    AfterValidator(lambda d: _positive(d)),
    PlainSerializer(format_duration, return_type=str),
]
# A duration that may be 0s (a `for`).
Hold = Annotated[
    timedelta,
    BeforeValidator(_duration),
    AfterValidator(lambda d: _not_negative(d)),
    PlainSerializer(format_duration, return_type=str),
]
LabelName = Annotated[str, AfterValidator(_label)]
Secret = Annotated[SecretStr, AfterValidator(_strong)]


def _positive(value: timedelta) -> timedelta:
    if value <= timedelta(0):
        raise ValueError("must be longer than 0s")
    return value


def _not_negative(value: timedelta) -> timedelta:
    if value < timedelta(0):
        raise ValueError("must not be negative")
    return value


class Section(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True, populate_by_name=True)


class LogLevel(StrEnum):
    DEBUG = "debug"
    INFO = "info"
    WARNING = "warning"
    ERROR = "error"


class CircuitSettings(Section):
    """When to stop asking a failing Prometheus, and how soon to ask again (sources/circuit.py)."""

    # Consecutive failed calls (unreachable, timed out, 5xx or 429 after the retries) that open it;
    # one answer with a Retry-After opens it at once.
    failures: Annotated[int, Field(ge=1, le=1000)] = 5
    # Open this long before one call probes; doubled at each consecutive opening (less up to 20 %
    # at random) up to max_cooldown; never shorter than a Retry-After, itself capped at max_cooldown.
    cooldown: Duration = timedelta(seconds=5)
    max_cooldown: Duration = timedelta(minutes=5)

    @model_validator(mode="after")
    def _order(self) -> CircuitSettings:
        if self.max_cooldown < self.cooldown:
            raise ValueError("max_cooldown must not be shorter than cooldown")
        return self

    def policy(self) -> Policy:
        return Policy(self.failures, self.cooldown.total_seconds(), self.max_cooldown.total_seconds())


class PrometheusSettings(Section):
    """Where queries go: Prometheus or any PromQL backend (Thanos, Mimir, VictoriaMetrics)."""

    url: str
    timeout: Duration = timedelta(seconds=10)
    retries: Annotated[int, Field(ge=0, le=10)] = 2
    # Each diagnosis answers within this, whatever the timeout and retries: what is unanswered then
    # reads unknown (timeout). Well under Kubernetes' 30s grace, which the shutdown waits within.
    diagnosis_deadline: Duration = timedelta(seconds=20)
    # How long the answers about what exists (metric names with series, the targets' declared
    # types) are kept between diagnoses: every diagnosis asks them before its first query. 0s
    # asks them every time.
    lookup_ttl: Hold = timedelta(seconds=30)
    circuit: CircuitSettings = CircuitSettings()
    bearer_token: SecretStr | None = None
    username: str | None = None
    password: SecretStr | None = None
    # e.g. {"X-Scope-OrgID": "tenant-a"} for Mimir / Cortex.
    headers: dict[str, str] = {}
    ca_file: Path | None = None
    insecure_skip_verify: bool = False
    # Labels every series in scope carries besides the target's (matched exactly, not leniently).
    strict_labels: list[LabelName] = []
    # What carries the queries: aiohttp's connection pool, or httpx's own (httpcore): 1.25-3.5x
    # the CPU per query (bench/transport.py), 9 MiB less resident, SOCKS proxies (httpx[socks]).
    stack: Stack = "aiohttp"

    @field_validator("url")
    @classmethod
    def _url(cls, url: str) -> str:
        parts = urlsplit(url)
        if parts.scheme not in ("http", "https") or not parts.hostname:
            raise ValueError("expected http(s)://host[:port][/path]")
        if parts.username or parts.password:
            raise ValueError("must not hold credentials: use prometheus.username/password or bearer_token")
        return url

    @model_validator(mode="after")
    def _check(self) -> PrometheusSettings:
        if (self.username is None) != (self.password is None):
            raise ValueError("username and password go together")
        if self.bearer_token is not None and self.username is not None:
            raise ValueError("use either bearer_token or username/password, not both")
        return self

    def config(self) -> PrometheusConfig:
        verify: bool | str = False if self.insecure_skip_verify else (str(self.ca_file) if self.ca_file else True)
        password = self.password.get_secret_value() if self.password else None
        return PrometheusConfig(
            url=self.url,
            timeout=self.timeout.total_seconds(),
            retries=self.retries,
            bearer_token=self.bearer_token.get_secret_value() if self.bearer_token else None,
            basic_auth=(self.username, password) if self.username and password else None,
            headers=dict(self.headers),
            verify=verify,
            stack=self.stack,
        )


class ServerSettings(Section):
    host: str = "127.0.0.1"
    port: Annotated[int, Field(ge=1, le=65535)] = 8080
    access_log: bool = True
    # How people reach this daemon (e.g. https://diagnosd.example.com): derived alerts and Grafana
    # annotations link to <external_url>/findings/<id>. Unset: they carry no link.
    external_url: str | None = None

    @field_validator("external_url")
    @classmethod
    def _external(cls, url: str | None) -> str | None:
        return None if url is None else _receiver_url(url)

    @property
    def loopback(self) -> bool:
        if self.host == "localhost":
            return True
        try:
            return ipaddress.ip_address(self.host).is_loopback
        except ValueError:
            return False


class StoreSettings(Section):
    # The SQLite file: the embedded default, for one replica.
    path: Path = Path("diagnosd.db")
    # Or PostgreSQL, for two or more replicas: postgresql://user[:password]@host:port/database. A
    # secret as a whole (it may hold the password): DIAGNOSD_STORE_URL_FILE reads it from a file.
    url: SecretStr | None = None
    # Resolved findings, delivered-alert memory and target states older than this are deleted.
    retention: Duration = timedelta(days=7)

    @field_validator("url")
    @classmethod
    def _url(cls, url: SecretStr | None) -> SecretStr | None:
        if url is not None and not is_url(url.get_secret_value()):
            # Never the value: it may hold the password.
            raise ValueError(f"expected {' or '.join(POSTGRES_SCHEMES)}user@host:port/database")
        return url

    @model_validator(mode="after")
    def _one(self) -> StoreSettings:
        if self.url is not None and "path" in self.model_fields_set:
            raise ValueError("set store.path (SQLite) or store.url (PostgreSQL), not both")
        return self

    def location(self) -> Path | str:
        """What `open_database` opens: the PostgreSQL URL when there is one, else the SQLite file."""
        return self.url.get_secret_value() if self.url is not None else self.path

    def shown(self) -> str:
        """The location as logs may show it: a URL without its credentials."""
        return redact(self.url.get_secret_value()) if self.url is not None else str(self.path)


class Walk(StrEnum):
    """Where a round walks each tree (engine/narrowed.py)."""

    # Where the symptom holds or is unknown: a clear target keeps its detect, and exports its
    # detect's value alone (diagnosd_check_value{check="detect"}).
    NARROWED = "narrowed"
    # Every target, clear ones too: every check's value exported for every target.
    WHOLE = "whole"


class SchedulerSettings(Section):
    enabled: bool = True
    interval: Duration = timedelta(seconds=30)
    # Narrows every round (e.g. {namespace: prod}); empty: the whole fleet.
    scope: dict[LabelName, str] = {}
    # Symptoms evaluated in rounds; empty: every loaded tree.
    symptoms: list[str] = []
    concurrency: Annotated[int, Field(ge=1, le=64)] = 4
    walk: Walk = Walk.NARROWED


class FindingsSettings(Section):
    # How long a cause must keep holding in rounds before its finding fires (alerts fire at once:
    # the alert rule had its own `for`).
    for_: Annotated[Hold, Field(alias="for")] = timedelta(minutes=1)
    for_by_symptom: dict[str, Hold] = {}
    # GET /findings shows active findings and those resolved within this window.
    recent: Duration = timedelta(hours=1)
    # A target state (symptom present, check values) not refreshed for this long is no longer exported.
    state_ttl: Duration = timedelta(minutes=10)

    def pending_for(self, symptom: str) -> timedelta:
        return self.for_by_symptom.get(symptom, self.for_)


class WebhookSettings(Section):
    # alertname -> symptom id, for alerts without a `symptom` label.
    alertname_map: dict[str, str] = {}
    # Alert labels taken into the scope besides the tree's target labels (see docs/daemon.md).
    scope_labels: list[LabelName] = ["model_name"]
    # Jobs waiting (a job: the alerts of one symptom within coalesce_window, or one resolution);
    # while this many wait, a delivery with new alerts is answered 503. Any delivery is taken whole.
    queue_size: Annotated[int, Field(ge=1, le=100_000)] = 256
    # Firing alerts of one symptom received within this window are diagnosed by one evaluation
    # over all their targets; 0s diagnoses each alert on its own.
    coalesce_window: Hold = timedelta(seconds=2)
    # Batches diagnosed at once (each waits for Prometheus and then judges).
    workers: Annotated[int, Field(ge=1, le=64)] = 2
    # Processes of their own that diagnose the batches, so that a storm's diagnoses never hold the
    # webhook's acks (alertmanager/offload.py), each one batch at a time; 0 diagnoses them on the
    # daemon's event loop.
    processes: Annotated[int, Field(ge=0, le=16)] = 1
    max_body_bytes: Annotated[int, Field(ge=1024)] = 4 * 1024 * 1024
    # A diagnosis that could not run (Prometheus down) is tried again this many times in all.
    max_attempts: Annotated[int, Field(ge=1, le=100)] = 5
    retry_after: Duration = timedelta(seconds=30)
    # Replicas on one PostgreSQL: an alert state a replica claimed is its own for this long, renewed
    # every third of it while it works; past it (the replica died) another replica takes it.
    lease: Duration = timedelta(seconds=30)


# What the API tokens guard, and the webhook's own credentials (falling back to the API tokens).
API_ENDPOINTS = ("/diagnose", "/triage", "/symptoms", "/findings", "/metrics")
WEBHOOK_ENDPOINTS = ("/webhook/alertmanager",)


class AuthSettings(Section):
    # Bearer tokens for the REST API and /metrics (not /healthz, /readyz, /docs, /openapi.json).
    api_tokens: list[Secret] = []
    # What Alertmanager's webhook http_config sends; with neither, the webhook takes the API tokens.
    webhook_tokens: list[Secret] = []
    webhook_username: str | None = None
    webhook_password: Secret | None = None
    # Required to serve off loopback with any endpoint open to anyone (a proxy authenticates).
    allow_anonymous: bool = False

    @model_validator(mode="after")
    def _pair(self) -> AuthSettings:
        if (self.webhook_username is None) != (self.webhook_password is None):
            raise ValueError("webhook_username and webhook_password go together")
        return self

    def open_endpoints(self) -> list[tuple[tuple[str, ...], str]]:
        """The endpoints anyone may call with these credentials, grouped by the settings that close them.

        /healthz, /readyz, /docs and /openapi.json are open by design: probes and the API's own
        description, no data. /metrics has no setting of its own to open it: it names pods, models
        and tenants, and Prometheus scrapes with a bearer token as easily as without.
        """
        found: list[tuple[tuple[str, ...], str]] = []
        if not self.api_tokens:
            found.append((API_ENDPOINTS, "auth.api_tokens"))
        if not (self.api_tokens or self.webhook_tokens or self.webhook_username):
            found.append(
                (WEBHOOK_ENDPOINTS, "auth.webhook_tokens, auth.webhook_username/webhook_password or auth.api_tokens")
            )
        return found


class TopologySettings(Section):
    """How this cluster tells a canary from the stable pods (the `@canary` / `@stable` recipes)."""

    canary_label: LabelName = "track"
    canary_value: str = "canary"
    # A regex over the whole pod name (e.g. ".+-canary-.+"; Prometheus anchors it, RE2 syntax);
    # when set it decides instead of the label.
    canary_pod_pattern: str | None = None

    @field_validator("canary_pod_pattern")
    @classmethod
    def _pattern(cls, pattern: str | None) -> str | None:
        if pattern is not None:
            try:
                re.compile(pattern)
            except re.error as error:
                raise ValueError(f"not a regular expression: {error}") from None
        return pattern

    def topology(self) -> Topology:
        return Topology(self.canary_label, self.canary_value, self.canary_pod_pattern)


def _receiver_url(url: str) -> str:
    parts = urlsplit(url)
    if parts.scheme not in ("http", "https") or not parts.hostname:
        raise ValueError(f"{url!r}: expected http(s)://host[:port][/path]")
    if parts.username or parts.password:
        raise ValueError("must not hold credentials: use the section's token setting")
    return url


class Language(StrEnum):
    EN = "en"
    ZH = "zh"


class AlertmanagerSinkSettings(Section):
    """Derived alerts: each firing finding as the alert DiagnosdRootCause, to every Alertmanager
    listed (all of an HA cluster: each receives every post). No urls: off."""

    urls: list[str] = []
    # Active alerts are re-sent this often, valid for 4 times as long (Prometheus's resend delay).
    resend_interval: Duration = timedelta(minutes=1)
    timeout: Duration = timedelta(seconds=10)
    bearer_token: SecretStr | None = None
    # The language of the annotations (summary, evidence, remediation).
    language: Language = Language.EN
    # Updates waiting per Alertmanager while it is down; past this the oldest are dropped (counted).
    queue_size: Annotated[int, Field(ge=1, le=1_000_000)] = 10_000

    @field_validator("urls")
    @classmethod
    def _urls(cls, urls: list[str]) -> list[str]:
        return [_receiver_url(url) for url in urls]

    def config(self, external_url: str | None) -> AlertmanagerConfig:
        return AlertmanagerConfig(
            urls=tuple(self.urls),
            resend_interval=self.resend_interval,
            timeout=self.timeout.total_seconds(),
            bearer_token=self.bearer_token.get_secret_value() if self.bearer_token else None,
            queue_size=self.queue_size,
            external_url=external_url,
        )


class GrafanaSinkSettings(Section):
    """A region annotation per finding (opened when it fires, closed when it resolves). No url: off."""

    url: str | None = None
    # A service account token with the annotations:write permission (token_file: from a Secret).
    token: SecretStr | None = None
    # The dashboard the regions belong to; unset: organization-wide, found by the `diagnosd` tag.
    dashboard_uid: str | None = None
    timeout: Duration = timedelta(seconds=10)
    language: Language = Language.EN
    queue_size: Annotated[int, Field(ge=1, le=1_000_000)] = 10_000

    @field_validator("url")
    @classmethod
    def _url(cls, url: str | None) -> str | None:
        return None if url is None else _receiver_url(url)

    def config(self, external_url: str | None) -> GrafanaConfig | None:
        if self.url is None:
            return None
        return GrafanaConfig(
            url=self.url,
            token=self.token.get_secret_value() if self.token else None,
            dashboard_uid=self.dashboard_uid,
            timeout=self.timeout.total_seconds(),
            queue_size=self.queue_size,
            external_url=external_url,
        )


class MetricsSettings(Section):
    # At most this many diagnosd_root_cause/symptom_active/check_value series per scrape.
    max_series: Annotated[int, Field(ge=1)] = 10_000


class Settings(BaseSettings):
    # How pydantic-settings names the variables: DIAGNOSD_SECTION_KEY, split once after the section
    # (DIAGNOSD_PROMETHEUS_BEARER_TOKEN is prometheus.bearer_token), DIAGNOSD_KEY at the top level.
    model_config = SettingsConfigDict(
        frozen=True,
        case_sensitive=True,  # in the file; the environment source matches names in any case
        env_prefix="DIAGNOSD_",
        env_nested_delimiter="_",
        env_nested_max_split=1,
    )

    prometheus: PrometheusSettings
    server: ServerSettings = ServerSettings()
    store: StoreSettings = StoreSettings()
    scheduler: SchedulerSettings = SchedulerSettings()
    findings: FindingsSettings = FindingsSettings()
    webhook: WebhookSettings = WebhookSettings()
    auth: AuthSettings = AuthSettings()
    metrics: MetricsSettings = MetricsSettings()
    topology: TopologySettings = TopologySettings()
    alertmanager: AlertmanagerSinkSettings = AlertmanagerSinkSettings()
    grafana: GrafanaSinkSettings = GrafanaSinkSettings()
    rules_dir: Path | None = None
    log_level: LogLevel = LogLevel.INFO
    # symptom -> {param: value}: per-deployment overrides of tree params.
    params: dict[str, dict[str, float | str]] = {}

    @classmethod
    def settings_customise_sources(
        cls,
        settings_cls: type[BaseSettings],
        init_settings: PydanticBaseSettingsSource,
        env_settings: PydanticBaseSettingsSource,
        dotenv_settings: PydanticBaseSettingsSource,
        file_secret_settings: PydanticBaseSettingsSource,
    ) -> tuple[PydanticBaseSettingsSource, ...]:
        # Only the arguments: loader.load_settings passes the file, the environment and the flags
        # it was given, so Settings built in code never picks up the process environment.
        return (init_settings,)

    @model_validator(mode="after")
    def _safe(self) -> Settings:
        exposed = self.auth.open_endpoints()
        if not self.server.loopback and exposed and not self.auth.allow_anonymous:
            groups = "; ".join(f"{', '.join(paths)} (set {closing})" for paths, closing in exposed)
            raise ValueError(
                f"refusing to serve on {self.server.host} without credentials for {groups}; "
                "or auth.allow_anonymous: true if a proxy authenticates"
            )
        if self.findings.state_ttl < 2 * self.scheduler.interval:
            raise ValueError("findings.state_ttl must be at least twice scheduler.interval")
        return self

    def redacted(self) -> Mapping[str, Any]:
        """The settings as data with every secret masked: safe to log."""
        data: dict[str, Any] = json.loads(self.model_dump_json(by_alias=True))
        return data
