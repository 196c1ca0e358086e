"""The supervisor with a real worker process that really hangs, crashes or poisons itself."""

import time

import pytest

from tuner.supervisor import Supervisor
from tests.conftest import FAKE_BACKEND, ROOT, tuner


@pytest.fixture
def supervisor():
    s = Supervisor(backend=FAKE_BACKEND)
    s.start()
    yield s
    s.stop()


def test_hang_is_killed_and_next_trial_runs(supervisor):
    first_pid = supervisor._proc.pid
    started = time.monotonic()
    hung = supervisor.measure({"config": {"PLANT_HANG": 1}}, timeout_s=1.5, report=lambda s, v: False)
    assert hung.status == "hang" and "killed" in hung.reason
    assert 1.4 < time.monotonic() - started < 10
    assert not supervisor.alive  # the stuck process is gone
    after = supervisor.measure({"config": {"X": 1}}, timeout_s=5, report=lambda s, v: False)
    assert after.status == "ok" and after.ms > 0
    assert supervisor._proc.pid != first_pid and supervisor.restarts == 1


def test_crash_and_sticky_error_restart_the_worker(supervisor):
    crashed = supervisor.measure({"config": {"CRASH": 1}}, timeout_s=5, report=lambda s, v: False)
    assert crashed.status == "launch_error" and "exit code 77" in crashed.reason
    sticky = supervisor.measure({"config": {"STICKY": 1}}, timeout_s=5, report=lambda s, v: False)
    assert sticky.status == "launch_error" and "ILLEGAL_ADDRESS" in sticky.reason
    assert supervisor.measure({"config": {"X": 3}}, timeout_s=5, report=lambda s, v: False).status == "ok"
    assert supervisor.restarts == 2


def test_block_medians_flow_to_the_parent_and_stop_prunes(supervisor):
    seen = []
    result = supervisor.measure({"config": {"X": 1}, "repeats": 40, "block": 10}, timeout_s=5,
                                report=lambda step, v: seen.append((step, v)) or step >= 1)
    assert result.status == "pruned_slow"
    assert [s for s, _ in seen] == [0, 1] and len(result.blocks) == 2


def test_run_records_hang_and_goes_on(tmp_path, cache_dir):
    """The whole CLI path with real NVRTC compiles and the worker double for the GPU."""
    study = tmp_path / "faults.toml"
    study.write_text(
        (ROOT / "studies" / "example_sgemm_faults.toml").read_text()
        .replace("timeout_s = 8", "timeout_s = 1.5").replace("THREAD_TILE = [4, 8]", "THREAD_TILE = [4]")
        .replace("PLANT_BUG = [0, 1]", "PLANT_BUG = [0]")
        .replace('kernel = "../kernel/example_sgemm.py"', f'kernel = "{ROOT}/kernel/example_sgemm.py"')
    )
    db = tmp_path / "s.db"
    result = tuner("run", study, "--storage", f"sqlite:///{db}", "--json", "--cache-dir", cache_dir,
                   env={"TUNER_WORKER_BACKEND": FAKE_BACKEND})
    assert result.returncode == 0, result.stderr
    import json

    summary = json.loads(result.stdout.strip().splitlines()[-1])
    assert summary["trials"] == 4
    assert summary["statuses"] == {"hang": 2, "ok": 2}  # the fake backend hangs on PLANT_HANG=1
    assert "PLANT_HANG=0" in summary["best"]["flags"]
