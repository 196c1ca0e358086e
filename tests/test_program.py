"""A kernel that is its own program (tuner.contract.program): the user's build command and harness.

The fixture kernel (tests/fixtures/program/) is "built" by build_fake.py into a Python program that
prints the @@RESULT line a CUDA harness would; its ``PLANT`` define plants one fault per value. The
worker runs those programs for real; only the device's name and clocks come from the fake backend.
"""

import json
import os
import re
import stat
import subprocess
import sys
import textwrap
import time

import optuna
import pytest

from tests.conftest import FAKE_BACKEND, ROOT, tuner
from tests.test_reliability import stop_when
from tuner.compile.program import build_program
from tuner.contract.kernel_spec import load_spec
from tuner.contract.program import NoResult, checksum_differs, parse_result
from tuner.errors import UserError
from tuner.testing import write_study

FIXTURE = ROOT / "tests" / "fixtures" / "program"
KERNEL = FIXTURE / "scale.py"


def fake_ms(tile: int, unroll: int) -> float:
    """The time build_fake.py's programs print."""
    return round(1.0 + abs(tile - 128) / 256 + 0.05 * unroll, 4)


def env(cache_dir) -> dict[str, str]:
    return {"TUNER_WORKER_BACKEND": FAKE_BACKEND, "TUNER_CACHE_DIR": str(cache_dir)}


def trials_by_config(db, name) -> dict[tuple, optuna.trial.FrozenTrial]:
    study = optuna.load_study(study_name=name, storage=f"sqlite:///{db}")
    return {(t.params["TILE"], t.params.get("UNROLL", 1), t.params.get("PLANT", 0)): t for t in study.trials}


def test_a_program_kernel_is_timed_by_its_own_program_against_the_reference(tmp_path):
    study = write_study(tmp_path, "prog", kernel=KERNEL, tier1={"TILE": [32, 64, 128, 256], "UNROLL": [1, 2]})
    db = tmp_path / "t.db"
    done = tuner("grid", study, "--storage", f"sqlite:///{db}", "--csv", tmp_path / "g.csv", env=env(tmp_path / "c"),
                 cwd=tmp_path, timeout=600)
    assert done.returncode == 0, done.stderr
    trials = trials_by_config(db, "prog.grid")
    assert len(trials) == 8 and all(t.user_attrs["status"] == "ok" for t in trials.values())
    reference_ms = fake_ms(128, 1)  # the fastest of the first configs becomes the reference
    for (tile, unroll, _), trial in trials.items():
        assert trial.value == pytest.approx(fake_ms(tile, unroll) / reference_ms, rel=1e-6)
        assert trial.user_attrs["checksum"] == 1769472.0
        assert trial.user_attrs["regs"] == 32 + unroll  # read from the build's ptxas lines
    assert "-DTILE=128 -DUNROLL=1" in done.stdout.split("best:")[1].splitlines()[0]
    # the program's own figures are kept with the trial
    assert trials[(64, 1, 0)].user_attrs["program_tflops"] == f"{1 / fake_ms(64, 1):.2f}"


def test_each_fault_of_a_program_becomes_the_trials_status_with_its_reason(tmp_path):
    # PLANT: 1 the build fails, 2 the program exits 3, 3 a wrong checksum, 4 it hangs, 5 no @@RESULT, 6 spills,
    # 7 no checksum (where the reference prints one), 8 it hangs in a child it started
    study = write_study(tmp_path, "faults", kernel=KERNEL, tier1={"TILE": [128], "PLANT": [0, 1, 2, 3, 4, 5, 6, 7, 8]},
                        measure={"timeout_s": 3})
    db = tmp_path / "t.db"
    done = tuner("grid", study, "--storage", f"sqlite:///{db}", "--csv", tmp_path / "g.csv", env=env(tmp_path / "c"),
                 cwd=tmp_path, timeout=600)
    assert done.returncode == 0, done.stderr
    attrs = {plant: t.user_attrs for (_, _, plant), t in trials_by_config(db, "faults.grid").items()}
    assert attrs[0]["status"] == "ok"
    assert attrs[1]["status"] == "compile_error" and "planted build failure" in attrs[1]["reason"]
    assert attrs[2]["status"] == "launch_error"
    assert "exited 3" in attrs[2]["reason"] and "illegal memory access" in attrs[2]["reason"]
    assert attrs[3]["status"] == "mismatch" and "differs from the reference config's" in attrs[3]["reason"]
    assert attrs[4]["status"] == "hang"
    assert attrs[5]["status"] == "launch_error" and "no @@RESULT line" in attrs[5]["reason"]
    assert attrs[6]["status"] == "spills"
    assert attrs[7]["status"] == "mismatch" and "printed no checksum" in attrs[7]["reason"]
    assert attrs[8]["status"] == "hang"
    assert live_programs(tmp_path / "c") == [] and not sleepers()  # the child it started is gone too


def test_a_program_that_hangs_dies_with_its_worker(tmp_path):
    """The supervisor kills a worker whose program hangs; the program must not outlive it (on a GPU it would
    keep the device busy for every later trial)."""
    study = write_study(tmp_path, "hang", kernel=KERNEL, tier1={"TILE": [128], "PLANT": [0, 4]}, measure={"timeout_s": 2})
    done = tuner("grid", study, "--storage", f"sqlite:///{tmp_path / 't.db'}", "--csv", tmp_path / "g.csv",
                 env=env(tmp_path / "c"), cwd=tmp_path, timeout=600)
    assert done.returncode == 0, done.stderr
    assert "hang=1" in done.stdout
    assert live_programs(tmp_path / "c") == []


def sleepers() -> list[str]:
    """Processes the fixture's planted hangs start (``time.sleep(3600)``)."""
    found = []
    for proc in os.listdir("/proc"):
        if proc.isdigit():
            try:
                with open(os.path.join("/proc", proc, "cmdline"), "rb") as f:
                    if b"time.sleep(3600)" in f.read():
                        found.append(proc)
            except OSError:
                continue
    return found


def live_programs(cache) -> list[str]:
    """The pids of processes running a program built into ``cache``."""
    programs = {str(p) for p in cache.glob("*.program")}
    alive = []
    for proc in os.listdir("/proc"):
        if proc.isdigit():
            try:
                with open(os.path.join("/proc", proc, "cmdline"), "rb") as f:
                    argv = [a.decode(errors="replace") for a in f.read().split(b"\0")]
            except OSError:
                continue
            if programs & set(argv):
                alive.append(proc)
    return alive


def test_a_ctrl_c_during_a_program_stops_the_run_cleanly(tmp_path):
    """A terminal's Ctrl-C reaches the whole process group, the program too: the run stops in one line,
    records no config as failed for it, and leaves no program running."""
    study = write_study(tmp_path, "prog", kernel=KERNEL, tier1={"TILE": [32, 64, 128, 256], "UNROLL": [1, 2, 4]},
                        search={"trials": 40, "seed": 0})
    db = tmp_path / "t.db"
    run = subprocess.Popen([sys.executable, "-m", "tuner", "run", study, "--storage", f"sqlite:///{db}"],
                           stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, start_new_session=True, cwd=tmp_path,
                           env={**os.environ, **env(tmp_path / "c"), "FAKE_PROGRAM_S": "0.2"})
    err = stop_when(run, lambda: db.exists() and len(optuna.load_study(study_name="prog", storage=f"sqlite:///{db}")
                                                    .get_trials(states=(optuna.trial.TrialState.COMPLETE,))) >= 9,
                    "nine measured trials")
    assert run.returncode == 130 and "Traceback" not in err, err
    assert err.strip().splitlines()[-1] == "tuner: interrupted; finished trials are stored, run the same command to resume"
    statuses = {t.user_attrs.get("status") for t in optuna.load_study(study_name="prog", storage=f"sqlite:///{db}").trials}
    assert "launch_error" not in statuses and "ok" in statuses
    assert live_programs(tmp_path / "c") == []


def test_program_defaults_apply_only_where_the_study_sets_nothing(tmp_path):
    from tuner.run.session import Session

    study = write_study(tmp_path, "prog", kernel=KERNEL, tier1={"TILE": [64, 128]}, measure={"min_pairs": 9, "repeats": 12})
    loaded = Session(study, command="run").load()
    measure, search = loaded.cfg.measure, loaded.cfg.search
    assert (measure.min_pairs, measure.repeats) == (9, 12)  # the study's own
    assert (measure.warmup, measure.block, measure.timeout_s, search.confirm_rounds) == (1, 3, 120.0, 20)


def test_a_build_is_cached_by_source_command_and_config(tmp_path):
    spec = load_spec(KERNEL)
    config = {**spec.params, "TILE": 64}
    first = build_program(spec, config, {}, "sm_90a", tmp_path)
    again = build_program(spec, config, {}, "sm_90a", tmp_path)
    other = build_program(spec, {**config, "TILE": 128}, {}, "sm_90a", tmp_path)
    assert first.ok and not first.cached and again.cached and not other.cached
    assert again.cubin_path == first.cubin_path != other.cubin_path
    assert os.stat(first.cubin_path).st_mode & stat.S_IXUSR  # kept runnable
    assert "-DTILE=64" in first.log.splitlines()[0]  # the log starts with the command as run


def test_result_lines_are_read_or_refused_in_one_line():
    assert parse_result("x\n@@RESULT ms=0.630 tflops=1739 checksum=1769472.0\n").ms == 0.630
    indented = parse_result("  @@RESULT ms=1 checksum=3e+06\n")
    assert (indented.ms, indented.checksum, indented.extra) == (1.0, 3e6, {})
    with pytest.raises(NoResult, match="printed no @@RESULT line on stdout"):
        parse_result("", errors="@@RESULT ms=1\n")
    with pytest.raises(NoResult, match="printed no @@RESULT line .*; its last line: 'RESULT ms=1.2'"):
        parse_result("transpose done\nRESULT ms=1.2\n\n")  # the near miss, quoted
    for output, says in [("no line", "printed no @@RESULT line"), ("@@RESULT tflops=3", "no positive ms="),
                         ("@@RESULT ms=2\n@@RESULT ms=1", "printed 2 @@RESULT lines; print one"),
                         ("@@RESULT ms=abc", "is not a number"), ("@@RESULT ms=1 junk", "is not key=value"),
                         ("@@RESULT ms=nan", "no positive ms="), ("@@RESULT ms=inf", "no positive ms="),
                         ("@@RESULT ms=0", "no positive ms=")]:
        with pytest.raises(NoResult, match=says):
            parse_result(output)
    assert checksum_differs(100.0, 100.00001, 1e-6) is None
    assert "differs" in checksum_differs(100.0, 101.0, 1e-6)
    assert checksum_differs(None, None, 1e-6) is None  # neither printed one: nothing to hold it against
    assert "printed no checksum, where the reference config printed one" in checksum_differs(None, 101.0, 1e-6)
    assert "not a number (never written" in checksum_differs(parse_result("@@RESULT ms=1 checksum=nan").checksum, 1.0, 1e-6)


@pytest.mark.parametrize("body, says", [
    ('build = ""', "needs build ="),
    ('build = "nvcc {flags} {source}"', "must write the program to {binary}"),
    ('build = "nvcc {source} -o {binary}"', "must pass the config's defines"),
    ('build = "nvcc {flags} {cuda} -o {binary}"', "uses {cuda}; its names are"),
])
def test_a_program_spec_with_a_bad_command_fails_in_one_line(tmp_path, body, says):
    (tmp_path / "k.cu").write_text("#ifndef TILE\n#define TILE 64\n#endif\n")
    (tmp_path / "k.py").write_text(textwrap.dedent(f"""
        from tuner.spec import ProgramSpec
        class Spec(ProgramSpec):
            source = "k.cu"
            archs = ("sm_90a",)
            {body}
    """))
    with pytest.raises(UserError, match=says.replace("{", r"\{").replace("}", r"\}")):
        load_spec(tmp_path / "k.py")


def test_the_check_builds_a_program_kernel_without_asking_for_a_launch(tmp_path):
    study = write_study(tmp_path, "faults", kernel=KERNEL, tier1={"TILE": [64, 128], "PLANT": [0, 1, 6]})
    done = tuner("check", "--compile", "--json", study, env={"TUNER_CACHE_DIR": str(tmp_path / "c")}, cwd=tmp_path)
    report = json.loads(done.stdout)
    statuses = {(c["params"]["TILE"], c["params"]["PLANT"]): c["preflight"] for c in report["configs"]}
    assert statuses == {(64, 0): "passed", (128, 0): "passed", (64, 6): "rejected", (128, 6): "rejected",
                        (64, 1): "failed", (128, 1): "failed"}
    assert done.returncode == 1  # a build that fails is a config that would fail on the GPU


def test_the_example_harness_reads_its_kernels_defines_through_its_include():
    spec = load_spec(ROOT / "kernel" / "example_sgemm_program.py")
    assert {"BLOCK", "BLOCK_K", "THREAD_TILE", "UNROLL_K"} <= set(spec.params)  # guarded in example_sgemm.cu
    assert spec.problem_defaults == {"M_DIM": 2048, "N_DIM": 2048, "K_DIM": 2048}
    assert sys.executable  # (the fixture's build runs under this interpreter)


@pytest.mark.parametrize("settings, says", [
    ({"measure": {"reference": "baseline"}}, 'reference = "baseline": a program kernel has no host-side baseline'),
    ({"search": {"objectives": ["time", "energy"]}}, "a program kernel's energy per launch cannot be measured"),
])
def test_settings_a_program_cannot_serve_are_refused_in_one_line(tmp_path, settings, says):
    study = write_study(tmp_path, "prog", kernel=KERNEL, tier1={"TILE": [64, 128]}, **settings)
    done = tuner("run", study, "--storage", f"sqlite:///{tmp_path / 't.db'}", env=env(tmp_path / "c"), cwd=tmp_path)
    assert done.returncode == 2 and says in done.stderr and len(done.stderr.strip().splitlines()) == 1, done.stderr
    assert not (tmp_path / "t.db").exists()


def test_a_build_command_not_found_says_so(tmp_path):
    (tmp_path / "k.cu").write_text("#ifndef TILE\n#define TILE 64\n#endif\n")
    (tmp_path / "k.py").write_text(textwrap.dedent("""
        from tuner.spec import ProgramSpec
        class Spec(ProgramSpec):
            source = "k.cu"
            build = "no_such_compiler_here {flags} {source} -o {binary}"
    """))
    spec = load_spec(tmp_path / "k.py")
    built = build_program(spec, dict(spec.params), {}, "sm_90a", tmp_path / "c")
    assert built.status == "compile_error"
    assert "no_such_compiler_here" in built.reason and "not found" in built.reason and "exited 127" in built.reason


def test_a_link_error_names_what_is_missing_not_that_the_linker_failed(tmp_path):
    # nvcc 13's output for a harness that calls a function nothing defines
    (tmp_path / "link.py").write_text(textwrap.dedent("""
        import sys
        print("/usr/bin/ld: /tmp/tmpxft_00001e97_00000000-11_link.o: in function `main':")
        print("tmpxft_00001e97_00000000-6_link.cudafe1.cpp:(.text+0x33): undefined reference to `missing()'")
        print("collect2: error: ld returned 1 exit status")
        sys.exit(1)
    """))
    spec = write_spec(tmp_path, f'build = "{sys.executable} {{dir}}/link.py {{flags}} -o {{binary}}"')
    built = build_program(spec, dict(spec.params), {}, "sm_90a", tmp_path / "c")
    assert built.status == "compile_error"
    assert "undefined reference to `missing()'" in built.reason and "exited 1" in built.reason, built.reason


def test_a_host_dry_run_of_a_program_kernel_is_refused_in_one_line(tmp_path):
    study = write_study(tmp_path, "prog", kernel=KERNEL, tier1={"TILE": [64, 128]})
    done = tuner("check", "--host-dry-run", study, env=env(tmp_path / "c"), cwd=tmp_path)
    assert done.returncode == 2 and "launches its kernel itself: build it with --compile" in done.stderr


def write_spec(folder, body: str, source: str = "#ifndef TILE\n#define TILE 64\n#endif\n"):
    (folder / "k.cu").write_text(source)
    (folder / "k.py").write_text("from tuner.spec import ProgramSpec\nclass Spec(ProgramSpec):\n    source = 'k.cu'\n"
                                 + textwrap.indent(textwrap.dedent(body), "    "))
    return load_spec(folder / "k.py")


def test_parallel_builds_each_write_in_a_folder_of_their_own(tmp_path):
    """A build that writes a file by a relative name (an object file, as make does) sees its own only."""
    spec = write_spec(tmp_path, """
        build = "echo {flags} > obj.txt && sleep 0.3 && printf '#!/bin/sh\\necho @@RESULT ms=1 flags=' > {binary} && cat obj.txt | tr ' =' '_:' >> {binary}"
    """)
    from tuner.compile.nvrtc import CompilePool

    configs = [{"TILE": t} for t in (16, 32, 64, 128)]
    with CompilePool(spec, {}, "sm_90a", tmp_path / "c", jobs=4) as pool:
        for config in configs:
            pool.submit(config)
        built = [pool.result(c) for c in configs]
    for config, result in zip(configs, built, strict=True):
        assert result.ok, result.reason
        assert f"-DTILE:{config['TILE']}" in open(result.cubin_path).read()


def test_a_build_is_keyed_by_the_files_it_names_and_its_compiler_and_a_failure_is_not_kept(tmp_path):
    spec = write_spec(tmp_path, """
        build = "cat {dir}/part.txt > {binary} && echo {flags} > /dev/null"
        build_inputs = ("*.txt",)
    """)
    config = dict(spec.params)
    missing = build_program(spec, config, {}, "sm_90a", tmp_path / "c")
    assert missing.status == "compile_error" and "part.txt" in missing.reason
    (tmp_path / "part.txt").write_text("one")
    first = build_program(spec, config, {}, "sm_90a", tmp_path / "c")
    assert first.ok and not first.cached  # the failure was not kept
    assert build_program(spec, config, {}, "sm_90a", tmp_path / "c").cached
    (tmp_path / "part.txt").write_text("two")
    again = build_program(spec, config, {}, "sm_90a", tmp_path / "c")
    assert again.ok and not again.cached and open(again.cubin_path).read() == "two"


def test_a_hanging_build_is_killed_when_the_run_stops(tmp_path):
    from tuner.compile.nvrtc import CompilePool

    spec = load_spec(KERNEL)
    pool = CompilePool(spec, {}, "sm_90a", tmp_path / "c", jobs=2)
    pool.submit({**spec.params, "PLANT": 9})
    deadline = time.monotonic() + 30
    while not sleepers():
        assert time.monotonic() < deadline, "the build never started"
        time.sleep(0.1)
    started = time.monotonic()
    pool.close()
    assert time.monotonic() - started < 10 and not sleepers()


@pytest.mark.parametrize("body, says", [
    ('build = "nvcc {flags} ${CUDA_HOME} -o {binary}"', "uses {CUDA_HOME}"),
    ('build = "nvcc {flags} {source} -o {binary} }"', "Single '}' encountered"),
    ('build = "nvcc {flags} {source} -o {binary}"\nrun = "{binary} {arch}"', "run uses {arch}; its names are {binary}, {dir}"),
])
def test_braces_in_commands_are_read_or_refused_in_one_line(tmp_path, body, says):
    with pytest.raises(UserError, match=re.escape(says)):
        write_spec(tmp_path, body)


def test_a_shells_braces_are_written_twice_and_a_harness_s_other_macros_are_no_defines(tmp_path):
    spec = write_spec(tmp_path, 'build = "${{CC:-cc}} {flags} {source} -o {binary}"',
                      source='#include "consts.h"\n#ifndef TILE\n#define TILE 64\n#endif\n')
    assert "${CC:-cc} -DTILE=64" in spec.build_command(dict(spec.params), {}, "sm_90a", "/tmp/b")
    (tmp_path / "consts.h").write_text('#ifndef M_PI\n#define M_PI 3.14159265358979\n#endif\n'
                                       '#ifndef NAME\n#define NAME "my kernel"\n#endif\n'
                                       '#ifndef VEC\n#define VEC 4\n#endif\n')
    from tuner.contract import kernel_spec

    kernel_spec._loaded.clear()  # (load_spec keeps what it loaded)
    assert set(load_spec(tmp_path / "k.py").params) == {"TILE", "VEC"}


def test_a_run_where_every_trial_failed_says_how(tmp_path):
    study = write_study(tmp_path, "broken", kernel=KERNEL, tier1={"TILE": [32, 64, 128], "PLANT": [2]},
                        search={"trials": 3})
    done = tuner("run", study, "--storage", f"sqlite:///{tmp_path / 't.db'}", env=env(tmp_path / "c"), cwd=tmp_path)
    assert done.returncode == 1, done.stderr  # a script (CI) sees that nothing could be measured
    line = next(x for x in done.stdout.splitlines() if x.startswith("best:"))
    assert line.startswith("best: none yet (no trial completed: launch_error x3, e.g. ") and "exited 3" in line


def test_a_build_command_that_cannot_run_stops_the_run_before_any_trial(tmp_path):
    """Every config would fail the same way: the reference's build says so first, in one line, and
    nothing is stored (a study bound to a reference that never ran would refuse the fix)."""
    write_spec(tmp_path, 'build = "no_such_compiler_here {flags} {source} -o {binary}"')
    study = write_study(tmp_path, "broken", kernel=tmp_path / "k.py", tier1={"TILE": [32, 64, 128]}, search={"trials": 3})
    done = tuner("run", study, "--storage", f"sqlite:///{tmp_path / 't.db'}", env=env(tmp_path / "c"), cwd=tmp_path)
    assert done.returncode == 2 and len(done.stderr.strip().splitlines()) == 1, done.stderr
    assert "the reference, the kernel's defaults" in done.stderr and "no_such_compiler_here: not found" in done.stderr
    assert "[measure] reference" in done.stderr
    assert optuna.get_all_study_names(f"sqlite:///{tmp_path / 't.db'}") == []
