"""Fault suite: real `tuner` processes meet bad kernels, dying processes and a flaky store.

For every fault: the trial's recorded status and reason, that the study went on, and
that no finished trial was lost. The GPU is replaced by the worker double
(tests/fake_backend.py) except in the cases marked ``gpu``; compiles are real NVRTC.
See docs/RELIABILITY.md for the table these tests back.
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import optuna
import pytest
from optuna.trial import TrialState

from tests.conftest import FAKE_BACKEND, PNPOLY, ROOT, tuner
from tuner import testing
from tuner.store.storage import open_storage
from tuner.testing import run_summary as summary_of

pytestmark = pytest.mark.slow  # faults, restarts and kills end to end: minutes

MARKING_BACKEND = f"{ROOT / 'tests' / 'fault_backend.py'}:MarkingBackend"
PG_RESTART = "pg_ctlcluster --skip-systemctl-redirect {version} main restart"


# -- helpers -------------------------------------------------------------------------------------


def fault_kernel(folder: Path) -> Path:
    """A copy of the example kernel with more ways to fail, as axes.

    BREAK=1: a syntax error (compile_error); MINB: __launch_bounds__ min blocks, which caps
    registers (THREAD_TILE=8, MINB=32 spills); CRASH / STICKY / PLANT_HANG: read by the
    worker double. At most one fault per config (the spec's check says so).
    """
    src = (ROOT / "kernel" / "example_sgemm.cu").read_text()
    src = src.replace("__launch_bounds__(THREADS)", "__launch_bounds__(THREADS, MINB)")
    guards = "".join(f"#ifndef {name}\n#define {name} {value}\n#endif\n"
                     for name, value in (("MINB", 1), ("BREAK", 0), ("CRASH", 0), ("STICKY", 0)))
    src = src.replace("#ifndef PLANT_HANG", guards + "#if BREAK\nthis is not CUDA;\n#endif\n#ifndef PLANT_HANG", 1)
    (folder / "faulty.cu").write_text(src)
    spec = (ROOT / "kernel" / "example_sgemm.py").read_text()
    spec = spec.replace('source = "example_sgemm.cu"', 'source = "faulty.cu"')
    faults = "PLANT_HANG + CRASH + STICKY + BREAK"
    spec = spec.replace(
        "    restrictions = [\n",
        f"    restrictions = [\n        (\"{faults} == 0 or ({faults} == 1 and THREAD_TILE == 4 and MINB == 1)\", "
        "\"one fault at a time\"),\n", 1)
    assert "one fault at a time" in spec and "MINB" in src
    (folder / "faulty.py").write_text(spec)
    return folder / "faulty.py"


def write_study(folder: Path, name: str, kernel: Path, tier1: dict, tier2: dict | None = None,
                search: dict | None = None, measure: dict | None = None) -> Path:
    """A grid study with a short, fixed measurement (no pruner: every config is measured whole)."""
    return testing.write_study(folder, name, kernel=kernel, tier1=tier1, tier2=tier2,
                               search={"sampler": "grid", "pruner": False, **(search or {})},
                               measure={"warmup": 1, "repeats": 10, "block": 5, **(measure or {})})


def sgemm_study(folder: Path, name: str = "rel", trials: int = 6) -> Path:
    # no reference probe: these tests stop a run mid-trial, and a probe holds the first trials untold
    return write_study(folder, name, ROOT / "kernel" / "example_sgemm.py",
                       {"BLOCK": [64, 128], "BLOCK_K": [16, 32], "THREAD_TILE": [4, 8]}, search={"trials": trials},
                       measure={"reference_probe": 0})


def load(url: str, name: str) -> optuna.Study:
    return optuna.load_study(study_name=name, storage=open_storage(url))


def finished(study: optuna.Study) -> dict[int, tuple]:
    return {t.number: (t.state, t.value, t.user_attrs.get("status"), tuple(sorted(t.params.items())))
            for t in study.get_trials(deepcopy=False) if t.state.is_finished()}


def assert_nothing_lost(before: dict[int, tuple], study: optuna.Study) -> None:
    after = finished(study)
    for number, record in before.items():
        assert after.get(number) == record, f"trial {number} lost or changed: {record} -> {after.get(number)}"


def wait_for(predicate, timeout_s: float, what: str, period_s: float = 0.2):
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        try:
            value = predicate()
        except Exception:  # the store is being created or restarted
            value = None
        if value:
            return value
        time.sleep(period_s)
    pytest.fail(f"timed out after {timeout_s} s waiting for {what}")


def stop_when(run: subprocess.Popen, ready, what: str, sig: int = signal.SIGINT, group: bool = True,
              timeout_s: float = 120) -> str:
    """Send ``sig`` to ``run`` once ``ready()`` holds (``group``: to its whole process group, as a terminal's
    Ctrl-C does); its stderr once it stopped. A run still there after a minute is killed."""
    try:
        wait_for(ready, timeout_s, what)
        if group:
            os.killpg(run.pid, sig)
        else:
            run.send_signal(sig)
        _, err = run.communicate(timeout=60)
    finally:
        if run.poll() is None:
            os.killpg(run.pid, signal.SIGKILL)
    return err


def running_with_finished(url: str, name: str, n_finished: int):
    study = load(url, name)
    trials = study.get_trials(deepcopy=False)
    done = [t for t in trials if t.state in (TrialState.COMPLETE, TrialState.PRUNED)]
    running = [t for t in trials if t.state == TrialState.RUNNING and "runner_pid" in t.user_attrs]
    return (finished(study), running) if len(done) >= n_finished and running else None


# -- kernel faults: one study, every way a config can fail -------------------------------------------


def test_kernel_faults_are_recorded_and_the_study_goes_on(tmp_path, cache_dir):
    kernel = fault_kernel(tmp_path)
    study = write_study(tmp_path, "faults", kernel, {"BLOCK": [64], "BLOCK_K": [16], "THREAD_TILE": [4, 8], "MINB": [1, 32]},
                        {"PLANT_HANG": [0, 1], "CRASH": [0, 1], "STICKY": [0, 1], "BREAK": [0, 1]},
                        {"trials": 8}, {"timeout_s": 1.5, "max_regs": 100})
    url = f"sqlite:///{tmp_path / 'faults.db'}"
    cmd = ("run", study, "--storage", url, "--cache-dir", cache_dir, "--json")
    summary = summary_of(tuner(*cmd, env={"TUNER_WORKER_BACKEND": FAKE_BACKEND}))
    assert summary["trials"] == 8
    assert summary["statuses"] == {"ok": 2, "too_many_regs": 1, "spills": 1, "hang": 1, "launch_error": 2, "compile_error": 1}

    s = load(url, "faults")
    by_fault = {}
    for t in s.trials:
        p = t.params
        key = ("hang" if p["PLANT_HANG"] else "crash" if p["CRASH"] else "sticky" if p["STICKY"] else "break" if p["BREAK"]
               else f"tt{p['THREAD_TILE']}_minb{p['MINB']}")
        by_fault[key] = t
    expect = {
        "hang": (TrialState.PRUNED, "hang", "no progress for 2 s: worker killed and restarted"),
        "crash": (TrialState.PRUNED, "launch_error", "worker died (exit code 77)"),
        "sticky": (TrialState.PRUNED, "launch_error", "CUDA_ERROR_ILLEGAL_ADDRESS"),
        "break": (TrialState.PRUNED, "compile_error", "error: expected a declaration"),
        "tt8_minb1": (TrialState.PRUNED, "too_many_regs", "registers > 100"),
        "tt8_minb32": (TrialState.PRUNED, "spills", "bytes of spill stores+loads"),
        "tt4_minb1": (TrialState.COMPLETE, "ok", ""),
        "tt4_minb32": (TrialState.COMPLETE, "ok", ""),
    }
    for key, (state, status, reason) in expect.items():
        t = by_fault[key]
        assert (t.state, t.user_attrs["status"]) == (state, status), key
        assert reason in t.user_attrs["reason"], (key, t.user_attrs["reason"])
    assert by_fault["tt8_minb1"].user_attrs["regs"] > 100 and by_fault["tt8_minb32"].user_attrs["spills"] > 0
    assert "faulty.cu(" in by_fault["break"].user_attrs["reason"]  # file and line of the error
    # the study went on: a config after the worker's hang, crash and sticky error was measured
    worst = max(by_fault[k].number for k in ("hang", "crash", "sticky"))
    assert any(t.state == TrialState.COMPLETE and t.number > worst for t in s.trials)
    # nothing lost: a rerun has nothing to do and every record stays as it was
    before = finished(s)
    again = summary_of(tuner(*cmd, env={"TUNER_WORKER_BACKEND": FAKE_BACKEND}))
    assert again["trials"] == 8
    assert_nothing_lost(before, load(url, "faults"))


# -- processes dying ----------------------------------------------------------------------------------


def _children(pid: int) -> list[int]:
    kids = []
    for task in Path(f"/proc/{pid}/task").iterdir():
        kids += [int(c) for c in (task / "children").read_text().split()]
    return kids


def test_worker_killed_by_a_signal_mid_trial(tmp_path, cache_dir):
    marks = tmp_path / "marks"
    marks.mkdir()
    study = sgemm_study(tmp_path, "killworker", trials=4)
    url = f"sqlite:///{tmp_path / 'kw.db'}"
    env = {**os.environ, "TUNER_WORKER_BACKEND": MARKING_BACKEND, "FAULT_MARK_DIR": str(marks), "FAKE_TRIAL_DELAY_S": "1.0"}
    proc = subprocess.Popen([sys.executable, "-m", "tuner", "run", str(study), "--storage", url, "--cache-dir", str(cache_dir),
                             "--json"], env=env, cwd=ROOT, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    try:
        # the second measurement in flight: one trial already finished before the kill
        def measuring_second():
            done = [t for t in load(url, "killworker").trials if t.state.is_finished()]
            pids = [int(m.name) for m in marks.iterdir()]
            return pids[0] if done and pids else None

        victim = wait_for(measuring_second, 120, "a second measurement in flight", 0.05)
        assert victim in _children(proc.pid)  # the GPU worker, not the tuner process
        before = finished(load(url, "killworker"))
        os.kill(victim, signal.SIGKILL)
        out, err = proc.communicate(timeout=180)
    finally:
        if proc.poll() is None:
            proc.kill()
    assert proc.returncode == 0, err
    summary = json.loads(out.strip().splitlines()[-1])
    assert summary["trials"] == 4 and summary["statuses"].get("ok") == 3
    s = load(url, "killworker")
    died = [t for t in s.trials if t.user_attrs.get("status") == "launch_error"]
    assert len(died) == 1 and died[0].state == TrialState.PRUNED
    assert "worker died (exit code -9)" in died[0].user_attrs["reason"]
    assert max(t.number for t in s.trials if t.state == TrialState.COMPLETE) > died[0].number  # went on
    assert_nothing_lost(before, s)


def test_parent_kill_9_then_resume_on_a_journal(tmp_path, cache_dir):
    """No heartbeat on a journal: the rerun's own clean-up fails and re-queues the stale trial.

    (The SQLite variant is tests/test_storage_resume.py::test_kill_9_mid_trial_then_resume_loses_nothing.)
    """
    study = sgemm_study(tmp_path, "kill9j", trials=6)
    url = str(tmp_path / "kill9.log")
    env = {**os.environ, "TUNER_WORKER_BACKEND": FAKE_BACKEND, "FAKE_TRIAL_DELAY_S": "1.0"}
    cmd = [sys.executable, "-m", "tuner", "run", str(study), "--storage", url, "--cache-dir", str(cache_dir)]
    proc = subprocess.Popen(cmd, env=env, cwd=ROOT, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    try:
        before, running = wait_for(lambda: running_with_finished(url, "kill9j", 2), 120, "2 finished and 1 running")
        proc.send_signal(signal.SIGKILL)
        proc.wait(timeout=30)
    finally:
        if proc.poll() is None:
            proc.kill()
    assert proc.returncode == -signal.SIGKILL
    stale = [t for t in load(url, "kill9j").trials if t.state == TrialState.RUNNING]
    assert len(stale) >= 1  # the measured trial, and those asked ahead of it (compiling)
    before = finished(load(url, "kill9j"))

    env["FAKE_TRIAL_DELAY_S"] = "0"
    rerun = subprocess.run(cmd + ["--json"], env=env, cwd=ROOT, capture_output=True, text=True, timeout=300)
    summary = summary_of(rerun)
    s = load(url, "kill9j")
    assert_nothing_lost(before, s)
    n_axes = max(len(t.params) for t in s.trials if t.state == TrialState.COMPLETE)
    for trial in stale:
        killed = s.trials[trial.number]
        assert killed.state == TrialState.FAIL and killed.user_attrs["status"] == "killed"
        assert f"runner pid {proc.pid} died mid-trial" in killed.user_attrs["reason"]
        retried = [t for t in s.trials if t.user_attrs.get("requeued_from") == killed.number]
        if len(trial.params) < n_axes:  # killed while its config was being sampled: nothing to run again
            assert retried == []
            continue
        assert len(retried) == 1 and retried[0].params == trial.params and retried[0].state == TrialState.COMPLETE
    assert not [t for t in s.trials if t.state in (TrialState.RUNNING, TrialState.WAITING)]
    assert summary["statuses"]["ok"] == 6  # the budget counts finished trials: 6 measured configs


# -- the database server restarted mid-study ------------------------------------------------------------------


def test_postgres_restarted_mid_study(tmp_path, cache_dir, postgres_url, unique_name):
    version = os.listdir("/etc/postgresql")[0]
    study = sgemm_study(tmp_path, unique_name, trials=8)
    env = {**os.environ, "TUNER_WORKER_BACKEND": FAKE_BACKEND, "FAKE_TRIAL_DELAY_S": "0.7"}
    cmd = [sys.executable, "-m", "tuner", "run", str(study), "--storage", postgres_url, "--cache-dir", str(cache_dir), "--json"]
    proc = subprocess.Popen(cmd, env=env, cwd=ROOT, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    try:
        before, _ = wait_for(lambda: running_with_finished(postgres_url, unique_name, 2), 120, "2 finished and 1 running")
        restart = subprocess.run(PG_RESTART.format(version=version).split(), capture_output=True, text=True, timeout=60)
        assert restart.returncode == 0, restart.stderr
        out, err = proc.communicate(timeout=240)
    finally:
        if proc.poll() is None:
            proc.kill()
        subprocess.run(["pg_isready", "-h", "127.0.0.1", "-t", "30"], capture_output=True)
    # Either it rode out the restart, or it stopped with one clean line (no traceback).
    if proc.returncode != 0:
        assert proc.returncode == 2 and "Traceback" not in err, err
        assert "storage" in err and "rerun" in err, err
    s = load(postgres_url, unique_name)
    assert_nothing_lost(before, s)
    # the rerun resumes and completes the budget, leaving nothing RUNNING
    env["FAKE_TRIAL_DELAY_S"] = "0"
    summary = summary_of(subprocess.run(cmd, env=env, cwd=ROOT, capture_output=True, text=True, timeout=300))
    s = load(postgres_url, unique_name)
    assert_nothing_lost(before, s)
    assert not [t for t in s.trials if t.state in (TrialState.RUNNING, TrialState.WAITING)]
    assert summary["statuses"].get("ok", 0) >= 8
    optuna.delete_study(study_name=unique_name, storage=open_storage(postgres_url))


# -- the compile cache: unwritable, full -------------------------------------------------------------------------


def test_compile_cache_unwritable_is_not_fatal(tmp_path):
    blocker = tmp_path / "not_a_dir"
    blocker.write_text("a file where the cache folder should be")  # mkdir fails even for root
    study = sgemm_study(tmp_path, "nocache", trials=3)
    url = f"sqlite:///{tmp_path / 'nc.db'}"
    result = tuner("run", study, "--storage", url, "--cache-dir", blocker / "cubin", "--json",
                   env={"TUNER_WORKER_BACKEND": FAKE_BACKEND})
    summary = summary_of(result)
    assert summary["trials"] == 3 and summary["statuses"] == {"ok": 3}
    assert result.stderr.count("UserWarning: compile cache") == 1 and "compiling uncached" in result.stderr


def test_compile_cache_full_is_not_fatal(tmp_path):
    if os.geteuid() != 0:
        pytest.fail("this test mounts a 16 KiB tmpfs as the full cache: run it as root (CI does)")
    full = tmp_path / "full"
    full.mkdir()
    mounted = subprocess.run(["mount", "-t", "tmpfs", "-o", "size=16k", "tmpfs", str(full)], capture_output=True, text=True)
    assert mounted.returncode == 0, mounted.stderr
    try:
        (full / "filler").write_bytes(b"x" * 12 * 1024)  # leaves no room for a cubin
        study = sgemm_study(tmp_path, "fullcache", trials=3)
        url = f"sqlite:///{tmp_path / 'fc.db'}"
        result = tuner("run", study, "--storage", url, "--cache-dir", full, "--json", env={"TUNER_WORKER_BACKEND": FAKE_BACKEND})
        summary = summary_of(result)
        assert summary["statuses"] == {"ok": 3}
        assert "No space left on device" in result.stderr and result.stderr.count("UserWarning: compile cache") == 1
        assert not [f for f in full.iterdir() if f.name.startswith(".tmp-")]  # no half-written temp files left
    finally:
        subprocess.run(["umount", str(full)], capture_output=True)


# -- broken storage files -------------------------------------------------------------------------------------------


def test_corrupted_sqlite_is_one_line_and_untouched(tmp_path, pnpoly):
    db = tmp_path / "tuner.db"
    payload = b"SQLite format 3\x00" + os.urandom(4096)  # a header, then garbage
    db.write_bytes(payload)
    for args in (("run", "--replay", pnpoly, "--trials", 3), ("status",), ("best", "--study", "x")):
        result = tuner(*args, "--storage", f"sqlite:///{db}")
        assert result.returncode == 2, result.stderr
        lines = result.stderr.strip().splitlines()
        assert len(lines) == 1 and lines[0].startswith("tuner: error: cannot open storage"), result.stderr
        assert "move it aside" in lines[0]
    assert db.read_bytes() == payload


def test_truncated_journal_recovers_every_complete_record(tmp_path, pnpoly):
    """A crash mid-write leaves a partial last line. Optuna skips it on read but appends
    the next record right after it, corrupting the file for good; tuner moves the partial
    record aside first, and the trial it belonged to is recovered as a stale trial."""
    log = tmp_path / "j.log"
    name = "trunc"
    first = summary_of(tuner("run", "--replay", pnpoly, "--storage", log, "--study-name", name, "--trials", 5,
                             "--seed", 1, "--json"))
    assert first["trials"] == 5
    raw = log.read_bytes()
    last_state = raw.rindex(b'{"op_code":6,')  # the record that finishes the last trial
    cut = raw[: last_state + 60]  # the writer died 60 bytes into it
    log.write_bytes(cut)
    complete_lines = cut[: cut.rindex(b"\n") + 1]
    # `tuner status` repairs the tail (under the journal lock) and reads every whole record
    status = tuner("status", "--storage", log, "--json")
    assert status.returncode == 0, status.stderr
    assert "partial record (60 bytes" in status.stderr and "moved to" in status.stderr
    assert log.read_bytes() == complete_lines
    before = finished(load(str(log), name))
    assert len(before) == 4  # trial 4's end was cut: it is RUNNING, with a dead runner
    rerun = tuner("run", "--replay", pnpoly, "--storage", log, "--study-name", name, "--trials", 8, "--seed", 1, "--json")
    summary = summary_of(rerun)
    assert "re-queued" not in rerun.stdout
    assert log.read_bytes().startswith(complete_lines)
    sides = list(tmp_path.glob("j.log.partial-*"))
    assert len(sides) == 1 and sides[0].read_bytes() == cut[len(complete_lines):]
    s = load(str(log), name)
    assert_nothing_lost(before, s)
    assert s.trials[4].state == TrialState.FAIL and s.trials[4].user_attrs["status"] == "killed"
    assert summary["trials"] == len(s.trials) == 9  # 8 measured, and the killed one kept as FAIL
    assert [t.params for t in s.trials if t.user_attrs.get("requeued_from") == 4] == [s.trials[4].params]
    assert len([t for t in s.trials if t.state.is_finished() and t.state != TrialState.FAIL]) == 8
    assert not [t for t in s.trials if t.state in (TrialState.RUNNING, TrialState.WAITING)]


def test_journal_corrupt_in_the_middle_is_skipped_and_reported(tmp_path, pnpoly):
    """(Every kind of damaged line: tests/test_journal_damage.py.)"""
    log = tmp_path / "bad.log"
    summary_of(tuner("run", "--replay", pnpoly, "--storage", log, "--trials", 3, "--json"))
    lines = log.read_bytes().splitlines(keepends=True)
    k = next(i for i, line in enumerate(lines) if line.startswith(b'{"op_code":9,'))  # a lease's beat
    lines[k] = b'{"op_code": 9, "broken\n'
    payload = b"".join(lines)
    log.write_bytes(payload)
    result = tuner("run", "--replay", pnpoly, "--storage", log, "--trials", 5, "--json")
    assert summary_of(result)["trials"] == 5
    err = [line for line in result.stderr.splitlines() if "is damaged" in line]
    assert len(err) == 1 and f"line {k + 1} is damaged" in err[0], result.stderr
    assert log.read_bytes().startswith(payload)


# -- many workers: the CI-sized load test --------------------------------------------------------------------


@pytest.mark.parametrize("kind", ["journal", "postgres"])
def test_four_workers_share_one_study(kind, tmp_path, request):
    sys.path.insert(0, str(ROOT / "bench"))
    from load_test import run_one

    if kind == "postgres":
        request.getfixturevalue("postgres_url")
    report = run_one(kind, PNPOLY, workers=4, trials=60, seed=3, workdir=tmp_path)
    assert report["lost"] == 0
    assert not set(report["states"]) - {"COMPLETE", "PRUNED"}  # nothing RUNNING/FAIL left
    assert 60 <= report["trials"] <= 60 + 4  # the shared budget, overshoot at most one per worker
    # a repeat reuses the stored value; only a both-check-at-once race (one storage write wide) measures twice
    assert report["configs_measured_twice"] <= 2
    assert report["distinct_configs"] + report["duplicate_trials_reused"] == report["trials"]
    assert len(report["trials_per_worker"]) >= 2  # workers really shared it (a late starter may find it done)
    if kind == "postgres":
        # 3 per worker (pool 2 + overflow 1) + the parent's; others' connections (baseline) excluded
        assert report["peak_connections_db"] - report["baseline_connections_db"] <= 4 * 3 + 1 < report["max_connections"]


# -- GPU-only faults (run on a GPU host: pytest -m gpu) ----------------------------------------------------------


def gpu_fault_kernel(folder: Path) -> Path:
    """The example kernel with two real GPU faults: OOB=1 writes far outside C (illegal
    address, a sticky error), SMEM_KB asks for more dynamic shared memory than exists."""
    src = (ROOT / "kernel" / "example_sgemm.cu").read_text()
    marker = "extern \"C\" __global__"
    head, tail = src.split(marker, 1)
    body_start = tail.index("{") + 1
    tail = (tail[:body_start] + "\n#if OOB\n    if (threadIdx.x == 0) C[(size_t)1 << 40] = 1.0f;\n#endif\n"
            + tail[body_start:])
    (folder / "gpufault.cu").write_text(head + "#ifndef OOB\n#define OOB 0\n#endif\n#ifndef SMEM_KB\n#define SMEM_KB 0\n#endif\n"
                                        + marker + tail)
    spec = (ROOT / "kernel" / "example_sgemm.py").read_text()  # a light spec: OOB, SMEM_KB come from the guards
    spec = spec.replace('source = "example_sgemm.cu"', 'source = "gpufault.cu"\n    kernel_name = "example_sgemm"')
    spec = spec.replace("    def flops(self, problem):",
                        "    def launch(self, config, problem, device):  # SMEM_KB of dynamic shared memory\n"
                        "        import dataclasses\n\n"
                        "        launch = super().launch(config, problem, device)\n"
                        "        return dataclasses.replace(launch, smem_bytes=config['SMEM_KB'] * 1024)\n\n"
                        "    def flops(self, problem):")
    assert "smem_bytes=config" in spec
    (folder / "gpufault.py").write_text(spec)
    return folder / "gpufault.py"


@pytest.mark.gpu
def test_gpu_illegal_address_and_too_much_smem(tmp_path, cache_dir):
    kernel = gpu_fault_kernel(tmp_path)
    study = write_study(tmp_path, "gpufaults", kernel, {"BLOCK": [64], "BLOCK_K": [16], "THREAD_TILE": [4]},
                        {"OOB": [0, 1], "SMEM_KB": [0, 1024]}, {"trials": 4}, {"timeout_s": 10})
    url = f"sqlite:///{tmp_path / 'g.db'}"
    summary = summary_of(tuner("run", study, "--storage", url, "--cache-dir", cache_dir, "--json"))
    assert summary["trials"] == 4
    s = load(url, "gpufaults")
    by = {(t.params["OOB"], t.params["SMEM_KB"]): t for t in s.trials}
    assert by[(0, 0)].state == TrialState.COMPLETE and by[(0, 0)].user_attrs["status"] == "ok"
    oob = by[(1, 0)]
    assert oob.state == TrialState.PRUNED and oob.user_attrs["status"] == "launch_error"
    assert "ILLEGAL_ADDRESS" in oob.user_attrs["reason"] or "kernel fault" in oob.user_attrs["reason"]
    for key in ((0, 1024), (1, 1024)):
        t = by[key]
        assert t.state == TrialState.PRUNED and t.user_attrs["status"] == "launch_error"
        assert "SMEM" in t.user_attrs["reason"] or "INVALID_VALUE" in t.user_attrs["reason"], t.user_attrs["reason"]
    # the study went on after the illegal address: a later ok trial, or the ok one came first and all finished
    assert all(t.state.is_finished() for t in s.trials)


@pytest.mark.gpu
def test_gpu_two_workers_one_hang(tmp_path, cache_dir):
    """Two workers (one GPU each if there are two) on one journal; a hang in one does not stop the other."""
    study = write_study(tmp_path, "twohang", ROOT / "kernel" / "example_sgemm.py",
                        {"BLOCK": [64, 128], "BLOCK_K": [16, 32], "THREAD_TILE": [4, 8]}, {"PLANT_HANG": [0, 1]},
                        {"trials": 12}, {"timeout_s": 5})
    log = tmp_path / "two.log"
    summary = summary_of(tuner("run", study, "--storage", log, "--workers", 2, "--cache-dir", cache_dir, "--json"))
    assert summary["worker_exit_codes"] == [0, 0]
    s = load(str(log), "twohang")
    assert len({t.user_attrs.get("runner_pid") for t in s.trials}) == 2
    assert summary["statuses"].get("hang", 0) >= 1 and summary["statuses"].get("ok", 0) >= 1
    assert not [t for t in s.trials if t.state == TrialState.RUNNING]
