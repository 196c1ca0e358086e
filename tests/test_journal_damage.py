"""A journal file survives a damaged line anywhere (issue 33, item 5).

Each case damages a recorded journal as a crash, a full disk or a stray edit would; every
command still reads it, reports the damaged line once, keeps every finished trial, and a
rerun appends after it and reaches its budget.
"""

from __future__ import annotations

import json

import optuna
import pytest
from optuna.trial import TrialState

from tests.conftest import PNPOLY, tuner
from tuner.store.storage import open_storage

NAME = "dmg"
FIRST, MORE = 10, 4


def _run(log, trials):
    result = tuner("run", "--replay", PNPOLY, "--storage", log, "--study-name", NAME, "--trials", trials,
                   "--seed", 4, "--json")
    assert result.returncode == 0, result.stderr[-2000:]
    return result


def _finished(log) -> dict[int, tuple]:
    study = optuna.load_study(study_name=NAME, storage=open_storage(str(log)))
    return {t.number: (t.state, t.value, tuple(sorted(t.params.items())))
            for t in study.get_trials(deepcopy=False) if t.state.is_finished()}


def _line_of(lines: list[bytes], op: int, nth: int = 0) -> int:
    found = [i for i, line in enumerate(lines) if json.loads(line)["op_code"] == op]
    return found[nth]


def _garbage_mid_file(lines):
    k = _line_of(lines, 9, 5)  # a trial's system attribute (a lease's beat), mid-file: losing it costs nothing
    lines[k] = b"\x00\x13 not a record at all\n"


def _invalid_last_line(lines):
    lines.append(b'{"op_code": 6, "broken": true}\n')  # whole line, not a record: the next append follows it


def _partial_then_appends(lines):
    k = _line_of(lines, 8, 12)
    partial = b'{"op_code":8,"worker_id":"gone","trial_id":2,"user_attr":{"no'  # a writer died here
    lines[k] = partial + lines[k]  # and the next writer appended right after it


def _damaged_trial_creation(lines):
    k = _line_of(lines, 4, 5)  # trial 5's creation: the ids of everything after it depend on it
    lines[k] = lines[k][:90] + b"\xff\xfe###\n"


@pytest.mark.parametrize("damage", [_garbage_mid_file, _invalid_last_line, _partial_then_appends, _damaged_trial_creation])
def test_a_damaged_line_costs_nothing_else(damage, tmp_path):
    log = tmp_path / "j.log"
    _run(log, FIRST)
    before = _finished(log)
    assert len(before) == FIRST
    lines = log.read_bytes().splitlines(keepends=True)
    damage(lines)
    damaged = b"".join(lines)
    log.write_bytes(damaged)

    status = tuner("status", "--storage", log, "--json")
    assert status.returncode == 0, status.stderr[-2000:]
    reports = [line for line in status.stderr.splitlines() if "is damaged" in line]
    assert len(reports) == 1 and "every other record is read" in reports[0], status.stderr
    assert _finished(log) == before  # every finished trial kept, as it was
    assert log.read_bytes() == damaged  # reading never rewrites the file

    rerun = _run(log, FIRST + MORE)
    assert rerun.stderr.count("is damaged") == 1  # reported once per process
    assert log.read_bytes().startswith(damaged)
    study = optuna.load_study(study_name=NAME, storage=open_storage(str(log)))
    after = _finished(log)
    assert {n: after[n] for n in before} == before
    trials = study.get_trials(deepcopy=False)
    assert not [t.number for t in trials if t.state in (TrialState.RUNNING, TrialState.WAITING)]
    measured = [t for t in trials if t.state in (TrialState.COMPLETE, TrialState.PRUNED)]
    assert len(measured) == FIRST + MORE


def test_a_whole_journal_is_read_without_its_writer_lock(tmp_path):
    """A lock file a killed writer left behind stalls whoever takes the lock (Optuna waits, then
    breaks it): a command that finds the journal whole has nothing to repair and takes none."""
    log = tmp_path / "j.log"
    assert tuner("run", "--replay", PNPOLY, "--storage", log, "--trials", 3, "--seed", 1).returncode == 0
    lock = tmp_path / "j.log.lock"
    lock.symlink_to(log)  # as Optuna's JournalFileSymlinkLock leaves it
    status = tuner("status", "--storage", log, timeout=60)
    assert status.returncode == 0, status.stderr
    assert "acquire the lock" not in status.stderr and lock.is_symlink()


def test_a_trial_that_lost_a_define_to_a_damaged_line_is_left_out_of_the_budget(tmp_path):
    """A damaged "set param" record leaves a finished trial without one define: it names no config,
    so the rerun neither crashes on it nor counts it, and reaches its budget of whole configs."""
    log = tmp_path / "j.log"
    _run(log, FIRST)
    lines = log.read_bytes().splitlines(keepends=True)
    k = _line_of(lines, 5, 3)  # a define of the second trial
    lines[k] = lines[k][:40] + b"\xff###\n"
    log.write_bytes(b"".join(lines))
    rerun = _run(log, FIRST + MORE)
    assert rerun.stderr.count("is damaged") == 1
    study = optuna.load_study(study_name=NAME, storage=open_storage(str(log)))
    axes = study.user_attrs["axes"]
    whole = [t for t in study.get_trials(deepcopy=False, states=(TrialState.COMPLETE, TrialState.PRUNED))
             if all(a in t.params for a in axes)]
    assert len(whole) == FIRST + MORE and len(study.trials) == FIRST + MORE + 1
