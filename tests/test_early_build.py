"""The reference's build begun with `tuner run`'s process, and its hand-over to the run's compile pool."""

import dataclasses

import pytest

from tests.conftest import ROOT
from tuner.compile.build import CompileLimits
from tuner.compile.nvrtc import CompilePool
from tuner.run.early_build import EarlyBuild
from tuner.run.reference import reference_config
from tuner.run.session import Session

STUDY = ROOT / "studies" / "patch_embed_sm90a.toml"  # a fixed arch and a start config: a build known up front


def run_pool(cache_dir, **limits):
    loaded = Session(STUDY).load()
    cfg, space = loaded.cfg, loaded.space
    pool = CompilePool(space.spec, dict(space.problem), cfg.arch, cache_dir, dataclasses.replace(CompileLimits.of(cfg.measure), **limits), jobs=2)
    return pool, reference_config(cfg, space)


def test_the_run_takes_the_early_build_of_its_reference_and_starts_no_compile_process(tmp_path):
    early = EarlyBuild.for_run(["run", str(STUDY), "--storage", f"sqlite:///{tmp_path / 'x.db'}", "--cache-dir", str(tmp_path)])
    pool, reference = run_pool(tmp_path)
    assert early.offer(pool, reference)
    pool.submit(reference)  # as the run's evaluator then asks: the build is already pending
    built = pool.result(reference)
    assert built.ok and built.regs and built.cubin_path.startswith(str(tmp_path))
    assert pool._executor is None  # no compile process was started for it
    assert early.build.done()


def test_an_early_build_of_another_build_is_not_taken(tmp_path):
    early = EarlyBuild.for_run(["run", str(STUDY), "--cache-dir", str(tmp_path / "elsewhere")])
    pool, reference = run_pool(tmp_path)
    assert not early.offer(pool, reference)  # another cache: the pool builds it itself
    other = EarlyBuild.for_run(["run", str(STUDY), f"--cache-dir={tmp_path}"])
    strict, reference = run_pool(tmp_path, max_regs=128)  # other limits than the study file's
    assert not other.offer(strict, reference)
    assert other.offer(run_pool(tmp_path)[0], reference)


@pytest.mark.parametrize("argv, study, cache", [
    (["run", "s.toml"], "s.toml", None),
    (["run", "--storage", "sqlite:///a.toml", "--json", "s.toml", "--trials", "5"], "s.toml", None),
    (["run", "--no-pruner", "--cache-dir", "c", "s.toml"], "s.toml", "c"),
    (["run", "--seed=3", "s.toml", "--cache-dir=c"], "s.toml", "c"),
])
def test_the_study_file_and_cache_are_peeked_from_the_command_line(argv, study, cache, monkeypatch):
    seen = []
    monkeypatch.setattr(EarlyBuild, "__init__", lambda self, s, c=None: seen.append((s, c)))
    assert EarlyBuild.for_run(argv) is not None and seen == [(study, cache)]


def test_no_study_file_and_a_bad_one_build_nothing(tmp_path):
    assert EarlyBuild.for_run(["run", "--replay", "cache.json"]) is None
    bad = tmp_path / "bad.toml"
    bad.write_text("[study]\nname = 1\n")
    early = EarlyBuild.for_run(["run", str(bad)])
    assert early.job.result(timeout=60) is None and not early.build.done()


def test_the_run_takes_the_valid_set_the_early_build_enumerates(tmp_path, monkeypatch):
    monkeypatch.setenv("TUNER_CACHE_DIR", str(tmp_path))
    early = EarlyBuild.for_run(["run", str(STUDY)])
    space = Session(STUDY).load().space
    assert early.share_space(space)
    early.space.result().enumerate()  # (whichever thread gets there first enumerates the early space once)
    from tuner.search import space as space_module

    monkeypatch.setattr(space_module, "enumerate_cached", lambda *a: pytest.fail("enumerated again"))
    assert space.valid is early.space.result().valid and len(space.valid) > 1000
    assert space.valid_keys == early.space.result().valid_keys and space.is_valid(space.valid[-1])
    narrower = Session(STUDY).load().space
    narrower.axes["BLOCK_N"] = narrower.axes["BLOCK_N"][:2]
    assert not early.share_space(narrower)


def test_the_switches_it_knows_are_the_run_commands_own():
    import argparse

    from tuner.cli.commands import build_parser
    from tuner.run import early_build

    commands = next(a for a in build_parser()._actions if isinstance(a, argparse._SubParsersAction))
    switches = {o for a in commands.choices["run"]._actions if a.nargs == 0 for o in a.option_strings}
    assert switches - {"-h", "--help"} == early_build._SWITCHES  # a flag's value is never taken for the study file


def test_the_start_configs_are_measured_while_the_valid_set_is_enumerated(tmp_path, monkeypatch):
    """A large space with an empty cache takes seconds to enumerate: the queued start configs need no
    valid set, so the first results come meanwhile; the search goes on from them once it is known."""
    import threading
    import time

    import optuna

    from tests.conftest import PNPOLY
    from tuner.evaluate.replay import ReplayEvaluator, load_recording, make_replay_spec
    from tuner.run.runner import Runner, RunSettings
    from tuner.search.space import Space

    monkeypatch.setenv("TUNER_CACHE_DIR", str(tmp_path))
    recording = load_recording(PNPOLY)
    # the recording's configs checked one by one, as a kernel's model is (a replay's own space knows them at once)
    space = Space(make_replay_spec(recording), {}, recording.axes, list(recording.axes), [])
    start = [{"between_method": 0, "block_size_x": 32, "tile_size": 1, "use_method": 0},
             {"between_method": 1, "block_size_x": 64, "tile_size": 2, "use_method": 1}]
    assert all(recording.lookup(config).status == "ok" for config in start)
    settings = RunSettings(study_name="s", sampler="tpe", trials=6, seed=0, pruner=False, progress=None, start=start)
    runner = Runner(space, ReplayEvaluator(recording), settings, storage_url="memory")
    assert not space.enumerated

    known = threading.Event()  # the enumeration ends once the start configs are measured (or after 60 s)
    enumerate_now = space.enumerate
    finished_when_known: list[int] = []

    def slow_enumeration():
        known.wait(60)
        finished_when_known.append(sum(t.state.is_finished() for t in runner.study.get_trials(deepcopy=False)))
        return enumerate_now()

    def release_after_the_start_configs():
        deadline = time.monotonic() + 60
        while time.monotonic() < deadline and sum(t.state.is_finished() for t in runner.study.get_trials(deepcopy=False)) < 2:
            time.sleep(0.01)
        known.set()

    monkeypatch.setattr(space, "enumerate", slow_enumeration)
    threading.Thread(target=release_after_the_start_configs, daemon=True).start()
    runner.run()
    trials = runner.study.get_trials(states=(optuna.trial.TrialState.COMPLETE,))
    assert finished_when_known[0] == 2  # both start configs measured before the valid set was known
    assert [t.params for t in trials[:2]] == start and len(trials) == 6
    assert len({tuple(t.params.values()) for t in trials}) == 6  # the search after them repeats none
