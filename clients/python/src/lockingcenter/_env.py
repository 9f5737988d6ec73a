"""TLS contexts and the settings that lc-cli also reads from the
environment."""

from __future__ import annotations

import os
import ssl
from collections.abc import Mapping
from typing import Any


def tls_context(
    ca_file: str | None = None, cert_file: str | None = None, key_file: str | None = None
) -> ssl.SSLContext:
    """A client TLS context: the server's certificate checked against
    ``ca_file`` (PEM; the system's roots when None), and a client
    certificate with its key when the server asks for one (mutual TLS).
    TLS 1.2 at least, as lcd."""
    ctx = ssl.create_default_context(cafile=ca_file)
    ctx.minimum_version = ssl.TLSVersion.TLSv1_2
    if cert_file:
        ctx.load_cert_chain(cert_file, key_file or None)
    return ctx


def env_options(environ: Mapping[str, str] | None = None) -> dict[str, Any]:
    """Session options from the environment, under lc-cli's names:
    ``LC_TOKEN`` gives ``credential``; ``LC_CA_FILE``, ``LC_CERT_FILE`` and
    ``LC_KEY_FILE`` (any of them), or ``LC_TLS=true``, give ``ssl``, a
    context made by tls_context. Pass the result on:
    ``Session(address, **env_options())``. Unset variables add nothing."""
    env = os.environ if environ is None else environ
    out: dict[str, Any] = {}
    if env.get("LC_TOKEN"):
        out["credential"] = env["LC_TOKEN"]
    ca, cert, key = env.get("LC_CA_FILE") or None, env.get("LC_CERT_FILE") or None, env.get("LC_KEY_FILE") or None
    if ca or cert or key or env.get("LC_TLS", "").lower() in ("1", "true", "yes"):
        out["ssl"] = tls_context(ca, cert, key)
    return out


def env_address(environ: Mapping[str, str] | None = None) -> str:
    """``LC_ADDRESS``, as lc-cli reads it, else "localhost:22119"."""
    env = os.environ if environ is None else environ
    return env.get("LC_ADDRESS") or "localhost:22119"
