"""URLs as diagnosd shows them: `redact(url)` hides the credentials a URL may carry.

Every message, note, log line and output that names a Prometheus (or any other) URL goes through
`redact`; `scrub` does the same for a text that may quote the raw URL or its password.
"""

from __future__ import annotations

import re
from urllib.parse import unquote

HIDDEN = "***"

# scheme://authority: the userinfo is whatever precedes the authority's last '@'.
_AUTHORITY = re.compile(r"^(?P<scheme>[A-Za-z][A-Za-z0-9+.-]*://)(?P<authority>[^/?#]*)")


def redact(url: str) -> str:
    """`url` with any `user:password@` replaced by `***@`; a URL without credentials is unchanged."""
    match = _AUTHORITY.match(url)
    if match is None or "@" not in match["authority"]:
        return url
    host = match["authority"].rpartition("@")[2]
    return f"{match['scheme']}{HIDDEN}@{host}{url[match.end() :]}"


def secrets(url: str) -> list[str]:
    """The userinfo and password a URL carries, raw and percent-decoded (longest first)."""
    match = _AUTHORITY.match(url)
    if match is None or "@" not in match["authority"]:
        return []
    userinfo = match["authority"].rpartition("@")[0]
    parts = {userinfo, userinfo.partition(":")[2]}
    found = {text for part in parts for text in (part, unquote(part)) if text}
    return sorted(found, key=len, reverse=True)


def scrub(text: str, url: str) -> str:
    """`text` with `url` redacted wherever it appears, and its password hidden."""
    if not secrets(url):
        return text
    text = text.replace(url, redact(url)).replace(url.rstrip("/"), redact(url.rstrip("/")))
    for secret in secrets(url):
        text = text.replace(secret, HIDDEN)
    return text
