"""A storage URL as text: its password hidden in everything shown, its SQLite file found.

One redaction for the project (:func:`redact`): everything printed, written to a file or
stored on a study goes through it. It works in two ways, because a password may hold any
character, unencoded (a space, a quote, ``<``, ``/``, ``#``, ...), and free text gives no
reliable end to a URL:

- every URL this process resolves (:func:`remember`, called by
  :func:`tuner.store.storage.resolve_url`) lends its password, in every spelling it may be shown in
  (as written, decoded, percent-encoded, as SQLAlchemy renders it, JSON- or repr-escaped),
  and each is replaced wherever it appears;
- any other ``scheme://user:PASSWORD@`` in the text loses everything from the user's colon to
  the last ``@`` of its URL, as SQLAlchemy's ``make_url`` would read it, and ``password=...``
  its value.
"""

from __future__ import annotations

import html
import json
import re
import threading
from pathlib import Path
from urllib.parse import quote, quote_plus

HIDDEN = "***"
#: a secret shorter than this is hidden where it stands as a password (``user:SECRET@``,
#: ``password=SECRET``), not everywhere: ``pw`` would blank every "pw" of the output
_ANYWHERE_MIN = 4

_SCHEME = re.compile(r"[A-Za-z][A-Za-z0-9+.\-]*://")
#: ``password=...`` in a URL's query string or a libpq key/value connection string
_PASSWORD_PARAM = re.compile(r"(?i)(\bpassword\s*=\s*)('(?:[^'\\]|\\.)*'|[^&\s'\",;]+)")

#: the ``&`` that ends a query value (not one that starts an HTML entity: the text may be a page)
_QUERY_SEP = re.compile(r"&(?!(?:[A-Za-z]+|#[0-9]+|#x[0-9A-Fa-f]+);)")

_known: set[str] = set()  # every spelling of the passwords of URLs this process resolved
_lock = threading.Lock()


def raw_password(url: str) -> str | None:
    """The password exactly as written in ``url``: from the user's colon to the last ``@``
    before the host (a raw ``@`` inside it would otherwise leave its tail in the host). Without
    an ``@``, what follows ``HOST:`` is a port, or a password whose ``@`` was left out: anything
    but digits there counts as a password."""
    match = _SCHEME.match(url)
    if match is None:
        return None
    rest = url[match.end():]
    user_end = next((i for i, c in enumerate(rest) if c in ":/@"), len(rest))
    if user_end >= len(rest) or rest[user_end] != ":":
        return None
    at = rest.rfind("@")
    if at < user_end:
        port = rest[user_end + 1:next((i for i, c in enumerate(rest) if c in "/?" and i > user_end), len(rest))]
        return port if port and not port.isdigit() else None
    return rest[user_end + 1:at]


def spellings(url: str) -> set[str]:
    """Every way ``url``'s password may be shown: as written, decoded by SQLAlchemy (userinfo
    or ``?password=``), percent-encoded, rendered by SQLAlchemy, JSON-, repr- and HTML-escaped."""
    raw = raw_password(url)
    if "@" not in url and "password" not in url.lower() and not raw:
        return set()  # no password to spell (a SQLite file): SQLAlchemy need not be imported for it
    found: set[str] = set()
    if raw:
        found.add(raw)
    for match in _PASSWORD_PARAM.finditer(url):
        found.add(match.group(2).strip("'"))
    try:
        from sqlalchemy.engine import make_url

        parsed = make_url(url)
    except Exception:  # not a SQLAlchemy URL: the spellings as written
        parsed = None
    if parsed is not None:
        for secret in (parsed.password, parsed.query.get("password")):
            for one in ([secret] if isinstance(secret, str) else list(secret or ())):
                found.add(one)
        if parsed.password is not None:  # as render_as_string(hide_password=False) writes it
            rendered = parsed.render_as_string(hide_password=False)
            inner = raw_password(rendered)
            if inner:
                found.add(inner)
    # a URL read the wrong way (an unencoded "?", "#" or "/") shows pieces of it in errors
    visible = url.replace(raw, "") if raw else url
    found.update(piece for secret in list(found) for piece in re.split(r"[^A-Za-z0-9]+", secret)
                 if len(piece) >= _ANYWHERE_MIN and piece not in visible)
    out: set[str] = set()
    for secret in found:
        if not secret or secret == HIDDEN:
            continue
        out.update({secret, quote(secret, safe=""), quote(secret), quote_plus(secret, safe=""), json.dumps(secret)[1:-1],
                    repr(secret)[1:-1], html.escape(secret), secret.replace("\\", "\\\\").replace("'", "\\'")})
    return {s for s in out if s}


def remember(url: str) -> None:
    """Hide ``url``'s password, in every spelling, from all later :func:`redact` calls."""
    if "://" not in url:
        return
    secrets = spellings(url)
    with _lock:
        _known.update(secrets)


def redact(text: object) -> str:
    """``text`` with every storage password hidden (``user:***@host``, ``password=***``)."""
    text = str(text)
    if "://" in text or "password" in text.lower():
        text = _redact_urls(text)
    with _lock:
        known = sorted(_known, key=len, reverse=True)  # the longest spelling first: it holds the shorter
    for secret in known:
        if secret in text:
            text = _hide(text, secret)
    return text


def _hide(text: str, secret: str) -> str:
    if len(secret) >= _ANYWHERE_MIN:
        return text.replace(secret, HIDDEN)
    # short: only where it stands as a password
    text = text.replace(f":{secret}@", f":{HIDDEN}@")
    return re.sub(r"(?i)(\bpassword\s*=\s*)" + re.escape(secret) + r"(?=$|[&\s'\",;])", r"\1" + HIDDEN, text)


def _redact_urls(text: str) -> str:
    """The context rule: ``scheme://user:...@`` loses its password, up to the last ``@``
    before the line's end or the next URL; a URL's ``?password=`` its value, up to the next
    ``&`` or the line's end; any other ``password=`` (libpq's key/value form) up to a space."""
    spans: list[tuple[int, int]] = []
    for match in _SCHEME.finditer(text):
        start = match.end()
        if spans and start < spans[-1][1]:
            continue
        line_end = text.find("\n", start)
        line_end = len(text) if line_end < 0 else line_end
        first_at = text.find("@", start, line_end)
        following = _SCHEME.search(text, first_at if first_at >= 0 else start)  # not one inside the password
        end = min(line_end, following.start() if following else len(text))
        segment = text[start:end]
        user_end = next((i for i, c in enumerate(segment) if c in ":/@"), len(segment))
        at = segment.rfind("@")
        after = start
        if user_end < len(segment) and segment[user_end] == ":" and at > user_end:
            if not segment.startswith(HIDDEN + "@", user_end + 1):  # not already hidden
                remember(match.group(0) + segment[:at + 1] + "h")  # its other spellings, anywhere in the text
                spans.append((start + user_end + 1, start + at))
            after = start + at
        for param in re.finditer(r"(?i)[?&;]password=", text[after:end]):
            value_start = after + param.end()
            amp = _QUERY_SEP.search(text, value_start, end)
            value_end = amp.start() if amp else end
            if text[value_start:value_end] != HIDDEN:
                remember(f"x://h/?password={text[value_start:value_end]}")
                spans.append((value_start, value_end))
    out, pos = [], 0
    for span_start, span_end in sorted(spans):
        if span_start < pos:
            continue
        out += [text[pos:span_start], HIDDEN]
        pos = span_end
    out.append(text[pos:])
    return _PASSWORD_PARAM.sub(lambda m: m.group(1) + HIDDEN if m.group(2) != HIDDEN else m.group(0), "".join(out))


def hidden(url: str) -> str:
    """``url`` with its password hidden, for showing (:func:`redact` of one URL)."""
    remember(url)
    return redact(url)


# -- SQLite URLs ---------------------------------------------------------------------------------

#: query keys SQLite itself reads from a ``file:`` URI (the rest are SQLAlchemy's or the driver's)
SQLITE_URI_KEYS = ("mode", "cache", "immutable", "nolock", "vfs", "psow", "modeof")


def sqlite_file(url: str) -> Path | None:
    """The database file a ``sqlite://`` URL names (query parameters such as ``?mode=ro`` are
    not part of it; a ``file:`` URI's path is), else None (no file: in memory, or not SQLite)."""
    from sqlalchemy.engine import make_url

    if not url.startswith("sqlite"):  # a journal file's path, another database's URL: not parsed here
        return None
    parsed = make_url(url)
    if not parsed.drivername.startswith("sqlite"):
        return None
    database = parsed.database or ""
    if database.startswith("file:"):  # a SQLite URI (with uri=true): its path, less its own query
        database = database[len("file:"):].split("?", 1)[0]
        if database.startswith("///"):
            database = database[2:]
    if not database or database.startswith(":memory:"):
        return None
    return Path(database)


def _uri(parsed) -> bool:
    return str(parsed.query.get("uri", "")).lower() in ("true", "1")


def sqlite_url(url: str) -> str:
    """``url`` with SQLite's own query keys (``?mode=ro``) made effective: SQLAlchemy passes them
    to SQLite only in a ``file:`` URI with ``uri=true``; otherwise it drops them with a warning."""
    from sqlalchemy.engine import make_url

    if not url.startswith("sqlite"):  # a journal file's path, another database's URL: as it is
        return url
    parsed = make_url(url)
    if not parsed.drivername.startswith("sqlite") or _uri(parsed):
        return url
    if not any(key in parsed.query for key in SQLITE_URI_KEYS) or not parsed.database:
        return url
    return parsed.set(database=f"file:{parsed.database}",
                      query={**parsed.query, "uri": "true"}).render_as_string(hide_password=False)


def optuna_template(url: str) -> str:
    """``url`` as Optuna's RDBStorage takes it: a template it fills with ``str.format``
    (``{SCHEMA_VERSION}``), so a brace of a password must be doubled."""
    return url.replace("{", "{{").replace("}", "}}").replace("{{SCHEMA_VERSION}}", "{SCHEMA_VERSION}")
