"""API keys for OpenAI-compatible endpoints: read from an environment variable, never stored.

One rule for every command that calls a model (``trace tag``, ``trace run``): the key comes
from the named variable; a loopback server (vLLM on 127.0.0.1, ``trace serve``, the test
stubs) needs none, so a placeholder is used; anywhere else a missing key is an error that
names the variable, never the key.
"""

from __future__ import annotations

import ipaddress
import os
from urllib.parse import urlsplit, urlunsplit

from .errors import TraceError

__all__ = ["LOCAL_API_KEY", "api_key", "is_loopback", "public_url"]

LOCAL_API_KEY = "unused"  # loopback servers check no key, but the client wants one


def is_loopback(url: str) -> bool:
    host = urlsplit(url).hostname
    if not host:
        return False
    if host == "localhost":
        return True
    try:
        return ipaddress.ip_address(host).is_loopback
    except ValueError:
        return False


def public_url(url: str) -> str:
    """A base URL fit for a record: no user name or password, no query or fragment (where
    some servers take a key)."""
    parts = urlsplit(url)
    host = parts.hostname or ""
    if ":" in host:
        host = f"[{host}]"
    netloc = host + (f":{parts.port}" if parts.port else "")
    return urlunsplit((parts.scheme, netloc, parts.path, "", ""))


def api_key(variable: str, base_url: str) -> str:
    key = os.environ.get(variable, "")
    if key:
        return key
    if is_loopback(base_url):
        return LOCAL_API_KEY
    host = urlsplit(base_url).hostname or base_url
    raise TraceError(f"environment variable {variable} is not set; it must hold the API key for {host}")
