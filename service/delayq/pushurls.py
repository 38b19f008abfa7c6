"""A push target's URL in the forms fit to show (pure): ``safe_url`` for logs,
events, Stats, statuses and the CLI, ``origin`` for the metric label ``target``.
Neither ever holds the URL's userinfo (credentials), query or fragment. A leaf:
the server and the client (which may load no engine code) show URLs alike."""

from __future__ import annotations

from urllib.parse import SplitResult, urlsplit

__all__ = ["DEFAULT_PORTS", "origin", "safe_url"]

DEFAULT_PORTS = {"http": 80, "https": 443}


def _host(parts: SplitResult) -> str:
    host = parts.hostname or ""
    return f"[{host}]" if ":" in host else host


def _port(parts: SplitResult) -> int | None:
    try:
        return parts.port
    except ValueError:  # out of range: shown without
        return None


def safe_url(url: str) -> str:
    """``scheme://host[:port]/path``: no userinfo, query or fragment."""
    parts = urlsplit(url)
    port = _port(parts)
    return f"{parts.scheme}://{_host(parts)}{f':{port}' if port else ''}{parts.path or '/'}"


def origin(url: str) -> str:
    """``scheme://host:port``, the scheme's port filled in."""
    parts = urlsplit(url)
    port = _port(parts) or DEFAULT_PORTS.get(parts.scheme, 0)
    return f"{parts.scheme}://{_host(parts)}:{port}"
