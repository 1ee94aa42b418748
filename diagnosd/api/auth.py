"""Who may call: bearer tokens for the API; for the webhook, what Alertmanager's http_config sends
(a bearer token or basic auth). Comparisons are constant-time over digests (no early exit, no
length leak), and no credential is ever logged, echoed or put into an error: uvicorn's access log
keeps the query string of public paths only (RedactQueries).
"""

from __future__ import annotations

import base64
import binascii
import hashlib
import hmac
import logging
from dataclasses import dataclass

from diagnosd.daemon.settings.model import AuthSettings
from diagnosd.errors import Unauthorized

# Open whatever the credentials: the probes and the API's description (no data behind them).
PUBLIC_PATHS = frozenset({"/healthz", "/readyz", "/docs", "/openapi.json"})
PUBLIC_PREFIXES = ("/docs/static/",)
REDACTED = "[redacted]"
# How the OpenAPI description names the credentials (components.securitySchemes): Swagger UI's
# Authorize and generated clients send what the daemon checks.
SCHEMES: dict[str, dict[str, str]] = {
    "bearer": {
        "type": "http",
        "scheme": "bearer",
        "description": "auth.api_tokens (for the webhook: auth.webhook_tokens)",
    },
    "basic": {"type": "http", "scheme": "basic", "description": "auth.webhook_username / auth.webhook_password"},
}
# An OpenAPI security requirement: alternatives, each a scheme name and its (empty) scopes.
Security = list[dict[str, list[str]]]


def _digest(value: str | bytes) -> bytes:
    return hashlib.sha256(value.encode() if isinstance(value, str) else value).digest()


@dataclass(frozen=True)
class Credentials:
    api: tuple[bytes, ...]
    webhook_tokens: tuple[bytes, ...]
    # digest of "username:password"
    webhook_basic: bytes | None

    @classmethod
    def from_settings(cls, auth: AuthSettings) -> Credentials:
        basic = None
        if auth.webhook_username is not None and auth.webhook_password is not None:
            basic = _digest(f"{auth.webhook_username}:{auth.webhook_password.get_secret_value()}")
        return cls(
            api=tuple(_digest(t.get_secret_value()) for t in auth.api_tokens),
            webhook_tokens=tuple(_digest(t.get_secret_value()) for t in auth.webhook_tokens),
            webhook_basic=basic,
        )

    def check_api(self, authorization: str | None) -> None:
        """Raises Unauthorized unless no API token is configured or a configured one is presented."""
        if self.api and not _any(self.api, _bearer(authorization)):
            raise Unauthorized("Bearer", "a valid bearer token is required (Authorization: Bearer ...)")

    def api_security(self) -> Security:
        """What check_api asks for, as OpenAPI says it (nothing when it asks nothing)."""
        return [{"bearer": []}] if self.api else []

    def webhook_security(self) -> Security:
        """What check_webhook asks for, as OpenAPI says it: its own credentials, else the API's."""
        if not self.webhook_tokens and self.webhook_basic is None:
            return self.api_security()
        alternatives: Security = []
        if self.webhook_tokens:
            alternatives.append({"bearer": []})
        if self.webhook_basic is not None:
            alternatives.append({"basic": []})
        return alternatives

    def check_webhook(self, authorization: str | None) -> None:
        """Webhook credentials when configured; else the API tokens; else open."""
        if not self.webhook_tokens and self.webhook_basic is None:
            if self.api and not _any(self.api, _bearer(authorization)):
                raise Unauthorized("Bearer", "the webhook needs a valid bearer token")
            return
        token = _bearer(authorization)
        basic = _basic(authorization)
        ok = _any(self.webhook_tokens, token)
        ok |= self.webhook_basic is not None and basic is not None and hmac.compare_digest(self.webhook_basic, basic)
        if not ok:
            scheme = "Basic" if self.webhook_basic is not None and not self.webhook_tokens else "Bearer"
            raise Unauthorized(scheme, "the webhook needs the credentials of Alertmanager's http_config")


def _any(digests: tuple[bytes, ...], presented: bytes | None) -> bool:
    """Compare with every configured digest, whatever matched first."""
    if presented is None:
        return False
    found = False
    for digest in digests:
        found |= hmac.compare_digest(digest, presented)
    return found


def _split(authorization: str | None) -> tuple[str, str] | None:
    if not authorization:
        return None
    scheme, _, value = authorization.strip().partition(" ")
    return scheme.lower(), value.strip()


def _bearer(authorization: str | None) -> bytes | None:
    parts = _split(authorization)
    if parts is None or parts[0] != "bearer" or not parts[1]:
        return None
    return _digest(parts[1])


def _basic(authorization: str | None) -> bytes | None:
    parts = _split(authorization)
    if parts is None or parts[0] != "basic":
        return None
    try:
        return _digest(base64.b64decode(parts[1], validate=True))
    except (binascii.Error, ValueError):
        return None


def public(path: str) -> bool:
    return path in PUBLIC_PATHS or path.startswith(PUBLIC_PREFIXES)


class RedactQueries(logging.Filter):
    """For `uvicorn.access`: the query string of any path but the public ones is replaced by
    REDACTED. diagnosd reads credentials from the Authorization header only, but a client that
    sends `?access_token=...` must not have it written to the log; any unknown path is treated
    as authenticated, so that a mistyped route does not leak either.
    """

    def filter(self, record: logging.LogRecord) -> bool:
        # uvicorn's access line: (client, method, path?query, http version, status).
        args = record.args
        if isinstance(args, tuple) and len(args) == 5 and isinstance(args[2], str):
            path, mark, _ = args[2].partition("?")
            if mark and not public(path):
                record.args = (*args[:2], f"{path}?{REDACTED}", *args[3:])
        return True
