"""The supervisor with a real worker process that really hangs, crashes or poisons itself."""

import time

import pytest

from tests.conftest import FAKE_BACKEND, ROOT, tuner
from tuner.device.supervisor import Supervisor
from tuner.testing import measure_job, write_study

EXAMPLE_SPEC = str(ROOT / "kernel" / "example_sgemm.py")


def job(config, **timing):
    """A measure job as the GPU evaluator sends it; the fake backend never opens the cubins."""
    return measure_job(EXAMPLE_SPEC, {"M_DIM": 64, "N_DIM": 64, "K_DIM": 64}, config, **timing)


def never(step, value, samples):
    return False


@pytest.fixture
def supervisor():
    s = Supervisor(backend=FAKE_BACKEND)
    s.start()
    yield s
    s.stop()


def test_hang_is_killed_and_next_trial_runs(supervisor):
    first_pid = supervisor._proc.pid
    started = time.monotonic()
    hung = supervisor.measure(job({"PLANT_HANG": 1}), timeout_s=1.5, report=never)
    assert hung.status == "hang" and "killed" in hung.reason
    assert 1.4 < time.monotonic() - started < 10
    assert not supervisor.alive  # the stuck process is gone
    after = supervisor.measure(job({"X": 1}), timeout_s=5, report=never)
    assert after.status == "ok" and after.ms > 0
    assert supervisor._proc.pid != first_pid and supervisor.restarts == 1


def test_crash_and_sticky_error_restart_the_worker(supervisor):
    crashed = supervisor.measure(job({"CRASH": 1}), timeout_s=5, report=never)
    assert crashed.status == "launch_error" and "exit code 77" in crashed.reason
    sticky = supervisor.measure(job({"STICKY": 1}), timeout_s=5, report=never)
    assert sticky.status == "launch_error" and "ILLEGAL_ADDRESS" in sticky.reason
    assert supervisor.measure(job({"X": 3}), timeout_s=5, report=never).status == "ok"
    assert supervisor.restarts == 2


def test_blocks_of_pair_ratios_flow_to_the_parent_and_stop_prunes(supervisor):
    seen = []
    result = supervisor.measure(job({"X": 1}, max_pairs=40, min_pairs=40, block=10), timeout_s=5,
                                report=lambda step, value, samples: seen.append((step, value, samples)) or step >= 1)
    assert result.status == "pruned_slow"
    assert [s for s, _, _ in seen] == [0, 1] and len(result.blocks) == 2
    assert all(len(samples) == 10 for _, _, samples in seen)  # one ratio per pair
    assert seen[1][1] == pytest.approx(1.001, rel=0.01)  # X=1 is 0.1 % slower than the empty reference


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


def test_the_worker_does_not_rerun_the_parents_main_module(tmp_path):
    """A worker spawned from the ``tuner`` script must not import the CLI again (Optuna, pandas:
    ~0.4 s of every worker start); the main module's identity is restored after the start."""
    import subprocess
    import sys

    backend = tmp_path / "modules_backend.py"
    backend.write_text(
        "import sys\n"
        "class ModulesBackend:\n"
        "    def hello(self):\n"
        "        return {'name': 'modules', 'loaded': sorted(m for m in sys.modules if m.split('.')[0] in ('optuna', 'pandas'))}\n"
    )
    main = tmp_path / "heavy_main.py"
    main.write_text(
        "import optuna, pandas, sys\n"
        "from tuner.device.supervisor import Supervisor\n"
        "if __name__ == '__main__':\n"
        f"    supervisor = Supervisor({str(backend) + ':ModulesBackend'!r})\n"
        "    print(supervisor.start()['loaded'])\n"
        "    supervisor.stop()\n"
        "    print(sys.modules['__main__'].__file__ == __file__, __spec__ is None)\n"
    )
    run = subprocess.run([sys.executable, str(main)], cwd=ROOT, capture_output=True, text=True, timeout=120,
                         env={**__import__("os").environ, "PYTHONPATH": str(ROOT)})
    assert run.returncode == 0, run.stderr
    assert run.stdout.splitlines() == ["[]", "True True"]


def test_the_cuda_start_is_quiet_on_a_host_without_a_gpu():
    """A worker process begins the CUDA driver's start in a thread (tuner.device.cuda_start); where
    there is no driver or no GPU it ends without a word: the backend's own calls say what failed."""
    import subprocess
    import sys

    code = "from tuner.device import cuda_start\ncuda_start.begin()\ncuda_start.wait()\nprint('waited')\n"
    run = subprocess.run([sys.executable, "-c", code], cwd=ROOT, capture_output=True, text=True, timeout=120,
                         env={**__import__("os").environ, "PYTHONPATH": str(ROOT)})
    assert run.returncode == 0 and run.stdout == "waited\n" and run.stderr == "", run.stderr


def test_a_worker_whose_run_died_mid_trial_drops_its_reply_and_ends(monkeypatch):
    """The run that asked for a trial is killed (kill -9) while its worker measures: the worker's
    reply meets a closed pipe and the worker ends without an exception (a spawned worker's traceback
    would land in the stderr the killed run shares with the rest of the study)."""
    from multiprocessing import Pipe

    from tuner.device import protocol, worker
    from tuner.device.timing import Measurer
    from tuner.measurement.value import Measurement

    run_end, worker_end = Pipe()

    class Backend:
        def hello(self):
            return {"name": "double"}

    measured = []

    def measure_while_the_run_dies(self, job, channel):
        run_end.close()
        measured.append(job.candidate)
        return Measurement("ok", ms=1.0, ratio=1.0), False

    monkeypatch.setattr(worker, "_load_backend", lambda name: Backend())
    monkeypatch.setattr(Measurer, "measure", measure_while_the_run_dies)
    run_end.send(protocol.encode(job({"X": 1})))
    worker.worker_main(worker_end, "double")  # raised BrokenPipeError or ConnectionResetError before
    assert len(measured) == 1  # the trial was measured, and its reply had nowhere to go


def test_a_reference_that_hangs_stops_the_run_at_the_timeout_and_is_named(tmp_path, cache_dir):
    """The session warm-up launches the reference before any trial: its hang is caught at ``timeout_s``
    (not the inputs' setup allowance of minutes) and named as the reference's, not a trial's."""
    study = write_study(tmp_path, "hangref", problem={"M_DIM": 256, "N_DIM": 256, "K_DIM": 256},
                        tier1={"BLOCK": [32, 64], "THREAD_TILE": [1, 2, 4], "PLANT_HANG": [1, 0]}, search={"trials": 6},
                        measure={"timeout_s": 3, "reference": {"BLOCK": 32, "THREAD_TILE": 2, "PLANT_HANG": 1}})
    result = tuner("run", study, "--storage", f"sqlite:///{tmp_path / 's.db'}", "--cache-dir", cache_dir,
                   env={"TUNER_WORKER_BACKEND": FAKE_BACKEND}, timeout=120)
    assert result.returncode == 2, result.stderr
    assert result.stderr.startswith("tuner: error: the reference hung in the session warm-up (no progress for 3 s)")
    assert "-DPLANT_HANG=1" in result.stderr and "[measure] reference" in result.stderr


def test_a_ctrl_c_before_the_greeting_thread_starts_leaves_a_supervisor_that_discards(monkeypatch):
    """A Ctrl-C may land between the worker's spawn and the start of the thread that waits for its greeting:
    the run's clean-up then discards the worker without waiting on a thread that never ran (Python refuses
    to join one: a traceback under the run's one line)."""
    import threading

    s = Supervisor(backend=FAKE_BACKEND)

    def interrupted(self):
        raise KeyboardInterrupt

    monkeypatch.setattr(threading.Thread, "start", interrupted)
    with pytest.raises(KeyboardInterrupt):
        s.start_soon()
    monkeypatch.undo()
    s.discard()
    assert not s.alive
