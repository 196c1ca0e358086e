"""Storage passwords never reach an output: every printable ASCII character, encoded and not,
in every place a password is written in a URL, through every output path.

The password of each case is unique tokens joined by the characters under test, so a leak of
any piece of it (the tail after a space, say) shows as a token in the output.
"""

import html
import json
import string
import uuid
from urllib.parse import quote

import optuna
import pytest

from tests.conftest import PNPOLY, tuner
from tests.test_bad_input import _database_text
from tuner.store import url as storage_url
from tuner.store.optuna_private import study_system_attrs
from tuner.store.storage import open_storage
from tuner.store.url import redact

PRINTABLE = string.printable[:95]  # digits, letters, punctuation and the space
HOST = "127.0.0.1:5432"


def _tokens(n: int) -> list[str]:
    tag = uuid.uuid4().hex[:6]
    return [f"Q{i:02d}x{tag}" for i in range(n)]


def _password(chars: str) -> tuple[str, list[str]]:
    """A password with every one of ``chars`` between unique tokens; (password, tokens)."""
    tokens = _tokens(len(chars) + 1)
    return "".join(t + c for t, c in zip(tokens, chars, strict=False)) + tokens[-1], tokens


#: (name, URL template with {} where the password goes as written, the characters it holds,
#: whether they are percent-encoded in the URL)
FORMS = [
    ("user:password raw", "postgresql+psycopg://postgres:{}@" + HOST + "/test", PRINTABLE.replace("@", ""), False),
    ("user:password encoded", "postgresql+psycopg://postgres:{}@" + HOST + "/test", PRINTABLE, True),
    ("empty user raw", "postgresql+psycopg://:{}@" + HOST + "/test", PRINTABLE.replace("@", ""), False),
    ("empty user encoded", "postgresql+psycopg://:{}@" + HOST + "/test", PRINTABLE, True),
    ("?password= raw", "postgresql+psycopg://postgres@" + HOST + "/test?password={}",
     PRINTABLE.translate(str.maketrans("", "", "@&+")), False),
    ("?password= encoded", "postgresql+psycopg://postgres@" + HOST + "/test?password={}", PRINTABLE, True),
    ("&password= after another key", "postgresql+psycopg://postgres@" + HOST + "/test?connect_timeout=5&password={}",
     PRINTABLE.translate(str.maketrans("", "", "@&+")), False),
    ("no port, user:password raw", "postgresql+psycopg://postgres:{}@127.0.0.1/test", PRINTABLE.replace("@", ""), False),
    ("plain postgresql scheme", "postgresql://postgres:{}@" + HOST + "/test", PRINTABLE.replace("@", ""), False),
]
#: one character at a time, raw and encoded, in the userinfo: where the old redaction stopped
SINGLE = [(f"user:password with {c!r} {'encoded' if enc else 'raw'}",
           "postgresql+psycopg://postgres:{}@" + HOST + "/test", c, enc)
          for c in PRINTABLE for enc in (False, True) if enc or c != "@"]


def _url(template: str, chars: str, encoded: bool) -> tuple[str, list[str]]:
    password, tokens = _password(chars)
    return template.format(quote(password, safe="") if encoded else password), tokens


#: the texts a URL ends up in: a sentence, quotes, brackets, JSON, repr, HTML
CONTEXTS = [
    lambda u: u,
    lambda u: f"cannot open storage {u}: OperationalError: connection refused; is the server up?",
    lambda u: f"storage '{u}'.",
    lambda u: f'--storage "{u}" (see --help)',
    lambda u: f"({u})",
    lambda u: json.dumps({"storage": u, "study": "s"}),
    lambda u: repr(u),
    lambda u: f"<td>{html.escape(u)}</td>",
    lambda u: f"first line\n  {u}\nlast line with an @ sign",
]


def _assert_hidden(text: str, tokens: list[str], where: str) -> None:
    leaked = [t for t in tokens if t in text]
    assert not leaked, f"{where}: {leaked} in {text[:300]!r}"


@pytest.mark.parametrize("name,template,chars,encoded", FORMS + SINGLE, ids=[f[0] for f in FORMS + SINGLE])
def test_redact_hides_every_character_in_every_context(name, template, chars, encoded, monkeypatch):
    """Both rules: a URL this process resolved (remembered) and a URL it never saw (context)."""
    url, tokens = _url(template, chars, encoded)
    for remembered in (False, True):
        monkeypatch.setattr(storage_url, "_known", set())
        if remembered:
            storage_url.remember(url)
        for i, context in enumerate(CONTEXTS):
            shown = redact(context(url))
            _assert_hidden(shown, tokens, f"context {i}, remembered={remembered}")
            assert "***" in shown
            assert "127.0.0.1" in shown and "psycopg" in shown or "postgresql://" in shown  # the rest stays readable


def test_redact_hides_the_spellings_sqlalchemy_renders(monkeypatch):
    """SQLAlchemy re-encodes a password when it renders a URL; that spelling is hidden too."""
    from sqlalchemy.engine import make_url

    password, tokens = _password(PRINTABLE)
    monkeypatch.setattr(storage_url, "_known", set())
    url = make_url("postgresql+psycopg://postgres@127.0.0.1/test").set(password=password)
    rendered = url.render_as_string(hide_password=False)
    storage_url.remember(rendered)
    for text in (rendered, password, quote(password), json.dumps(password), repr(password), html.escape(password)):
        _assert_hidden(redact(f"x {text} y"), tokens, text[:40])


def test_redact_keeps_text_without_passwords():
    for text in ("sqlite:///tuner.db", "postgresql+psycopg://postgres@127.0.0.1:5432/test", "runs/j.log",
                 "see https://optuna.org/ and mail me@example.org", "study s: 3 trials (ok=3)"):
        assert redact(text) == text
    once = redact("postgresql+psycopg://u:pw12345@h/db and a@b")
    assert "pw12345" not in once and redact(once) == once  # idempotent


def test_a_url_without_a_password_is_remembered_without_importing_sqlalchemy():
    """A run's SQLite URL is resolved on its main thread at start; SQLAlchemy's import (0.2-0.4 s)
    belongs to the thread that opens the storage meanwhile."""
    import subprocess
    import sys

    code = ("import sys\n"
            "from tuner.store.url import remember, redact\n"
            "remember('sqlite:///runs/t.db')\n"
            "print('sqlalchemy' in sys.modules)\n"
            "remember('postgresql+psycopg://u:secret12@h/db')\n"
            "print('sqlalchemy' in sys.modules, redact('a secret12'))\n")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True).stdout.splitlines()
    assert out == ["False", "True a ***"]


def test_a_short_password_is_hidden_where_it_is_a_password(monkeypatch):
    monkeypatch.setattr(storage_url, "_known", set())
    storage_url.remember("postgresql+psycopg://u:pw@h/db")
    assert redact("postgresql+psycopg://u:pw@h/db") == "postgresql+psycopg://u:***@h/db"
    assert redact("password=pw, pwd") == "password=***, pwd"  # not every "pw" of the text


# -- end to end: every command, its files and the database's rows ---------------------------------------------


#: the forms run end to end (each through every command): raw and encoded, userinfo and query
E2E = ["user:password raw", "user:password encoded", "empty user raw", "?password= raw"]


@pytest.mark.parametrize("form", E2E)
def test_password_never_printed_stored_or_reported(form, tmp_path, postgres_url, unique_name):
    """Every command that takes the URL, in text and --json, its files, --workers and their
    error lines, an error path, and every row of the database (study and trial attributes,
    optuna-dashboard notes)."""
    name_, template, chars, encoded = next(f for f in FORMS if f[0] == form)
    url, tokens = _url(template, chars, encoded)
    name = unique_name
    commands = [
        ("run", "--replay", PNPOLY, "--study-name", name, "--trials", 3, "--json"),
        ("run", "--replay", PNPOLY, "--study-name", name, "--trials", 4),
        ("run", "--replay", PNPOLY, "--study-name", name, "--trials", 7, "--workers", 2, "--json"),
        ("status",), ("status", "--json"),
        ("best", "--study", name, "--json", "--header", tmp_path / "best.h"),
        ("export", "--study", name, "-o", tmp_path / "trials.csv"),
        ("export", "--study", name, "-o", tmp_path / "cache.json"),
        ("report", "--study", name, "-o", tmp_path / "report"),
    ]
    outputs = []
    for args in commands:
        result = tuner(*args, "--storage", url)
        assert result.returncode == 0, (args, result.stderr[-2000:])
        outputs.append(result.stdout + result.stderr)
    failed = tuner("best", "--study", "no-such-study", "--storage", url)  # an error names the storage
    assert failed.returncode == 2
    outputs.append(failed.stdout + failed.stderr)
    # workers that cannot open the storage (no such database): their error lines, as the parent prints them
    missing_db = url.replace("/test", "/no_such_db_" + name, 1)
    workers = tuner("run", "--replay", PNPOLY, "--study-name", name, "--trials", 2, "--workers", 2,
                    "--storage", missing_db)
    assert workers.returncode != 0 and "***" in workers.stderr, workers.stderr[-2000:]
    outputs.append(workers.stdout + workers.stderr)
    text = "\n".join(outputs)
    written = "\n".join(p.read_text(errors="replace") for p in tmp_path.rglob("*") if p.is_file())
    study = optuna.load_study(study_name=name, storage=open_storage(postgres_url))
    stored = json.dumps([study.user_attrs, study_system_attrs(study),
                         [(t.user_attrs, t.system_attrs, t.params) for t in study.get_trials()]], default=str)
    rows = _database_text(postgres_url)
    assert name in rows and "***" in text and len(study.trials) >= 7
    _assert_hidden(text, tokens, "output")
    _assert_hidden(written, tokens, "files")
    _assert_hidden(stored, tokens, "study and trial attributes")
    _assert_hidden(rows, tokens, "database rows")
    optuna.delete_study(study_name=name, storage=open_storage(postgres_url))


def test_a_raw_at_sign_is_refused_without_showing_the_password(tmp_path):
    password, tokens = _password(PRINTABLE)  # holds a raw "@": the host would take its tail
    result = tuner("status", "--storage", f"postgresql+psycopg://postgres:{password}@{HOST}/test")
    assert result.returncode == 2 and len(result.stderr.strip().splitlines()) == 1, result.stderr
    assert "%40" in result.stderr
    _assert_hidden(result.stdout + result.stderr, tokens, "error line")


@pytest.mark.parametrize("after", ["/test", "#127.0.0.1/test", "?connect_timeout=3"], ids=["no host", "# for @", "a query"])
def test_a_password_whose_at_sign_was_left_out_is_hidden_in_one_line(after):
    """USER:PASSWORD without its @ reads as HOST:PORT, and a port that is no number fails to parse."""
    result = tuner("status", "--storage", f"postgresql+psycopg://postgres:Secret99{after}")
    assert result.returncode == 2 and len(result.stderr.strip().splitlines()) == 1, result.stderr
    assert "its port is not a number" in result.stderr and "Secret99" not in result.stdout + result.stderr


def test_a_port_is_no_password():
    from tuner.store.url import raw_password, spellings

    assert raw_password("postgresql+psycopg://postgres:5432/test") is None
    assert spellings("postgresql+psycopg://db:5432/test") == set()
