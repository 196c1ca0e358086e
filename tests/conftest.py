import os
import subprocess
import sys
import uuid
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
DATA = ROOT / "tests" / "data"
KERNEL_TUNER_CACHES = DATA / "kernel_tuner"  # recorded Kernel Tuner spaces (MIT, see LICENSE there)
PNPOLY = KERNEL_TUNER_CACHES / "pnpoly_RTX_3090.json.gz"
FAKE_BACKEND = f"{ROOT / 'tests' / 'fake_backend.py'}:FakeBackend"
POSTGRES_URL = os.environ.get("TUNER_TEST_POSTGRES", "postgresql+psycopg://postgres@127.0.0.1:5432/test")


def tuner(*args, env=None, cwd=None, timeout=300):
    """Run the real CLI in a subprocess; returns CompletedProcess (text)."""
    full_env = {**os.environ, **(env or {})}
    return subprocess.run([sys.executable, "-m", "tuner", *map(str, args)], capture_output=True, text=True,
                          env=full_env, cwd=cwd or ROOT, timeout=timeout)


@pytest.fixture
def cache_dir(tmp_path):
    return tmp_path / "cache"


@pytest.fixture
def postgres_url():
    """The local server; a test that needs it fails (never skips) when it is down."""
    import sqlalchemy

    engine = sqlalchemy.create_engine(POSTGRES_URL)
    try:
        with engine.connect() as conn:
            conn.execute(sqlalchemy.text("select 1"))
    except Exception as exc:
        pytest.fail(f"PostgreSQL at {POSTGRES_URL} is not reachable: {exc}")
    finally:
        engine.dispose()
    return POSTGRES_URL


@pytest.fixture
def unique_name():
    return f"t_{uuid.uuid4().hex[:10]}"


@pytest.fixture
def pnpoly():
    if not PNPOLY.is_file():
        pytest.fail(f"test dataset missing: {PNPOLY}")
    return PNPOLY


def planted_study(folder: Path, axes: dict, stored: dict) -> tuple:
    """A SQLite study of example_sgemm configs ``stored`` ({(BLOCK, THREAD_TILE): ratio}) over ``axes``, each
    a finished trial of that ratio, and its space on a 64-cube problem: (url, study, space)."""
    import optuna
    from optuna.distributions import CategoricalDistribution

    from tuner.contract.kernel_spec import load_spec
    from tuner.search.space import Space

    url = f"sqlite:///{folder / 's.db'}"
    study = optuna.create_study(study_name="s", storage=url)
    dists = {name: CategoricalDistribution(values) for name, values in axes.items()}
    for (block, tile), ratio in stored.items():
        study.add_trial(optuna.trial.create_trial(params={"BLOCK": block, "THREAD_TILE": tile}, distributions=dists,
                                                  value=ratio, user_attrs={"status": "ok", "ratio": ratio}))
    space = Space(load_spec(ROOT / "kernel" / "example_sgemm.py"), {"M_DIM": 64, "N_DIM": 64, "K_DIM": 64}, axes,
                  list(axes), [])
    return url, study, space
