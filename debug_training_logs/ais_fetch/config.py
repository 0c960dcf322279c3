"""Where the AIS cluster is and how to talk to it: endpoint, AuthN token and client TLS, resolved like the ``ais`` CLI.

Resolution follows the Go CLI/API (``api/authn/loadtoken.go``, ``cmn/client.go:EnvToTLS``):

* endpoint: the ``endpoint`` argument, else ``AIS_ENDPOINT``, else ``cluster.url`` of the ais CLI config
  (``~/.config/ais/cli/cli.json``, under ``$XDG_CONFIG_HOME`` when set);
* token: ``AIS_AUTHN_TOKEN`` (raw JWT), else the file named by ``AIS_AUTHN_TOKEN_FILE``, else
  ``~/.config/ais/cli/auth.token``; a token file is JSON ``{"token": "<jwt>"}`` (a bare token line is accepted too);
* the token is sent only to an endpoint the user configured out of band: ``AIS_ENDPOINT``, the ais CLI config's
  ``cluster.url``, or one listed in ``DEBUG_TRAINING_LOGS_AIS_TOKEN_ENDPOINTS`` (comma-separated URLs: the explicit
  permission for other endpoints). An ``endpoint`` argument naming any other host:port gets no token, whether or
  not ``AIS_ENDPOINT`` is set: over MCP the argument may come from a model that read attacker-written log text;
* TLS: ``AIS_SKIP_VERIFY_CRT`` (y/yes/on/true/1/t), ``AIS_CLIENT_CA`` (PEM bundle added to the system CAs),
  ``AIS_CRT`` + ``AIS_CRT_KEY`` (client certificate for mTLS). ``AIS_SERVER_CRT`` is the AuthN *server*'s certificate,
  not a client setting, and is not read.

The token is a secret. It lives only inside :class:`Secret`, whose ``repr``/``str`` never show it, and every text that
leaves this package (messages, reasons, results) passes through :meth:`AisConfig.scrub`, which removes the token and
the endpoint's ``user:password@`` part. Nothing here logs, prints or raises with the token in it.
"""

from __future__ import annotations

import json
import os
import re
import ssl
from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path
from urllib.parse import SplitResult, urlsplit

from debug_training_logs.errors import UserInputError

ENV_ENDPOINT = "AIS_ENDPOINT"
ENV_TOKEN_ENDPOINTS = "DEBUG_TRAINING_LOGS_AIS_TOKEN_ENDPOINTS"
"""Comma-separated endpoint URLs the user allows the token to go to besides AIS_ENDPOINT and the ais CLI config."""
CLI_CONFIG = "ais/cli/cli.json"
"""The ais CLI config below the config home (``$XDG_CONFIG_HOME`` or ``~/.config``); its ``cluster.url`` is an
endpoint the user configured."""
ENV_TOKEN = "AIS_AUTHN_TOKEN"
ENV_TOKEN_FILE = "AIS_AUTHN_TOKEN_FILE"
ENV_SKIP_VERIFY = "AIS_SKIP_VERIFY_CRT"
ENV_CLIENT_CA = "AIS_CLIENT_CA"
ENV_CRT = "AIS_CRT"
ENV_CRT_KEY = "AIS_CRT_KEY"
DEFAULT_TOKEN_FILE = "~/.config/ais/cli/auth.token"

TOKEN_SOURCES_TEXT = f"{ENV_TOKEN}, else the file named by {ENV_TOKEN_FILE}, else {DEFAULT_TOKEN_FILE}"
"""How the token is found, for messages (names only, never values)."""

_TRUE = frozenset({"1", "t", "true", "y", "yes", "on"})
_FALSE = frozenset({"", "0", "f", "false", "n", "no", "off"})
_MAX_TOKEN_FILE_BYTES = 1 << 20
# RFC 7230 field-value characters we allow in a bearer token: visible ASCII, no spaces or control characters.
_TOKEN_OK = re.compile(r"[\x21-\x7e]+")
REDACTED = "<redacted>"


class Secret:
    """A string that never shows itself: ``repr``, ``str`` and formatting print a placeholder."""

    __slots__ = ("_value",)

    def __init__(self, value: str) -> None:
        self._value = value

    def reveal(self) -> str:
        """The real value, for the one place that needs it (the ``Authorization`` header)."""
        return self._value

    def __repr__(self) -> str:
        return f"Secret({REDACTED!r})"

    __str__ = __repr__

    def __format__(self, spec: str) -> str:
        return repr(self)

    def __reduce__(self) -> tuple[object, ...]:
        raise TypeError("a Secret cannot be pickled")


def parse_bool(value: str | None) -> bool | None:
    """Go ``cos.ParseBool``-style truth: ``True``/``False``, or ``None`` when the text is neither."""
    if value is None:
        return False
    v = value.strip().lower()
    if v in _TRUE:
        return True
    if v in _FALSE:
        return False
    return None


@dataclass(frozen=True)
class Endpoint:
    """The cluster's URL split into what a connection needs; ``display`` is safe to show (no user:password)."""

    scheme: str
    """``http`` or ``https``."""
    host: str
    port: int
    base_path: str
    """Path prefix before ``/v1`` (empty for a bare host:port; set when AIS sits behind an ingress path)."""
    display: str
    """``scheme://host:port/base`` without userinfo, query or fragment."""
    userinfo: str | None = field(default=None, repr=False)
    """The ``user:password`` part if the URL had one; never sent (AIS uses bearer tokens) and never shown."""


def parse_endpoint(url: str) -> Endpoint:
    """Split and check an AIS endpoint URL such as ``http://10.0.0.5:51080`` or ``https://ais.example.com``."""
    text = url.strip()
    try:
        parts: SplitResult = urlsplit(text)
        port = parts.port
    except ValueError:
        raise UserInputError(
            f"The AIS endpoint {_display_raw(text)!r} is not a valid URL. "
            "Pass it like http://HOST:PORT or https://HOST:PORT (the same value as AIS_ENDPOINT for the ais CLI)."
        ) from None
    if parts.scheme not in ("http", "https") or not parts.hostname:
        raise UserInputError(
            f"The AIS endpoint {_display_raw(text)!r} needs a scheme and a host, like http://HOST:PORT or "
            "https://HOST:PORT (the same value as AIS_ENDPOINT for the ais CLI)."
        )
    host = parts.hostname
    if port is None:
        port = 443 if parts.scheme == "https" else 80
    base = parts.path.rstrip("/")
    netloc_host = f"[{host}]" if ":" in host else host
    display = f"{parts.scheme}://{netloc_host}:{port}{base}"
    userinfo = parts.netloc.rpartition("@")[0] if "@" in parts.netloc else None
    return Endpoint(parts.scheme, host, port, base, display, userinfo)


def _display_raw(text: str) -> str:
    """A user-given URL with any ``user:password@`` removed, for error messages."""
    return re.sub(r"(?<=//)[^/@]*@", "", text)[:200]


@dataclass(frozen=True)
class AisConfig:
    """Everything needed to reach the cluster. Safe to ``repr``: the token is a :class:`Secret`."""

    endpoint: Endpoint
    endpoint_source: str
    """``argument`` or ``AIS_ENDPOINT``."""
    token: Secret | None
    token_source: str
    """Which variable or file the token came from (its name, never its value), or ``none``."""
    ssl_context: ssl.SSLContext | None = field(repr=False)
    """For https endpoints; ``None`` for http."""
    tls_description: str
    """What TLS does, in words, for the result (``system CAs + AIS_CLIENT_CA=...``, ``verification skipped``...)."""
    warnings: tuple[str, ...] = ()

    def scrub(self, text: str) -> str:
        """``text`` with the token and the endpoint's userinfo removed (every outgoing message goes through here)."""
        if self.token is not None:
            tok = self.token.reveal()
            if tok:
                text = text.replace(tok, REDACTED)
        if self.endpoint.userinfo:
            text = text.replace(self.endpoint.userinfo + "@", "").replace(self.endpoint.userinfo, REDACTED)
        return text

    @property
    def auth_description(self) -> str:
        """Where the token came from, for the result: ``token from AIS_AUTHN_TOKEN`` or ``no token``."""
        if self.token is not None:
            return f"bearer token from {self.token_source}"
        return "no token" if self.token_source == "none" else f"no token: {self.token_source}"


def resolve_config(
    endpoint: str | None = None,
    *,
    env: Mapping[str, str] | None = None,
    home: Path | None = None,
) -> AisConfig:
    """Resolve the endpoint, token and TLS settings from the argument and the environment (see the module docstring).

    ``env`` and ``home`` default to ``os.environ`` and the user's home directory (tests pass their own).
    Raises :class:`UserInputError` for a missing endpoint, unreadable token file or bad TLS files.
    """
    env = os.environ if env is None else env
    warnings: list[str] = []
    cli_url = _cli_config_url(env, home, warnings)
    if endpoint and endpoint.strip():
        ep, ep_source = parse_endpoint(endpoint), "argument"
    elif env.get(ENV_ENDPOINT, "").strip():
        ep, ep_source = parse_endpoint(env[ENV_ENDPOINT]), ENV_ENDPOINT
    elif cli_url is not None:
        ep, ep_source = cli_url, "ais CLI config (cluster.url)"
    else:
        raise UserInputError(
            "No AIS endpoint: pass --endpoint http://HOST:PORT on the command line (endpoint='http://HOST:PORT' as a "
            f"tool argument; any proxy of the cluster), or set {ENV_ENDPOINT}."
        )
    if ep.userinfo:
        warnings.append(
            "The endpoint's user:password part was ignored (AIS authenticates with a bearer token: "
            f"{TOKEN_SOURCES_TEXT})."
        )
    token, token_source = _resolve_token(env, home)
    if token is not None and ep_source == "argument":
        trusted = _trusted_endpoints(env, cli_url, warnings)
        if _key(ep) not in {_key(t) for t in trusted}:
            # The argument may come from a model reading untrusted log text: never hand the user's token to a host
            # the user did not name themselves, out of band.
            shown = ", ".join(t.display for t in trusted) or "none configured"
            warnings.append(
                f"The AIS token was not sent: the endpoint argument ({ep.display}) is not an endpoint you configured "
                f"({shown}). To send it there, set {ENV_ENDPOINT} to it or add it to {ENV_TOKEN_ENDPOINTS} "
                "(comma-separated URLs) in the environment of this program."
            )
            token, token_source = None, "none (withheld from an endpoint that was not configured out of band)"
    ctx, tls_text = _resolve_tls(ep, env, warnings)
    return AisConfig(ep, ep_source, token, token_source, ctx, tls_text, tuple(warnings))


def _key(ep: Endpoint) -> tuple[str, str, int]:
    return ep.scheme, ep.host.lower(), ep.port


def _cli_config_url(env: Mapping[str, str], home: Path | None, warnings: list[str]) -> Endpoint | None:
    """``cluster.url`` of the ais CLI config, or None (absent, unreadable or not a URL: said in ``warnings``)."""
    xdg = env.get("XDG_CONFIG_HOME", "").strip()
    if xdg:
        path = Path(xdg) / CLI_CONFIG
    else:
        path = (home if home is not None else Path("~").expanduser()) / ".config" / CLI_CONFIG
    try:
        if not path.is_file() or path.stat().st_size > _MAX_TOKEN_FILE_BYTES:
            return None
        url = json.loads(path.read_text(encoding="utf-8")).get("cluster", {}).get("url")
    except (OSError, ValueError, AttributeError):
        warnings.append(f"The ais CLI config {path} could not be read as JSON; its cluster.url was not used.")
        return None
    if not isinstance(url, str) or not url.strip():
        return None
    try:
        return parse_endpoint(url)
    except UserInputError:
        warnings.append(f"The ais CLI config {path} has a cluster.url that is not a URL; it was not used.")
        return None


def _trusted_endpoints(env: Mapping[str, str], cli_url: Endpoint | None, warnings: list[str]) -> list[Endpoint]:
    """The endpoints the token may go to: AIS_ENDPOINT, the ais CLI config's cluster.url, and the allow-list."""
    out: list[Endpoint] = [cli_url] if cli_url is not None else []
    if env.get(ENV_ENDPOINT, "").strip():
        out.append(parse_endpoint(env[ENV_ENDPOINT]))
    for item in re.split(r"[,\s]+", env.get(ENV_TOKEN_ENDPOINTS, "")):
        if not item:
            continue
        try:
            out.append(parse_endpoint(item))
        except UserInputError:
            warnings.append(f"{ENV_TOKEN_ENDPOINTS} lists {_display_raw(item)!r}, which is not a URL; ignored.")
    return out


def _resolve_token(env: Mapping[str, str], home: Path | None) -> tuple[Secret | None, str]:
    raw = env.get(ENV_TOKEN, "").strip()
    if raw:
        return _checked_token(raw, ENV_TOKEN), ENV_TOKEN
    file_env = env.get(ENV_TOKEN_FILE, "").strip()
    if file_env:
        path = Path(file_env).expanduser()
        tok = _read_token_file(path, f"{ENV_TOKEN_FILE}={file_env}", required=True)
        return (tok, ENV_TOKEN_FILE) if tok is not None else (None, "none")
    default = (home / ".config/ais/cli/auth.token") if home is not None else Path(DEFAULT_TOKEN_FILE).expanduser()
    tok = _read_token_file(default, str(default), required=False)
    return (tok, DEFAULT_TOKEN_FILE) if tok is not None else (None, "none")


def _read_token_file(path: Path, label: str, *, required: bool) -> Secret | None:
    """The token from a CLI token file, or ``None`` when an optional file is absent. Messages name the file only."""
    try:
        with open(path, "rb") as fh:
            data = fh.read(_MAX_TOKEN_FILE_BYTES + 1)
    except FileNotFoundError:
        if not required:
            return None
        raise UserInputError(
            f"The token file {label} does not exist. Point {ENV_TOKEN_FILE} at the file 'ais auth login' wrote, "
            f"or set {ENV_TOKEN} instead."
        ) from None
    except OSError as exc:
        raise UserInputError(
            f"The token file {label} cannot be read ({exc.strerror or type(exc).__name__}). "
            f"Fix its permissions or set {ENV_TOKEN} instead."
        ) from None
    if len(data) > _MAX_TOKEN_FILE_BYTES:
        raise UserInputError(f"The token file {label} is larger than 1 MiB; it is not an AIS token file.")
    text = data.decode("utf-8", errors="replace").strip()
    if not text:
        if required:
            raise UserInputError(
                f"The token file {label} is empty. Log in again ('ais auth login') or set {ENV_TOKEN}."
            )
        return None
    value: object = text
    if text.startswith("{"):
        try:
            value = json.loads(text).get("token")
        except (ValueError, AttributeError):
            value = None
        if not isinstance(value, str) or not value.strip():
            raise UserInputError(
                f'The token file {label} is not JSON of the form {{"token": "..."}} with a non-empty token. '
                f"Log in again ('ais auth login') or set {ENV_TOKEN}."
            )
    assert isinstance(value, str)
    return _checked_token(value.strip(), label)


def _checked_token(value: str, label: str) -> Secret:
    # A CR/LF or non-ASCII character would make http.client raise with the header value (the token) in the message.
    if not _TOKEN_OK.fullmatch(value):
        raise UserInputError(
            f"The token from {label} contains spaces, control or non-ASCII characters and cannot be sent in an HTTP "
            "header. Copy the token again (without quotes or line breaks)."
        )
    return Secret(value)


def _resolve_tls(ep: Endpoint, env: Mapping[str, str], warnings: list[str]) -> tuple[ssl.SSLContext | None, str]:
    skip_raw = env.get(ENV_SKIP_VERIFY)
    skip = parse_bool(skip_raw)
    if skip is None:
        warnings.append(
            f"{ENV_SKIP_VERIFY}={skip_raw!r} is not a boolean (y/yes/on/true/1 or n/no/off/false/0); "
            "certificates are verified."
        )
        skip = False
    ca = env.get(ENV_CLIENT_CA, "").strip()
    crt, key = env.get(ENV_CRT, "").strip(), env.get(ENV_CRT_KEY, "").strip()
    if bool(crt) != bool(key):
        warnings.append(f"Only one of {ENV_CRT} and {ENV_CRT_KEY} is set; no client certificate is sent (set both).")
        crt = key = ""
    if ep.scheme != "https":
        if skip or ca or crt:
            warnings.append("TLS variables are set but the endpoint is http://, so they are not used.")
        return None, "none (http)"
    ctx = ssl.create_default_context()
    parts: list[str] = []
    if skip:
        ctx.check_hostname = False
        ctx.verify_mode = ssl.CERT_NONE
        parts.append(f"certificate verification skipped ({ENV_SKIP_VERIFY})")
    else:
        parts.append("verified against the system CAs")
        if ca:
            try:
                ctx.load_verify_locations(cafile=str(Path(ca).expanduser()))
            except (OSError, ssl.SSLError) as exc:
                raise UserInputError(
                    f"{ENV_CLIENT_CA}={ca} cannot be loaded as a PEM CA bundle ({_exc_reason(exc)}). "
                    "Point it at the cluster's CA certificate file."
                ) from None
            parts.append(f"+ {ENV_CLIENT_CA}={ca}")
    if crt:
        try:
            ctx.load_cert_chain(str(Path(crt).expanduser()), str(Path(key).expanduser()))
        except (OSError, ssl.SSLError) as exc:
            raise UserInputError(
                f"The client certificate {ENV_CRT}={crt} / {ENV_CRT_KEY}={key} cannot be loaded ({_exc_reason(exc)}). "
                "Point both at PEM files, or unset them if the cluster does not require mTLS."
            ) from None
        parts.append(f"client certificate from {ENV_CRT}/{ENV_CRT_KEY}")
    return ctx, ", ".join(parts)


def _exc_reason(exc: BaseException) -> str:
    if isinstance(exc, OSError) and exc.strerror:
        return exc.strerror
    return str(exc)[:200] or type(exc).__name__
