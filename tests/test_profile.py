"""``tuner profile``: a stored config launched once under Nsight Compute.

ncu is the stand-in ``tests/fixtures/ncu/ncu`` (it runs the profiled command and reads back the
details page a real ncu 2025.3 wrote on an H200 for the example GEMM); the GPU worker is the fake
backend, which logs the launch it was asked to make inside the profiler's range. The real ncu on a
real GPU: ``tests/test_gpu.py``.
"""

from __future__ import annotations

import json
import os
from pathlib import Path

import pytest

from tests.conftest import FAKE_BACKEND, ROOT, tuner
from tuner.run.profile import parse_details, shown
from tuner.testing import write_study

NCU = ROOT / "tests" / "fixtures" / "ncu" / "ncu"
DETAILS = NCU.with_name("details_h200.csv")


@pytest.fixture
def stored(tmp_path):
    """A study of four configs, measured (fake GPU); its file and storage."""
    study = write_study(tmp_path, "prof", tier1={"BLOCK": [64, 128], "THREAD_TILE": [4, 8]},
                        search={"sampler": "grid", "trials": 4, "confirm_top": 0})
    url = f"sqlite:///{tmp_path / 's.db'}"
    ran = tuner("run", study, "--storage", url, env=env(tmp_path), cwd=tmp_path)
    assert ran.returncode == 0, ran.stderr
    return study, url


def env(tmp_path: Path, **more: str) -> dict[str, str]:
    return {"TUNER_WORKER_BACKEND": FAKE_BACKEND, "TUNER_CACHE_DIR": str(tmp_path / "cache"), "TUNER_NCU": str(NCU),
            "FAKE_PROFILED_LOG": str(tmp_path / "profiled.log"), **more}


def launched(tmp_path: Path) -> list[dict]:
    return [json.loads(line) for line in (tmp_path / "profiled.log").read_text().splitlines()]


def test_the_best_config_is_launched_once_in_the_profilers_range_and_its_figures_printed(tmp_path, stored):
    study, url = stored
    done = tuner("profile", study, "--storage", url, env=env(tmp_path), cwd=tmp_path)
    assert done.returncode == 0, done.stderr
    best = json.loads(tuner("best", study, "--storage", url, "--json").stdout)
    (config,) = launched(tmp_path)  # one launch, of the best config; the worker's other launches stay outside
    assert {k: config[k] for k in best["params"]} == best["params"]
    lines = done.stdout.splitlines()
    assert lines[0] == "example_sgemm" and "  Duration                         697.95 us" in lines
    assert any(line.startswith("  ncu: The 4.00 theoretical warps") and line.endswith("for the part it names: up to 75 %)")
               for line in lines)
    report = tmp_path / f"prof-trial{best['trial']}.ncu-rep"
    assert report.is_file() and f"trial {best['trial']}: output check: ok; report: {report.name}" in done.stderr


def test_a_trial_named_is_profiled_and_a_wrong_output_is_said(tmp_path, stored):
    study, url = stored
    import optuna

    trial = optuna.load_study(study_name="prof", storage=url).trials[2]
    mismatch = ",".join(f"{k}={v}" for k, v in trial.params.items())
    done = tuner("profile", study, "--storage", url, "--trial", 2, "-o", tmp_path / "two", "--json",
                 env=env(tmp_path, FAKE_MISMATCH_IF=mismatch), cwd=tmp_path)
    assert done.returncode == 0, done.stderr
    (answer,) = json.loads(done.stdout)["profiles"]
    assert answer["trial"] == 2 and answer["params"] == trial.params and answer["flags"] == trial.user_attrs["flags"]
    assert answer["status"] == "mismatch" and answer["reason"].startswith("row 0")
    assert answer["report"] == str(tmp_path / "two.ncu-rep") and (tmp_path / "two.ncu-rep").is_file()
    metrics = answer["kernels"][0]["metrics"]
    assert metrics["Duration"] == [697.95, "us"] and metrics["Elapsed Cycles"] == [1041050, "cycle"]
    assert [{k: c[k] for k in trial.params} for c in launched(tmp_path)] == [trial.params]


def test_trials_named_are_profiled_each_and_shown_side_by_side(tmp_path, stored):
    study, url = stored
    done = tuner("profile", study, "--storage", url, "--trial", 1, "--trial", 3, "--trial", 1, env=env(tmp_path),
                 cwd=tmp_path)  # (a trial named twice: profiled once)
    assert done.returncode == 0, done.stderr
    lines = done.stdout.splitlines()
    assert lines[0] == "example_sgemm" and lines[1].split() == ["trial", "1", "trial", "3"]
    assert lines[2].split() == ["Duration", "697.95", "us", "697.95", "us"]
    assert sum(line.startswith("  ncu (trial 1): ") for line in lines) == 2
    assert (tmp_path / "prof-trial1.ncu-rep").is_file() and (tmp_path / "prof-trial3.ncu-rep").is_file()
    assert len(launched(tmp_path)) == 2


@pytest.mark.parametrize("args, more, says", [
    (("--trial", 99), {}, "--trial 99: study 'prof' has no such trial with a config (trials 0-3)"),
    (("-o", "."), {}, "--output . is a folder: give a file name"),
    (("--trial", 1, "--trial", 2, "-o", "x"), {}, "-o names one report: give it with one --trial (several get "
                                                   "NAME-trialN.ncu-rep each)"),
    ((), {"TUNER_NCU": "/no/such/ncu"}, "$TUNER_NCU=/no/such/ncu: not an executable; point it at Nsight Compute's ncu"),
])
def test_bad_input_is_one_line_and_exit_2(tmp_path, stored, args, more, says):
    study, url = stored
    done = tuner("profile", study, "--storage", url, *args, env=env(tmp_path, **more), cwd=tmp_path)
    assert done.returncode == 2 and done.stderr.strip() == f"tuner: error: {says}", done.stderr


def test_a_study_file_changed_since_its_trials_is_refused_unless_accepted(tmp_path, stored):
    """A profile labelled with a trial must be of that trial's kernel: another problem (or source) is refused."""
    study, url = stored
    edited = tmp_path / "edited"
    edited.mkdir()
    (edited / "prof.toml").write_text(study.read_text().replace("M_DIM = 1024", "M_DIM = 2048"))
    refused = tuner("profile", edited / "prof.toml", "--storage", url, env=env(tmp_path), cwd=tmp_path)
    assert refused.returncode == 2 and "study 'prof' was recorded under a different setup (problem: stored" in refused.stderr
    assert "add --accept-mismatch" in refused.stderr and not (tmp_path / "profiled.log").exists()
    taken = tuner("profile", edited / "prof.toml", "--storage", url, "--accept-mismatch", "-o", tmp_path / "new" / "r",
                  env=env(tmp_path), cwd=tmp_path)
    assert taken.returncode == 0 and "-DM_DIM=2048" in taken.stderr  # what was profiled, as it was built
    assert (tmp_path / "new" / "r.ncu-rep").is_file() and len(launched(tmp_path)) == 1


def test_a_study_never_run_is_named(tmp_path):
    study = write_study(tmp_path, "prof", tier1={"BLOCK": [64, 128]})
    done = tuner("profile", study, "--storage", f"sqlite:///{tmp_path / 's.db'}", env=env(tmp_path), cwd=tmp_path)
    assert done.returncode == 2 and "run `tuner run` first" in done.stderr and len(done.stderr.strip().splitlines()) == 1


def test_counters_ncu_may_not_read_are_said_with_the_fix(tmp_path, stored):
    study, url = stored
    done = tuner("profile", study, "--storage", url,
                 env=env(tmp_path, FAKE_NCU_ERROR="ERR_NVGPUCTRPERM - The user does not have permission"), cwd=tmp_path)
    assert done.returncode == 1 and "run as root, or let users profile (NVreg_RestrictProfilingToAdminUsers=0)" in done.stderr
    assert not (tmp_path / "profiled.log").exists()


def test_a_program_kernel_is_profiled_in_its_own_program_and_its_checksum_compared(tmp_path):
    study = program_study(tmp_path, kernel_name="scale")
    url = f"sqlite:///{tmp_path / 's.db'}"
    ran = tuner("run", study, "--storage", url, env=env(tmp_path), cwd=tmp_path)
    assert ran.returncode == 0, ran.stderr
    done = tuner("profile", study, "--storage", url, "--json", env=env(tmp_path), cwd=tmp_path)
    assert done.returncode == 0, done.stderr
    (answer,) = json.loads(done.stdout)["profiles"]
    assert answer["status"] == "ok" and answer["kernels"][0]["metrics"]["Duration"] == [697.95, "us"]
    assert (tmp_path / answer["report"]).is_file() and not (tmp_path / "profiled.log").exists()  # no worker launch
    # the program's output changed since the trial (its checksum): said, and profiled all the same
    again = tuner("profile", study, "--storage", url, env=env(tmp_path, FAKE_CHECKSUM_SHIFT="5"), cwd=tmp_path)
    assert again.returncode == 0 and "output check: mismatch (checksum 1769477" in again.stderr, again.stderr


def test_a_program_whose_kernel_cannot_be_told_is_one_line(tmp_path):
    study = program_study(tmp_path)
    done = tuner("profile", study, env=env(tmp_path), cwd=tmp_path)
    assert done.returncode == 2 and done.stderr.strip() == (
        "tuner: error: kernel spec spec.py: scale.cu has no __global__ function: name the one to profile as "
        'kernel_name = "..." in the spec')


def test_the_details_page_of_a_real_ncu_is_read():
    (kernel,) = parse_details("==PROF== Connected to process 1\n" + DETAILS.read_text())
    assert kernel.name == "example_sgemm" and kernel.metrics["Registers Per Thread"] == ("128", "register/thread")
    assert [name for name, _, _ in shown(kernel)][:3] == ["Duration", "SM Frequency", "Compute (SM) Throughput"]
    assert len(kernel.advice) == 2  # the launch and occupancy rules; the throughput one only informs
    assert os.access(NCU, os.X_OK)


def program_study(folder: Path, kernel_name: str = "") -> Path:
    """The test harness of tests/test_program.py as a study, its spec naming ``kernel_name`` (or nothing)."""
    source = ROOT / "tests" / "fixtures" / "program"
    spec = (source / "scale.py").read_text().replace('    source = "scale.cu"\n', f'    source = "{source}/scale.cu"\n')
    spec = spec.replace("{dir}/build_fake.py", f"{source}/build_fake.py")
    if kernel_name:
        spec += f"    kernel_name = {kernel_name!r}\n"
    (folder / "spec.py").write_text(spec)
    return write_study(folder, "prog", kernel=folder / "spec.py", tier1={"TILE": [64, 128]},
                       search={"sampler": "grid", "trials": 2, "confirm_top": 0})
