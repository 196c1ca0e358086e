"""A warm start's source configs mapped onto the target space, and the source's history as a prior."""

import numpy as np
import optuna
from optuna.distributions import CategoricalDistribution
from optuna.trial import TrialState

from tests.conftest import ROOT, tuner
from tests.test_sampler import recorded_space
from tuner.evaluate.replay import Record, make_replay_spec
from tuner.search import parzen
from tuner.search.parzen import ParzenSearch
from tuner.search.pool import PRIOR_WEIGHT, Observations, Pool
from tuner.search.sampler import ValidOnlySampler
from tuner.search.space import Space
from tuner.search.transfer import SpaceMap, nearest_value
from tuner.search.warm_start import (
    MARK,
    MOVED_MARK,
    MOVED_WEIGHT,
    SPREAD_MAX,
    prior_sources,
    prior_trials,
    space_map,
    spread_untuned,
    study_source,
    transfer_message,
    warm_start,
)

optuna.logging.set_verbosity(optuna.logging.WARNING)

OK = Record("ok", 1.0, [1.0])
#: the target: BLOCK ordered; METHOD unordered (strings); a block of 128 runs only with the method "b"
AXES = {"BLOCK": [16, 32, 64, 128], "METHOD": ["a", "b", "c"], "STAGES": [2, 3, 4]}


def target_space():
    return recorded_space(AXES, lambda c: None if c["BLOCK"] == 128 and c["METHOD"] != "b" else OK)[1]


def source_study(storage, name: str, configs: list[dict], values: list[float | None]) -> optuna.Study:
    """A finished study over any axes: a value per config, None for a failure (PRUNED)."""
    study = optuna.create_study(study_name=name, storage=storage)
    for config, value in zip(configs, values, strict=True):
        distributions = {a: CategoricalDistribution(sorted({c[a] for c in configs}, key=str)) for a in config}
        state = TrialState.COMPLETE if value is not None else TrialState.PRUNED
        study.add_trial(optuna.trial.create_trial(params=config, distributions=distributions, value=value, state=state,
                                                  user_attrs={"status": "ok" if value is not None else "compile_error"}))
    return study


def test_a_value_not_listed_takes_the_nearest_listed_number_or_the_default():
    assert nearest_value(64, [16, 32, 64], 16) == 64
    assert nearest_value(48, [16, 32, 64], 16) == 32  # a tie: the smaller
    assert nearest_value(100, [16, 32, 64], 16) == 64
    assert nearest_value(1, [0], 0) == 0  # FC1's EXTRA_TMA: only 0
    assert nearest_value("d", ["a", "b", "c"], "b") == "b"  # an unordered value not listed: the default
    assert nearest_value(3, ["a", "b"], "a") == "a"


def test_a_config_is_mapped_along_the_axes_order_and_its_moved_axes_are_named():
    space = target_space()
    mapper = space_map(space)
    same = mapper.map({"BLOCK": 32, "METHOD": "c", "STAGES": 3})
    assert same.params == {"BLOCK": 32, "METHOD": "c", "STAGES": 3} and same.moved == ()
    # 256 is not listed: the nearest, 128, which runs only with method "b"; of the one-axis moves
    # (BLOCK to 64, METHOD to "b"), one level step each, the first in enumeration order wins
    moved = mapper.map({"BLOCK": 256, "METHOD": "a", "STAGES": 5, "EXTRA": 1})
    assert moved.params == {"BLOCK": 64, "METHOD": "a", "STAGES": 4} and space.is_valid(moved.params)
    assert moved.moved == ("BLOCK", "STAGES")  # EXTRA is no axis here: not a move
    # a define the source tuned that this space does not search runs at the kernel's value here: moved
    recording, _ = recorded_space({**AXES, "BATCH": [0, 8]}, lambda c: OK)
    narrower = Space(make_replay_spec(recording), {}, AXES, list(AXES), [])
    assert space_map(narrower).map({"BLOCK": 16, "METHOD": "a", "STAGES": 2, "BATCH": 8}).moved == ("BATCH",)
    assert space_map(narrower).map({"BLOCK": 16, "METHOD": "a", "STAGES": 2, "BATCH": 0}).moved == ()
    # an axis the source did not tune takes the default and is not 'moved'
    partial = mapper.map({"BLOCK": 16})
    assert partial.params == {"BLOCK": 16, "METHOD": "a", "STAGES": 2} and partial.moved == ()


def test_the_nearest_valid_config_counts_differing_axes_first_then_level_steps():
    # valid: BLOCK 16 with any method, or any BLOCK with method "c"; from (128, "a") the one-axis moves
    # are (16, "a") (three BLOCK steps) and (128, "c") (one METHOD change): fewest steps wins
    space = recorded_space(AXES, lambda c: OK if c["BLOCK"] == 16 or c["METHOD"] == "c" else None)[1]
    mapper = SpaceMap(space, space.valid, [True, False, True])
    assert mapper.map({"BLOCK": 128, "METHOD": "a", "STAGES": 3}).params == {"BLOCK": 128, "METHOD": "c", "STAGES": 3}
    # with BLOCK unordered, a BLOCK change also costs one step: the tie goes to the first in enumeration order
    unordered = SpaceMap(space, space.valid, [False, False, True])
    assert unordered.map({"BLOCK": 128, "METHOD": "a", "STAGES": 3}).params == {"BLOCK": 16, "METHOD": "a", "STAGES": 3}
    # no valid config one axis away: the whole valid set is scanned
    far = recorded_space(AXES, lambda c: OK if (c["BLOCK"], c["METHOD"], c["STAGES"]) in {(16, "a", 2), (64, "c", 4)} else None)[1]
    assert space_map(far).map({"BLOCK": 128, "METHOD": "b", "STAGES": 4}).params == {"BLOCK": 64, "METHOD": "c", "STAGES": 4}


def test_warm_start_queues_the_sources_winners_moved_onto_this_space_and_says_so():
    """FC1 from patch_embed: the source's winners use a value the target does not list. They were
    dropped (nothing queued, nothing said); now they move to the nearest valid config."""
    storage = optuna.storages.InMemoryStorage()
    configs = [{"BLOCK": 256, "METHOD": "a", "STAGES": 3}, {"BLOCK": 32, "METHOD": "b", "STAGES": 3},
               {"BLOCK": 64, "METHOD": "d", "STAGES": 2}, {"BLOCK": 16, "METHOD": "a", "STAGES": 2}]
    source_study(storage, "src", configs, [1.0, 2.0, 3.0, None])
    space = target_space()
    target = optuna.create_study(study_name="dst", storage=storage)
    queued = warm_start(target, space, [study_source(storage, "src")], top=5)
    # a config the source measured as it runs here goes first; then the moved ones, best first
    assert [m.params for m in queued] == [{"BLOCK": 32, "METHOD": "b", "STAGES": 3}, {"BLOCK": 64, "METHOD": "a", "STAGES": 3},
                                          {"BLOCK": 64, "METHOD": "a", "STAGES": 2}]
    assert [m.moved for m in queued] == [(), ("BLOCK",), ("METHOD",)]
    waiting = target.get_trials(states=(TrialState.WAITING,))
    assert [t.user_attrs.get(MOVED_MARK) for t in waiting] == [None, ["BLOCK"], ["METHOD"]]
    prior = prior_trials(space, [study_source(storage, "src")])
    assert len(prior) == 4  # the three measured ones, moved; the failure needs no move
    assert [t.user_attrs[PRIOR_WEIGHT] for t in prior] == [MOVED_WEIGHT, 1.0, MOVED_WEIGHT, 1.0]  # less per moved define
    assert transfer_message(queued, len(prior), ["src"]) == \
        "warm start: 3 configs queued (2 moved to the nearest valid: BLOCK, METHOD), prior from 4 trials of src"
    assert warm_start(target, space, [study_source(storage, "src")]) is None  # once per study
    assert transfer_message(None, 1, ["src"]) == "warm start: prior from 1 trial of src"


def test_a_warm_start_from_several_sources_queues_top_configs_in_all():
    """Five recordings of other GPUs and a 25-trial run: five configs of each would be the whole run,
    with no trial left to the search. ``top`` is the queue's length, shared among the sources, the
    first ones taking what does not divide evenly; each source's prior is whole."""
    storage = optuna.storages.InMemoryStorage()
    blocks = [16, 32, 64]
    for index, name in enumerate(("gpu0", "gpu1", "gpu2")):
        configs = [{"BLOCK": b, "METHOD": m, "STAGES": 2 + index} for b in blocks for m in ("a", "b")]
        source_study(storage, name, configs, [1.0 + i for i in range(len(configs))])
    sources = [study_source(storage, name) for name in ("gpu0", "gpu1", "gpu2")]
    target = optuna.create_study(study_name="dst", storage=storage)
    queued = warm_start(target, target_space(), sources, top=5)
    assert [m.params["STAGES"] for m in queued] == [2, 2, 3, 3, 4]  # 2 + 2 + 1, each source's best first
    assert [m.params["BLOCK"] for m in queued] == [16, 16, 16, 16, 16]
    assert [t.user_attrs[MARK] for t in target.get_trials(states=(TrialState.WAITING,))] == \
        ["gpu0#0", "gpu0#1", "gpu1#0", "gpu1#1", "gpu2#0"]
    assert len(prior_trials(target_space(), sources)) == 18
    one = optuna.create_study(study_name="dst1", storage=storage)
    assert len(warm_start(one, target_space(), sources, top=1)) == 1  # more sources than configs: the first
    source_study(storage, "short", [{"BLOCK": 32, "METHOD": "a", "STAGES": 3}], [1.0])  # one config to give
    after_short = optuna.create_study(study_name="dst2", storage=storage)
    queued = warm_start(after_short, target_space(), [study_source(storage, "short"), *sources[1:]], top=5)
    assert [m.params["STAGES"] for m in queued] == [3, 3, 3, 4, 4]  # 1, then the rest shared: 2 + 2


def test_a_failure_that_would_have_to_move_stays_out_of_the_prior():
    """A failure says something of its own config only: moved, it would blame a config never run."""
    storage = optuna.storages.InMemoryStorage()
    configs = [{"BLOCK": 32, "METHOD": "a", "STAGES": 3}, {"BLOCK": 256, "METHOD": "b", "STAGES": 3},
               {"BLOCK": 32, "METHOD": "c", "STAGES": 2}]
    source_study(storage, "src", configs, [2.0, None, None])
    space = target_space()
    prior = prior_trials(space, [study_source(storage, "src")])
    assert [(t.params, t.state) for t in prior] == [(configs[0], TrialState.COMPLETE), (configs[2], TrialState.PRUNED)]
    assert prior[0].value == 1.0  # relative to the source's best


def test_a_source_config_stopped_as_slower_keeps_its_running_value_in_the_prior():
    """Most of a GPU study's trials stop early: each brings the running value it was stopped at, relative
    to the source's best like a measured one, and the target's model ranks it by that value."""
    storage = optuna.storages.InMemoryStorage()
    configs = [{"BLOCK": 32, "METHOD": "a", "STAGES": 3}, {"BLOCK": 64, "METHOD": "b", "STAGES": 3}]
    source = source_study(storage, "src", configs[:1], [2.0])
    source.add_trial(optuna.trial.create_trial(
        params=configs[1], distributions={a: CategoricalDistribution([v]) for a, v in configs[1].items()}, value=2.5,
        state=TrialState.PRUNED, user_attrs={"status": "pruned_slow"}))
    space = target_space()
    prior = prior_trials(space, [study_source(storage, "src")])
    assert [(t.state, t.value) for t in prior] == [(TrialState.COMPLETE, 1.0), (TrialState.PRUNED, 1.25)]
    sampler = ValidOnlySampler(space, ParzenSearch(seed=0))
    sampler.set_prior(prior)
    observed = sampler.prior_observations()
    assert observed.values == [1.0, 1.25] and not observed.slower and observed.best == 1.0


def test_a_source_config_stopped_with_a_value_is_in_the_prior_when_moved_too():
    """A stopped config's running value is as much a measurement as a finished one's (a GPU study stops
    most of its trials): moved onto this space it counts as a measured one does, less per moved define."""
    storage = optuna.storages.InMemoryStorage()
    source = source_study(storage, "src", [{"BLOCK": 32, "METHOD": "a", "STAGES": 3}], [2.0])
    stopped = {"BLOCK": 256, "METHOD": "b", "STAGES": 3}  # BLOCK 256: not listed here, moves to 128
    source.add_trial(optuna.trial.create_trial(
        params=stopped, distributions={a: CategoricalDistribution([v]) for a, v in stopped.items()}, value=2.5,
        state=TrialState.PRUNED, user_attrs={"status": "pruned_slow"}))
    prior = prior_trials(target_space(), [study_source(storage, "src")])
    assert [(t.params["BLOCK"], t.state, t.value, t.user_attrs[PRIOR_WEIGHT]) for t in prior] == [
        (32, TrialState.COMPLETE, 1.0, 1.0), (128, TrialState.PRUNED, 1.25, MOVED_WEIGHT)]


def test_an_axis_the_source_did_not_tune_is_spread_over_its_values_in_the_prior():
    """FC1 searches GELU_H2, patch_embed does not: a patch_embed trial says nothing of it, so it stands
    for each value at a share of its weight, not for the default alone (which would steer the search
    to the default's half of the space)."""
    storage = optuna.storages.InMemoryStorage()
    configs = [{"BLOCK": 32, "METHOD": "a"}, {"BLOCK": 64, "METHOD": "c"}]  # no STAGES
    source_study(storage, "src", configs, [1.0, 2.0])
    space = target_space()
    prior = prior_trials(space, [study_source(storage, "src")])
    assert [(t.params, t.user_attrs[PRIOR_WEIGHT]) for t in prior] == [
        ({**c, "STAGES": s}, 1 / 3) for c in configs for s in (2, 3, 4)]
    assert [t.value for t in prior] == [1.0] * 3 + [2.0] * 3
    assert prior_sources(prior) == 2  # what the run reports: "prior from 2 trials of src"
    # a source that tuned every axis: one config, the whole weight; too many combinations: the defaults stand in
    assert spread_untuned({"BLOCK": 32, "METHOD": "a", "STAGES": 3}, space) == [({"BLOCK": 32, "METHOD": "a", "STAGES": 3}, 1.0)]
    assert 4 * 3 * 3 > SPREAD_MAX and spread_untuned({}, space) == [({}, 1.0)]


def test_each_queued_config_is_tried_at_each_value_of_an_axis_the_source_did_not_tune():
    """FC1 from patch_embed on an H200: patch_embed's config that is FC1's best known was queued at
    GELU_H2 = 0, where it runs at 1.32-1.34 x its time at 1, and taught the search that its other axes
    were slow. Each queued config is now tried at each value (the best source config first)."""
    storage = optuna.storages.InMemoryStorage()
    configs = [{"BLOCK": 32, "METHOD": "a"}, {"BLOCK": 64, "METHOD": "c"}, {"BLOCK": 16, "METHOD": "b"}]  # no STAGES
    source_study(storage, "src", configs, [1.0, 2.0, 3.0])
    space = target_space()
    queued = warm_start(optuna.create_study(study_name="dst", storage=storage), space, [study_source(storage, "src")], top=2)
    assert [m.params for m in queued] == [{**c, "STAGES": s} for c in configs[:2] for s in (2, 3, 4)]
    assert all(m.moved == () and m.untuned == ("STAGES",) and m.each_value for m in queued)  # not a move
    assert transfer_message(queued, 6, ["src"]) == \
        "warm start: 6 configs queued (STAGES not in the source: each config at each of its values), prior from 6 trials of src"


def test_a_source_define_this_kernel_does_not_have_is_left_out_and_said():
    """Another version of the kernel as the source (benchmark_hub's convolution has ``use_shmem``, the MI50 cache of
    another repository does not): its configs transfer without that define, and the run says which it left out."""
    storage = optuna.storages.InMemoryStorage()
    configs = [{"BLOCK": 32, "METHOD": "a", "STAGES": 3, "use_shmem": 1}, {"BLOCK": 64, "METHOD": "c", "STAGES": 2, "use_shmem": 0}]
    source_study(storage, "src", configs, [1.0, 2.0])
    space = target_space()
    assert "use_shmem" not in space.full_config({})
    queued = warm_start(optuna.create_study(study_name="dst", storage=storage), space, [study_source(storage, "src")], top=2)
    assert [m.params for m in queued] == [{k: v for k, v in c.items() if k != "use_shmem"} for c in configs]
    assert all(m.moved == () and m.left_out == ("use_shmem",) for m in queued)
    assert transfer_message(queued, 2, ["src"]) == \
        "warm start: 2 configs queued (the source's use_shmem not in this kernel: left out), prior from 2 trials of src"


def test_with_more_than_four_combinations_of_untuned_values_the_queued_configs_take_them_in_turn():
    """Two untuned axes of three values: nine combinations per config would fill the queue with one
    config; the queued configs take them in turn instead (the best the first, the next the second, ...)."""
    storage = optuna.storages.InMemoryStorage()
    configs = [{"BLOCK": 32}, {"BLOCK": 64}, {"BLOCK": 16}]  # no METHOD, no STAGES
    source_study(storage, "src", configs, [1.0, 2.0, 3.0])
    space = target_space()
    assert 4 < 3 * 3 <= SPREAD_MAX
    queued = warm_start(optuna.create_study(study_name="dst", storage=storage), space, [study_source(storage, "src")], top=3)
    combinations = [("a", 2), ("a", 3), ("a", 4)]  # METHOD, STAGES in the order of the axes' values
    assert [m.params for m in queued] == [{**c, "METHOD": m, "STAGES": s} for c, (m, s) in zip(configs, combinations, strict=True)]
    assert not any(m.each_value for m in queued)
    assert transfer_message(queued, 9, ["src"]) == \
        "warm start: 3 configs queued (METHOD, STAGES not in the source: their values in turn), prior from 9 trials of src"


def test_a_prior_of_many_light_trials_is_as_wide_as_its_weight_in_trials():
    """A whole recording as the prior: thousands of configs, worth the random start-up in all. Its
    kernels are as wide as that weight in trials would make them, not narrowed onto each config as
    thousands of trials would (which kept warm starts in the source's region where the target's
    optimum lies elsewhere: docs/experiments/results_sampler.md, tenth session)."""
    levels, ordered = [8, 5, 3], [True, True, False]
    config = np.array([[3, 2, 1]], dtype=np.int32)
    candidates = np.stack(np.meshgrid(*(np.arange(n) for n in levels), indexing="ij"), axis=-1).reshape(-1, 3)
    light, heavy = parzen.Mixture(levels, ordered), parzen.Mixture(levels, ordered)
    light.add(np.repeat(config, 4000, axis=0), 10 / 4000)
    heavy.add(np.repeat(config, 10, axis=0), 1.0)
    rng = np.random.default_rng(0)
    assert np.allclose(light.log_density(candidates, rng), heavy.log_density(candidates, rng))
    wide = np.exp(heavy.log_density(candidates, rng))
    assert wide.max() / wide.min() < 1e3  # not a spike on the one config: its neighbours keep their share


def test_the_prior_joins_the_good_bad_split_weighted_below_one_and_fading(monkeypatch):
    """The source's trials enter the Parzen split with a weight < 1 each, worth at most the random
    start-up in all, that falls as the study's own trials accumulate."""
    space = target_space()
    storage = optuna.storages.InMemoryStorage()
    source = [{"BLOCK": b, "METHOD": m, "STAGES": s} for b in (16, 32, 64) for m in ("a", "b") for s in (2, 3)]
    source_study(storage, "src", source, [float(i + 1) for i in range(len(source))])
    search = ParzenSearch(seed=0)
    sampler = ValidOnlySampler(space, search)
    sampler.set_prior(prior_trials(space, [study_source(storage, "src")]))
    weights = []
    split = parzen._split
    monkeypatch.setattr(parzen, "_split", lambda sources, w, good, bad, *share: weights.append(list(w)) or split(sources, w, good, bad, *share))
    pool = Pool(space, space.valid)
    for row in range(8):
        search.propose(pool, sampler._ordered, sampler.prior_observations())
        pool._take(pool.codes[row], +1)
        pool.observations.add(pool.codes[row].copy(), 1.0 + row)
    prior_weights = [w[1] for w in weights]
    assert prior_weights[0] * len(source) <= 10 + 1e-9 and all(w < 1 for w in prior_weights)
    assert all(later < earlier for earlier, later in zip(prior_weights, prior_weights[1:], strict=False))


def test_in_tiered_mode_tier_2_is_held_at_its_defaults_and_not_reported():
    recording, _ = recorded_space(AXES, lambda c: None if c["BLOCK"] == 128 and c["METHOD"] != "b" else OK)
    tiered = Space(make_replay_spec(recording), {}, AXES, ["BLOCK", "METHOD"], ["STAGES"])
    mapped = space_map(tiered, tiered=True).map({"BLOCK": 128, "METHOD": "c", "STAGES": 4})
    assert mapped.params == {"BLOCK": 64, "METHOD": "c", "STAGES": 2} and mapped.moved == ("BLOCK",)  # a tie: enumeration order
    assert mapped.params in tiered.tier1_candidates()


def test_a_prior_config_moved_to_fit_counts_less_in_the_split():
    own, prior = Observations(), Observations()
    own.add(np.array([0, 0, 0]), 2.0)
    prior.add(np.array([1, 0, 0]), 1.0, weight=MOVED_WEIGHT)  # its source's best, moved along one define
    prior.add(np.array([2, 0, 0]), 3.0)
    good, bad = parzen.Mixture([4, 3, 3], [True, False, True]), parzen.Mixture([4, 3, 3], [True, False, True])
    parzen._split([own, prior], [1.0, 0.4], good, bad)
    # one of three is good (the study's own best, first of the ties); the prior's two are bad, the moved one at 0.4 x 0.5
    assert list(good.weights) == [1.0] and sorted(bad.weights) == [0.4 * MOVED_WEIGHT, 0.4]


def test_a_warm_started_search_climbs_from_the_best_transferred_config_at_once():
    """With a prior the plateau's one-axis moves do not wait for as many trials as there are axes
    without a new best: from the first proposal after the queue, every other one is a move from
    the study's best (a transferred optimum is an axis or two from this space's), the others the
    density ratio's."""
    consulted, moves = [], []

    class Watched(ParzenSearch):
        def _local_move(self, pool, own, ordered, log_feasible):
            consulted.append(own.since_best)
            row = super()._local_move(pool, own, ordered, log_feasible)
            moves.append(row)
            return row

    space = recorded_space({a: list(range(4)) for a in "abcde"}, lambda c: OK)[1]
    pool = Pool(space, space.valid)
    prior = Observations()
    for i, code in enumerate(pool.codes[:6]):
        prior.add(code.copy(), 1.0 + i)
    best = pool.codes[0].copy()  # the queue's best, measured
    pool._take(best, +1)
    pool.observations.add(best, 1.0)
    search = Watched(seed=0)
    for _ in range(10):  # none better: proposal i follows i observations without a new best
        code = pool.codes[search.propose(pool, [True] * 5, prior)].copy()
        pool._take(code, +1)
        pool.observations.add(code, 2.0)
    assert consulted == [0, 2, 4, 6, 8]  # without a prior: from the 5th (the axes) on
    assert all(np.count_nonzero(pool.codes[row] != best) == 1 for row in moves)


def test_a_warm_start_from_another_kernel_says_so():
    """Defines of one name in two kernels (block_size_x) need not behave alike: the run names both kernels."""
    caches = ROOT / "tests" / "data" / "kernel_tuner"
    other = tuner("run", "--replay", caches / "pnpoly_RTX_3090.json.gz", "--warm-start",
                  caches / "convolution_RTX_Titan.json.gz", "--storage", "memory", "--trials", 3)
    assert other.returncode == 0, other.stderr
    assert ("(another kernel: convolution_RTX_Titan.json.gz measured convolution_kernel; this study's is cn_pnpoly)"
            in other.stderr)
    same = tuner("run", "--replay", caches / "pnpoly_RTX_3090.json.gz", "--warm-start",
                 caches / "pnpoly_RTX_2080_Ti.json.gz", "--storage", "memory", "--trials", 3)
    assert same.returncode == 0 and "warm start:" in same.stderr and "another kernel" not in same.stderr
