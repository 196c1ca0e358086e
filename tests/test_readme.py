"""The README's commands work as written, in a fresh folder with the default storage."""

import os
import re
import shlex
import subprocess
import sys

from tests.conftest import ROOT, tuner


def readme_commands(marker: str) -> list[list[str]]:
    """The ``tuner ...`` lines of the README's bash block that contains ``marker`` (comments dropped)."""
    blocks = re.findall(r"```bash\n(.*?)```", (ROOT / "README.md").read_text(), re.S)
    (block,) = [b for b in blocks if marker in b]
    return [shlex.split(line, comments=True)[1:] for line in block.splitlines() if line.startswith("tuner ")]


def test_replay_then_best_as_the_readme_says(tmp_path):
    for folder in ("studies", "kernel"):
        (tmp_path / folder).symlink_to(ROOT / folder)
    commands = readme_commands("--replay studies/recorded/patch_embed_sm90a_hopper_grid_h200.json")
    assert [c[0] for c in commands] == ["run", "best"]
    run = tuner(*commands[0], cwd=tmp_path)
    assert run.returncode == 0, run.stderr
    best = tuner(*commands[1], cwd=tmp_path)
    assert best.returncode == 0, best.stderr
    assert best.stdout.startswith("-DM=928256 ") and (tmp_path / "tuner.db").is_file()
    (best_line,) = [line for line in run.stdout.splitlines() if line.startswith("best: ")]
    assert best_line.endswith(best.stdout.strip())  # the run's winner


def test_the_python_api_example_runs(tmp_path):
    """docs/examples/api.py, as the README points to it: a replay, then a later session's load."""
    for folder in ("studies", "kernel"):
        (tmp_path / folder).symlink_to(ROOT / folder)
    env = {"TUNER_CACHE_DIR": str(tmp_path / "cache" / "cubin")}
    result = subprocess.run([sys.executable, str(ROOT / "docs" / "examples" / "api.py")], cwd=tmp_path,
                            capture_output=True, text=True, timeout=300, env={**os.environ, **env})
    assert result.returncode == 0, result.stderr
    assert (tmp_path / "best.h").read_text().startswith("// Best configuration of study patch_embed_sm90a_hopper_grid.replay")
    assert (tmp_path / "cache" / "cubin" / "kernels").is_dir() and result.stdout.strip().endswith("study.toml")  # inside $TUNER_CACHE_DIR
