"""Space counts over a kernel's constraint model; real NVRTC compiles with ptxas figures; the cache."""

import os
import stat

import pytest

from tests.conftest import ROOT
from tuner.compile.build import parse_ptxas
from tuner.compile.nvrtc import compile_kernel
from tuner.contract.kernel_spec import load_spec
from tuner.search.space import Space
from tuner.study.file import load_study

PROBLEM = {"M_DIM": 512, "N_DIM": 512, "K_DIM": 512}


def test_grid_plan_tier1_has_69_valid_of_108():
    cfg = load_study(ROOT / "tests" / "fixtures" / "sm100a_grid_plan.toml")
    space = Space.from_study(cfg, load_spec(cfg.kernel))
    assert space.total == 108
    assert len(space.valid) == 69
    assert sum(space.invalid.values()) == 39
    # every TN=128 config with 5 epilogue warps splits 64 columns into 2 per thread
    assert space.invalid["split COLS_PER_THREAD=N invalid (needs N or N): TN=N cannot use the Nth epilogue warp"] == 27
    assert space.invalid["SMEM N > N (N KB)"] == 12


def test_parallel_enumeration_equals_one_process_in_product_order(monkeypatch):
    from tuner.search import enumeration

    cfg = load_study(ROOT / "studies" / "patch_embed_sm90a_hopper_grid.toml")
    spec = load_spec(cfg.kernel)
    space = Space.from_study(cfg, spec)
    alone = enumeration.enumerate_valid(spec, space.problem, space.axes, space.fixed, space.total, jobs=1)
    monkeypatch.setattr(enumeration, "PARALLEL_FROM", 0)  # this space is small: split it anyway
    spread = enumeration.enumerate_valid(spec, space.problem, space.axes, space.fixed, space.total, jobs=2)
    assert len(alone.valid) == 1184
    assert spread.valid == alone.valid  # same configs, same order
    assert spread.invalid == alone.invalid and spread.invalid_examples == alone.invalid_examples


def python_main(code: str) -> str:
    """``code`` as a fresh interpreter's main module (helper pools fork from a forkserver): its output."""
    import subprocess
    import sys

    run = subprocess.run([sys.executable, "-c", code], cwd=ROOT, capture_output=True, text=True, timeout=200,
                         env={**os.environ, "PYTHONPATH": str(ROOT)})
    assert run.returncode == 0, run.stderr
    return run.stdout


@pytest.mark.parametrize("started", ["by the first pool", "ahead (start_helpers)"])
def test_pooled_helpers_find_the_engine_imported(started):
    """The enumeration's and the compile pool's processes are forked by a forkserver that imported
    NumPy and the spec machinery once (tuner.lifetime.helper_pool): none pays for those imports,
    whether the forkserver started with the first pool or ahead of it."""
    code = (
        "from tuner.lifetime import HELPER_MODULES, helper_pool, start_helpers\n"
        "if __name__ == '__main__':\n"
        f"    {'start_helpers()' if 'ahead' in started else 'pass'}\n"
        "    with helper_pool(2) as pool:\n"
        "        found = pool.submit(eval, f'[m in __import__(\"sys\").modules for m in {HELPER_MODULES!r}]')\n"
        "        print(found.result(), len(HELPER_MODULES))\n"
    )
    found, count = python_main(code).rsplit(" ", 1)
    assert found == str([True] * int(count)) and int(count) >= 2


def test_stopped_helpers_leave_their_work_and_the_process_exits():
    """A command that ends early must not wait for the helpers' work at exit (the interpreter joins a
    pool's work): stop_helpers ends the helpers (on Python before 3.14 through the pool's private
    process table) and cancels what is queued. The pool's manager thread has ended when it returns:
    the interpreter's exit writes to that thread's wake-up pipe without the lock its close holds
    (Python 3.11), and printed "Bad file descriptor" where the two met."""
    code = (
        "import threading, time\n"
        "from tuner.lifetime import helper_pool, stop_helpers\n"
        "if __name__ == '__main__':\n"
        "    pool = helper_pool(1)\n"
        "    busy, queued = pool.submit(time.sleep, 300), pool.submit(time.sleep, 300)\n"
        "    while not busy.running():\n"
        "        time.sleep(0.05)\n"
        "    stop_helpers()\n"
        "    managers = [t for t in threading.enumerate() if type(t).__name__ == '_ExecutorManagerThread']\n"
        "    print(len(managers), type(busy.exception(timeout=60)).__name__,\n"
        "          queued.cancelled() or type(queued.exception(timeout=60)).__name__)\n"
    )
    managers, busy, queued = python_main(code).split()
    assert busy == "BrokenProcessPool" and queued in ("True", "BrokenProcessPool")
    assert managers == "0"


def test_a_helper_orphaned_at_birth_ends_without_a_traceback():
    """A run killed while its pool starts a helper: the forkserver's child finds the request's pipe
    closed, and ends without printing a traceback into the run's terminal (tuner.orphaned_helpers)."""
    import subprocess
    import sys

    code = (
        "import os\n"
        "from multiprocessing import forkserver\n"
        "from tuner.lifetime import start_helpers\n"
        "if __name__ == '__main__':\n"
        "    start_helpers()\n"
        "    from_child, to_child = forkserver.connect_to_new_process([])\n"
        "    os.close(to_child)  # the requester is gone before it hands the helper its work\n"
        "    pid, code = forkserver.read_signed(from_child), forkserver.read_signed(from_child)\n"
        "    print(pid > 0, code)\n"
    )
    run = subprocess.run([sys.executable, "-c", code], cwd=ROOT, capture_output=True, text=True, timeout=200,
                         env={**os.environ, "PYTHONPATH": str(ROOT)})
    assert run.returncode == 0 and run.stdout.split() == ["True", "1"], run.stderr  # forked, and ended
    assert run.stderr == ""


@pytest.mark.parametrize(("error", "reported"), [("EOFError", False), ("pickle.UnpicklingError", False),
                                                 ("ValueError", True)])
def test_the_orphans_hook_hides_only_a_cut_off_request(error, reported):
    import subprocess
    import sys

    code = f"import pickle, tuner.orphaned_helpers\nraise {error}('boom')\n"
    run = subprocess.run([sys.executable, "-c", code], cwd=ROOT, capture_output=True, text=True, timeout=60,
                         env={**os.environ, "PYTHONPATH": str(ROOT)})
    assert run.returncode == 1
    assert ("Traceback" in run.stderr and "boom" in run.stderr) == reported, run.stderr


def test_space_enumerates_on_first_use_once(monkeypatch):
    from tuner.search import space as space_module

    calls = []
    real = space_module.enumerate_cached
    monkeypatch.setattr(space_module, "enumerate_cached", lambda *a, **k: calls.append(1) or real(*a, **k))
    cfg = load_study(ROOT / "studies" / "example_sgemm.toml")
    space = Space.from_study(cfg, load_spec(cfg.kernel))
    assert calls == []  # building the space checks nothing yet: a GPU worker starts meanwhile
    space.enumerate_soon()
    assert space.valid and space.is_valid(space.valid[0]) and sum(space.invalid.values()) == space.total - len(space.valid)
    assert calls == [1]


def test_configs_drawn_without_the_valid_set_are_valid_distinct_and_uniform_over_it(monkeypatch):
    """Each axis drawn uniformly, the invalid rejected: a study's first configs, drawn before the
    valid set is enumerated, come from all of it alike."""
    from collections import Counter

    import numpy as np

    from tuner.search import space as space_module

    cfg = load_study(ROOT / "tests" / "fixtures" / "sm100a_grid_plan.toml")
    space = Space.from_study(cfg, load_spec(cfg.kernel))
    monkeypatch.setattr(space_module, "enumerate_cached", lambda *a, **k: pytest.fail("drawing enumerated the space"))
    rng = np.random.default_rng(0)
    exclude = {space.key(p) for p in space.draw_valid(3, rng)}
    drawn = space.draw_valid(20, rng, exclude=exclude)
    assert len({space.key(p) for p in drawn}) == 20 and not {space.key(p) for p in drawn} & exclude
    assert all(space.check(p) is None for p in drawn)
    counts = Counter(space.key(p) for _ in range(6900) for p in space.draw_valid(1, rng))
    assert len(counts) == 69  # 100 draws expected each (seeded: the same counts every run)
    assert 60 < min(counts.values()) and max(counts.values()) < 140, counts.most_common(3)
    monkeypatch.undo()
    assert {space.key(p) for p in drawn} <= space.valid_keys
    checked = Counter()
    check = space.check
    monkeypatch.setattr(space, "check", lambda params: checked.update([space.key(params)]) or check(params))
    everything = space.draw_valid(100, rng)  # more than there are: every valid config, once
    assert sorted(space.key(p) for p in everything) == sorted(space.key(p) for p in space.valid)
    assert len(checked) == space.total and set(checked.values()) == {1}  # no config checked twice


def test_large_enumeration_is_kept_on_disk_and_redone_when_the_spec_changes(tmp_path, monkeypatch):
    import shutil

    from tuner.search import enumeration

    for name in ("gemm_sm90a.py", "gemm_sm90a.cu"):
        shutil.copy(ROOT / "kernel" / name, tmp_path / name)
    monkeypatch.setattr(enumeration, "CACHE_FROM", 0)  # the Hopper grid is small: keep it anyway
    cfg = load_study(ROOT / "studies" / "patch_embed_sm90a_hopper_grid.toml")

    def enumerate_now():
        spec = load_spec(tmp_path / "gemm_sm90a.py")
        space = Space.from_study(cfg, spec)
        return enumeration.enumerate_cached(spec, space.problem, space.axes, space.fixed, space.total, tmp_path / "spaces")

    first = enumerate_now()
    assert len(first.valid) == 1184 and len(list((tmp_path / "spaces").iterdir())) == 1
    checks = []
    real = enumeration.checked_reason
    monkeypatch.setattr(enumeration, "checked_reason", lambda *a: checks.append(1) or real(*a))
    again = enumerate_now()
    assert checks == []  # read back, not checked again
    assert again.valid == first.valid and again.invalid == first.invalid and again.invalid_examples == first.invalid_examples
    spec_file = tmp_path / "gemm_sm90a.py"
    spec_file.write_text(spec_file.read_text() + "\n# an edit: check() may have changed\n")
    assert enumerate_now().valid == first.valid and len(checks) == sum(first.invalid.values()) + 1184
    assert len(list((tmp_path / "spaces").iterdir())) == 2


def test_a_kernel_folders_valid_set_on_disk_follows_its_restrictions(tmp_path, monkeypatch):
    """A tune_kernel folder written again with other restrictions (kernel.json; the spec module stays the
    same), or another default of a define they read (the source's), is enumerated again, in a new process
    too, not read back from the first call's cache."""
    import json

    import tuner
    from tests.test_api import AXPY_SOURCE, axpy
    from tuner.contract import kernel_spec
    from tuner.search import enumeration

    monkeypatch.setattr(enumeration, "CACHE_FROM", 0)  # axpy's 15 configs: keep them anyway

    def valid_set(restrictions, source=AXPY_SOURCE):
        call = {**axpy(tmp_path / "k"), "restrictions": restrictions, "kernel_source": source}
        cfg = load_study(tuner.kernel_study(**call))
        kernel_spec._loaded.clear()  # as a new process starts
        spec = load_spec(cfg.kernel)
        space = Space.from_study(cfg, spec)
        found = enumeration.enumerate_cached(spec, space.problem, space.axes, space.fixed, space.total, tmp_path / "spaces")
        return {p["BLOCK_SIZE"] for p in found.valid}

    assert valid_set(["BLOCK_SIZE % 32 == 0"]) == {32, 64, 128, 256}
    assert json.loads((tmp_path / "k" / "kernel.json").read_text())["restrictions"] == ["BLOCK_SIZE % 32 == 0"]
    assert valid_set(["BLOCK_SIZE % 64 == 0"]) == {64, 128, 256}
    assert len(list((tmp_path / "spaces").iterdir())) == 2
    def unrolled(by):
        return f"#ifndef UNROLL\n#define UNROLL {by}\n#endif\n" + AXPY_SOURCE

    assert valid_set(["BLOCK_SIZE * UNROLL <= 128"], unrolled(1)) == {32, 48, 64, 128}
    assert valid_set(["BLOCK_SIZE * UNROLL <= 128"], unrolled(2)) == {32, 48, 64}
    files = enumeration._validity_files(load_spec(tmp_path / "k" / "spec.py"))
    assert all(f.is_file() for f in files)  # (the modules named are there)
    assert {"kernel.json", "light.py", "kernel_spec.py", "rules.py", "inline.py"} <= {f.name for f in files}


def test_tiered_candidates():
    cfg = load_study(ROOT / "studies" / "example_sgemm.toml")
    space = Space.from_study(cfg, load_spec(cfg.kernel))
    tier1 = space.tier1_candidates()
    assert tier1 and all(p["UNROLL_K"] == 1 for p in tier1)  # tier 2 held at the default
    winner = tier1[0]
    tier2 = space.tier2_candidates(winner)
    assert {p["UNROLL_K"] for p in tier2} == {0, 1}
    assert all(p["BLOCK"] == winner["BLOCK"] for p in tier2)


@pytest.mark.parametrize("arch", ["sm_90a", "sm_100a"])
def test_real_nvrtc_compile_reports_ptxas_figures(arch, cache_dir):
    spec = load_spec(ROOT / "kernel" / "example_sgemm.py")
    result = compile_kernel(spec, dict(spec.params), PROBLEM, arch, cache_dir)
    assert result.status == "ok", result.log
    assert 16 < result.regs <= 255
    assert result.spills == 0
    assert result.smem_static == spec.derive(spec.params, PROBLEM)["smem_bytes"]
    assert result.flags.startswith("-DM_DIM=512 -DN_DIM=512 -DK_DIM=512 -DBLOCK=64")
    assert os.path.getsize(result.cubin_path) > 1000
    with open(result.cubin_path, "rb") as f:
        assert f.read(4) == b"\x7fELF"  # a CUBIN, not PTX
    assert not result.cached and result.compile_s > 0

    again = compile_kernel(spec, dict(spec.params), PROBLEM, arch, cache_dir)
    assert again.cached and again.regs == result.regs and again.cubin_path == result.cubin_path


def test_cache_key_follows_options_and_source(tmp_path, cache_dir):
    kernel_dir = tmp_path / "k"
    kernel_dir.mkdir()
    for name in ("example_sgemm.py", "example_sgemm.cu"):
        (kernel_dir / name).write_text((ROOT / "kernel" / name).read_text())
    spec = load_spec(kernel_dir / "example_sgemm.py")
    first = compile_kernel(spec, dict(spec.params), PROBLEM, "sm_90a", cache_dir)
    other = compile_kernel(spec, dict(spec.params, UNROLL_K=0), PROBLEM, "sm_90a", cache_dir)
    assert not other.cached and other.cubin_path != first.cubin_path
    (kernel_dir / "example_sgemm.cu").write_text(spec.source_text() + "\n// edited\n")
    edited = compile_kernel(spec, dict(spec.params), PROBLEM, "sm_90a", cache_dir)
    assert not edited.cached


def test_compile_error_is_recorded_with_log(tmp_path, cache_dir):
    kernel_dir = tmp_path / "k"
    kernel_dir.mkdir()
    (kernel_dir / "example_sgemm.py").write_text((ROOT / "kernel" / "example_sgemm.py").read_text())
    (kernel_dir / "example_sgemm.cu").write_text((ROOT / "kernel" / "example_sgemm.cu").read_text().replace("acc[i][j] = 0.f;", "acc[i][j] = undefined_name;"))
    spec = load_spec(kernel_dir / "example_sgemm.py")
    result = compile_kernel(spec, dict(spec.params), PROBLEM, "sm_90a", cache_dir)
    assert result.status == "compile_error"
    assert "undefined_name" in result.log and "error" in result.reason


def test_register_and_spill_limits_prune(cache_dir):
    from tuner.compile.build import CompileLimits

    spec = load_spec(ROOT / "kernel" / "example_sgemm.py")
    config = dict(spec.params, BLOCK=128, THREAD_TILE=8)
    capped = compile_kernel(spec, config, PROBLEM, "sm_90a", cache_dir, CompileLimits(max_regs=64))
    assert capped.status == "too_many_regs" and "> 64" in capped.reason
    spilling = compile_kernel(spec, dict(spec.params, BLOCK=32, THREAD_TILE=1, BLOCK_K=8), PROBLEM, "sm_90a", cache_dir)
    assert spilling.status == "spills" and spilling.spills > 0


def test_a_build_whose_wgmmas_ptxas_serializes_is_rejected_before_the_gpu(cache_dir):
    """The Hopper GEMM's 128-row ping-pong tile with its K loop unrolled whole: ptxas makes every wgmma wait for
    the last (its C7520 note). The build is rejected with ptxas's reason, and measured as any other when
    the study turns the rule off; the same tile unrolled not, or promoted in 64-row tiles, passes."""
    from tuner.compile.build import CompileLimits

    spec = load_spec(ROOT / "kernel" / "gemm_sm90a.py")
    problem = {"M": 928256, "N": 3072, "K": 768, "EPILOGUE": "BIAS_GELU", "SEQ_LEN": 196}
    tile = {"BLOCK_M": 128, "BLOCK_N": 192, "N_STAGES": 4, "CLUSTER_M": 2, "CLUSTER_RELEASE": 1, "MMA_INFLIGHT": 1,
            "PINGPONG": 1, "SHARED_STAGING": 1, "BIAS_ACC": 1, "GELU_H2": 1}
    config = {**spec.params, **tile, "UNROLL_K": 6}
    assert spec.check(config, problem) is None
    serialized = compile_kernel(spec, config, problem, "sm_90a", cache_dir)
    assert serialized.status == "wgmma_serialized"
    assert serialized.reason == "ptxas serializes the wgmmas: program dependence on compiler-inserted WG.AR in divergent path"
    allowed = compile_kernel(spec, config, problem, "sm_90a", cache_dir, CompileLimits(reject_serialized_wgmma=False))
    assert allowed.status == "ok" and allowed.cached                  # the same build, from the cache
    assert compile_kernel(spec, {**config, "UNROLL_K": 0}, problem, "sm_90a", cache_dir).status == "ok"


def test_wgmma_serialized_reads_ptxas_note():
    from tuner.compile.build import wgmma_serialized

    note = ("ptxas info    : (C7514) Potential Performance Loss: wgmma.mma_async instructions are serialized due to "
            "non wgmma instructions reading accumulator registers of  a wgmma between start and end of the pipeline "
            "stage in the function 'gemm_sm90a'\nptxas info    : Used 168 registers\n")
    assert wgmma_serialized(note) == ("non wgmma instructions reading accumulator registers of a wgmma between "
                                      "start and end of the pipeline stage")
    assert wgmma_serialized("ptxas info    : Used 168 registers, used 16 barriers\n") is None


def test_unwritable_cache_still_compiles(tmp_path):
    if os.geteuid() == 0:
        # root ignores permissions: make the cache path a file instead
        blocked = tmp_path / "blocked"
        blocked.write_text("not a directory")
        cache = blocked / "sub"
    else:
        cache = tmp_path / "ro"
        cache.mkdir()
        cache.chmod(stat.S_IRUSR | stat.S_IXUSR)
    spec = load_spec(ROOT / "kernel" / "example_sgemm.py")
    with pytest.warns(UserWarning, match="not writable"):
        result = compile_kernel(spec, dict(spec.params), PROBLEM, "sm_90a", cache)
    assert result.status == "ok" and os.path.isfile(result.cubin_path)


def test_parse_ptxas_sums_spill_stores_and_loads():
    log = (
        "ptxas info    : Compiling entry function 'k' for 'sm_90a'\n"
        "ptxas         .     16 bytes stack frame, 8 bytes spill stores, 12 bytes spill loads\n"
        "ptxas info    : Used 222 registers, used 1 barriers, 1024 bytes smem, 400 bytes cmem[0]\n"
    )
    assert parse_ptxas(log) == {"regs": 222, "spills": 20, "stack": 16, "smem_static": 1024}


def test_compiling_leaves_the_interpreters_shared_bytes_alone(monkeypatch):
    """NVRTC writes its log and CUBIN into the buffers we hand it: they must be fresh and
    mutable. An empty log (one NUL byte) written into ``b" " * 1``, which is the immutable
    ``b" "`` itself and on CPython 3.12 the interpreter's shared one, turned every space the
    process encoded into NUL (torch's schema parser in the GPU worker broke)."""
    from cuda.bindings import nvrtc

    from tuner.compile.nvrtc import SourceBundle, _nvrtc_compile

    handed = []
    for name in ("nvrtcGetProgramLog", "nvrtcGetCUBIN"):
        real = getattr(nvrtc, name)
        monkeypatch.setattr(nvrtc, name, lambda prog, buf, real=real: (handed.append(buf), real(prog, buf))[1])
    ok, log, cubin = _nvrtc_compile(SourceBundle("quiet.cu", 'extern "C" __global__ void k() {}'), ["-arch=sm_90a"])
    assert ok and log == "" and cubin.startswith(b"\x7fELF")
    assert len(handed) == 2 and all(isinstance(buf, bytearray) for buf in handed)
    assert b" " == b"\x20"


def test_a_pool_gives_a_config_built_before_without_waiting_for_its_processes(cache_dir, monkeypatch):
    """A run's reference is usually in the cache: the pool reads it in this process instead of waiting
    for its first process to start (a forkserver and an interpreter: ~0.4 s of a run's start)."""
    from tuner.compile.nvrtc import CompilePool

    monkeypatch.setenv("TUNER_COMPILER", "tests/fake_backend.py:fake_nvrtc")
    spec = load_spec(ROOT / "kernel" / "example_sgemm.py")
    built = compile_kernel(spec, dict(spec.params), PROBLEM, "sm_90a", cache_dir)
    with CompilePool(spec, PROBLEM, "sm_90a", cache_dir, jobs=1) as pool:
        # the pool's processes (and a compile here) would fail on this job: only the cache can answer
        monkeypatch.setattr(pool, "job", lambda config: (str(cache_dir / "no_such_spec.py"), config, PROBLEM,
                                                         "sm_90a", str(cache_dir), pool.limits))
        pool.submit(dict(spec.params))
        again = pool.result(dict(spec.params))
    assert again.cached and again.cubin_path == built.cubin_path and again.regs == built.regs
