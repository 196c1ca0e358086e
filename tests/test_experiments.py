"""The experiment scripts in docs/experiments import the product: each must still import after a
change to it (a smoke test: their runs need recordings or a GPU, their imports do not)."""

import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
SCRIPTS = sorted((ROOT / "docs" / "experiments").glob("*.py"))


def test_there_are_experiment_scripts():
    assert len(SCRIPTS) >= 10


@pytest.mark.parametrize("script", SCRIPTS, ids=lambda p: p.name)
def test_an_experiment_script_imports(script):
    """Loaded as a module (not run): its imports of the product resolve and nothing runs on import."""
    code = ("import importlib.util, sys; sys.argv = [sys.argv[0]]; "
            f"spec = importlib.util.spec_from_file_location('experiment', {str(script)!r}); "
            "spec.loader.exec_module(importlib.util.module_from_spec(spec))")
    result = subprocess.run([sys.executable, "-c", code], cwd=script.parent, capture_output=True, text=True,
                            timeout=120, env={"PYTHONPATH": str(ROOT), "PATH": "/usr/bin:/bin"})
    assert result.returncode == 0, result.stderr[-2000:]
    assert result.stdout == "", f"{script.name} printed on import: {result.stdout[:300]}"
