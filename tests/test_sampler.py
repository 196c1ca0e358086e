"""The valid-only sampler's guarantees, cost and models, on synthetic and recorded spaces."""

import itertools
import statistics
import types
from pathlib import Path

import numpy as np
import optuna
import pytest
from optuna.trial import TrialState

from tests.conftest import KERNEL_TUNER_CACHES, ROOT
from tuner.evaluate.replay import Record, Recording, ReplayEvaluator, recording_space
from tuner.run.runner import Runner, RunSettings
from tuner.search import parzen
from tuner.search.distributions import suggest
from tuner.search.parzen import ParzenSearch, choose_kernels
from tuner.search.pool import Observations, Pool
from tuner.search.sampler import PROPOSERS, ValidOnlySampler, make_proposer
from tuner.search.space import Space
from tuner.study.options import SAMPLERS
from tuner.testing import ask_seconds, replay_space

optuna.logging.set_verbosity(optuna.logging.WARNING)


def recorded_space(axes: dict, outcome) -> tuple[Recording, Space]:
    """A recording over ``axes`` where ``outcome(config)`` gives a Record or None (restricted)."""
    records = {}
    for values in itertools.product(*axes.values()):
        record = outcome(dict(zip(axes, values, strict=True)))
        if record is not None:
            records[values] = record
    recording = Recording(Path("synthetic"), "csv", {a: list(v) for a, v in axes.items()}, records)
    recording.digest = lambda: "synthetic"  # no file behind it
    return recording, recording_space(recording)


def ask_cost(space: Space, recording: Recording, trials: int = 120, measured_from: int = 40) -> float:
    return statistics.median(ask_seconds(space, recording, trials)[measured_from:])


def test_ask_cost_does_not_grow_with_the_space():
    def smooth(config):
        if (sum(config.values()) * 7919) % 3 == 0:  # a third restricted away
            return None
        ms = 1.0 + sum(abs(v - 3) for v in config.values())
        return Record("ok", float(ms), [float(ms)] * 10)

    small_axes = {a: list(range(v)) for a, v in zip("abcd", (12, 10, 6, 2), strict=True)}  # 1,440 configs, ~960 valid
    large_axes = {**small_axes, "e": list(range(10)), "f": list(range(10))}  # 144,000 configs, ~96,000 valid
    small, large = recorded_space(small_axes, smooth), recorded_space(large_axes, smooth)
    assert len(large[1].valid) > 90 * len(small[1].valid)
    small_cost, large_cost = ask_cost(small[1], small[0]), ask_cost(large[1], large[0])
    print(f"median ask: {1e3 * small_cost:.2f} ms at {len(small[1].valid)} valid, {1e3 * large_cost:.2f} ms at {len(large[1].valid)}")
    assert large_cost < 10 * small_cost


def failing_region_space() -> tuple[Recording, Space]:
    """Configs with a >= 12 fail at launch; the fastest ones (a = 11) border them."""
    def planted(config):
        if config["a"] >= 12:
            return Record("launch_error", attrs={"reason": "too many resources"})
        ms = 1.0 + abs(config["a"] - 11) + 0.5 * abs(config["b"] - 5) + 0.25 * config["c"]
        return Record("ok", float(ms), [float(ms)] * 10)

    return recorded_space({"a": list(range(16)), "b": list(range(12)), "c": list(range(8))}, planted)


def test_failures_make_their_region_proposed_less():
    """Configs with a >= 12 fail at launch; their neighbours just below are the fastest, so the
    value model alone would draw the search into the failing region (0.28 of the proposals after
    20 trials, measured with the feasibility model switched off). The optimum is found early, so
    most of these trials are a plateau, where every other proposal is the density ratio's: soft
    feasibility lets some through (0.15 where moves alone gave 0.11)."""
    recording, space = failing_region_space()
    share = sum(p["a"] >= 12 for p in space.valid) / len(space.valid)  # 0.25
    rates = []
    for seed in range(6):
        settings = RunSettings(study_name=f"f{seed}", sampler="tpe", trials=80, seed=seed, pruner=False, progress=None)
        runner = Runner(space, ReplayEvaluator(recording), settings, storage_url="memory")
        runner.run()
        after_start = runner.study.trials[20:]
        rates.append(sum(t.params["a"] >= 12 for t in after_start) / len(after_start))
    print(f"failing region: {share:.2f} of the space, {statistics.mean(rates):.3f} of the proposals after 20 trials {rates}")
    assert statistics.mean(rates) < 0.7 * share


def test_few_failures_on_a_recorded_space_where_a_fifth_fail():
    """Convolution on a TITAN RTX: 22 % of the valid configs fail (compile, launch, run). The
    feasibility model keeps them under a third of that share of 100 trials (random: the share)."""
    recording, space = replay_space(KERNEL_TUNER_CACHES / "convolution_RTX_Titan.json.gz")
    failing = [(r := recording.lookup(p)) is None or r.status != "ok" for p in space.valid]
    share = sum(failing) / len(failing)
    assert 0.2 < share < 0.25
    rates = []
    for seed in range(5):
        settings = RunSettings(study_name=f"t{seed}", sampler="tpe", trials=100, seed=seed, pruner=False, progress=None)
        runner = Runner(space, ReplayEvaluator(recording), settings, storage_url="memory")
        runner.run()
        rates.append(sum(t.state != TrialState.COMPLETE for t in runner.study.trials) / len(runner.study.trials))
    print(f"failing configs: {share:.3f} of the space, {statistics.mean(rates):.3f} of 100 trials {rates}")
    assert statistics.mean(rates) < share / 3


def test_substitution_does_not_favour_the_axis_with_most_values():
    recording, space = recorded_space({"wide": list(range(32)), "narrow": [0, 1, 2]},
                                      lambda c: Record("ok", 1.0 + c["wide"] + c["narrow"], [1.0]))
    sampler = ValidOnlySampler(space, make_proposer("random", 0), seed=0)
    pool = sampler.pool
    centre = pool.encode({"wide": 16, "narrow": 1})
    pool.tried[pool.row(centre)] = 1  # the proposal is taken: it must move one axis by one level
    moved = []
    for _ in range(400):
        code = pool.codes[sampler.nearest(centre)]
        moved.append("wide" if code[0] != centre[0] else "narrow")
        assert sum(code != np.asarray(centre)) == 1 and abs(int(code[0]) - 16) + abs(int(code[1]) - 1) == 1
    assert 0.35 < moved.count("wide") / len(moved) < 0.65


def test_a_failed_trial_frees_its_config_and_nothing_is_proposed_twice():
    recording, space = recorded_space({"a": [1, 2, 3], "b": [0, 1]}, lambda c: Record("ok", float(c["a"] + c["b"]), [1.0]))
    sampler = ValidOnlySampler(space, make_proposer("tpe", 0), seed=0)
    study = optuna.create_study(sampler=sampler)
    first = study.ask()
    params = {a: first.suggest_categorical(a, v) for a, v in space.axes.items()}
    study.tell(first, state=TrialState.FAIL)  # killed before it was measured: its config is free again
    seen = []
    for _ in range(6):
        trial = study.ask()
        seen.append(tuple(trial.suggest_categorical(a, v) for a, v in space.axes.items()))
        study.tell(trial, 1.0)
    assert sorted(seen) == sorted(itertools.product([1, 2, 3], [0, 1]))  # all six, the freed one included
    assert tuple(params.values()) in seen
    trial = study.ask()  # nothing left: a repeat, and the sampler says so
    trial.suggest_categorical("a", [1, 2, 3])
    assert sampler.exhausted


def test_on_a_plateau_moves_and_the_density_ratio_take_turns():
    """Once as many trials as there are axes bring no new best, every other proposal is a
    one-axis move and the others come from the density ratio (a flat landscape: never a new best)."""
    consulted = []

    class Watched(ParzenSearch):
        def _local_move(self, pool, own, ordered, log_feasible):
            consulted.append(own.since_best)
            return super()._local_move(pool, own, ordered, log_feasible)

    recording, space = recorded_space({"a": list(range(12)), "b": list(range(6)), "c": [0, 1]},
                                      lambda c: Record("ok", 1.0, [1.0]))
    study = optuna.create_study(sampler=ValidOnlySampler(space, Watched(seed=0), seed=0))
    for _ in range(40):
        trial = study.ask()
        for axis, values in space.axes.items():
            trial.suggest_categorical(axis, values)
        study.tell(trial, 1.0)
    patience = 3  # the axes
    # proposal i follows i observations, i - 1 of them without a new best; 0-9 are the random start-up
    assert consulted == [i - 1 for i in range(10, 40) if (i - 1 - patience) % 2 == 0]


def test_a_local_move_whose_bases_are_spent_weighs_them_in_a_few_groups():
    """Late on a plateau most bases have no untried move left that is likely to work: the bases'
    moves are weighed in groups of 1, 2, 4, ... (one feasibility evaluation each), and a move,
    when there is one, is untried, one axis from a base and predicted to work."""
    evaluations, moves = [], []

    class Watched(ParzenSearch):
        def _local_move(self, pool, own, ordered, log_feasible):
            calls = [0]

            def counted(codes):
                calls[0] += 1
                return log_feasible(codes)

            row = super()._local_move(pool, own, ordered, counted)
            bases = parzen._bases(own, len(pool.levels))
            evaluations.append((calls[0], len(bases)))
            if row is not None:
                code = pool.codes[row]
                assert not pool.tried[row]
                assert any(np.count_nonzero(code != own.measured[i]) == 1 for i in bases)
                moves.append(row)
            return row

    # a third of the configs fail (b < 2) and the rest are all equally fast: a plateau from the start
    recording, space = recorded_space({"a": list(range(12)), "b": list(range(6)), "c": [0, 1]},
                                      lambda c: Record("ok", 1.0, [1.0]) if c["b"] >= 2 else Record("compile_error", None, None))
    study = optuna.create_study(sampler=ValidOnlySampler(space, Watched(seed=0), seed=0))
    for _ in range(110):
        trial = study.ask()
        config = {axis: trial.suggest_categorical(axis, values) for axis, values in space.axes.items()}
        record = recording.lookup(config)
        if record.ms is None:
            trial.set_user_attr("status", record.status)
            study.tell(trial, state=TrialState.PRUNED)
        else:
            study.tell(trial, record.ms)
    assert moves and len(evaluations) > len(moves)  # some local moves found nothing
    for calls, bases in evaluations:
        assert calls <= (bases + 1).bit_length()  # groups of 1, 2, 4, ... cover the bases


def test_once_the_best_config_has_no_move_left_the_moves_climb_from_another_basin():
    """The best config with some value of an axis is the top of another basin only where no better
    config lies one axis away; else it is the incumbent's own basin again, one axis over, and its
    moves come after those of every basin's top."""
    recording, space = recorded_space({"a": [0, 1, 2, 3], "b": [0, 1], "c": [0, 1]}, lambda c: Record("ok", 1.0, [1.0]))
    pool = Pool(space, space.valid)
    measured = {(0, 0, 0): 1.0,  # the incumbent: every one-axis move from it is tried
                (1, 0, 0): 2.0, (2, 0, 0): 5.0, (3, 0, 0): 5.0, (0, 1, 0): 5.0, (0, 0, 1): 5.0,  # its slope
                (3, 1, 1): 3.0}  # another basin's top, slower than the slope's best
    for code, value in measured.items():
        pool._take(np.array(code), +1)
        pool.observations.add(np.array(code), value)
    slope, other_top = np.array([1, 0, 0]), np.array([3, 1, 1])
    search = ParzenSearch(seed=0)
    for seed in range(20):
        search.rng = np.random.default_rng(seed)
        row = search._local_move(pool, pool.observations, [True, False, False], lambda codes: np.zeros(len(codes)))
        move = pool.codes[row]
        assert np.count_nonzero(move != other_top) == 1 and np.count_nonzero(move != slope) > 1


def test_a_move_along_an_ordered_axis_whose_near_levels_are_spent_may_go_to_any_untried_level():
    """Block sizes 8..96 in steps of 8, fastest at 16 and again from 64 on, slower between: once the
    levels around 16 are tried and slower, a climb held to the nearest levels would stay at 16."""
    sizes = list(range(8, 104, 8))
    recording, space = recorded_space({"block": sizes, "unroll": [1, 2]}, lambda c: Record("ok", 1.0, [1.0]))
    pool = Pool(space, space.valid)
    measured = {(1, 0): 1.0, (0, 0): 2.0, (2, 0): 2.0, (3, 0): 2.5, (4, 0): 3.0, (1, 1): 2.0}
    for code, value in measured.items():
        pool._take(np.array(code), +1)
        pool.observations.add(np.array(code), value)

    near = pool.steps(np.array([4, 0]), [True, False])  # from 40: 48 is untried, 32 and below spent
    assert [pool.codes[row][0] for row in near[0]] == [5]
    line = pool.steps(np.array([1, 0]), [True, False])  # from 16: every level within reach tried
    assert sorted(int(pool.codes[row][0]) for row in line[0]) == list(range(5, len(sizes)))
    assert line[1] == []  # unroll 2 at 16 is tried

    search = ParzenSearch(seed=0)
    reached = set()
    for seed in range(40):
        search.rng = np.random.default_rng(seed)
        row = search._local_move(pool, pool.observations, [True, False], lambda codes: np.zeros(len(codes)))
        block, unroll = pool.codes[row]
        assert unroll == 0 and block >= 5
        reached.add(int(block))
    assert max(reached) >= sizes.index(64)  # the line reaches the other fast region


def test_a_move_to_a_level_valid_only_with_another_axis_changed_changes_that_axis_too():
    """Dedispersion's tile_size_y runs at 1 only with tile_stride_y 0, and a climb from a tile of 2 with a
    stride of 1 had no move to 1 (the optimum on an MI250X): the move now goes there with the stride
    changed as well, the nearest valid change of one other axis."""
    def outcome(c):
        if c["tile_y"] == 1 and c["stride_y"] == 1:
            return None  # a stride needs a tile of two or more
        return Record("ok", 1.0, [1.0])

    recording, space = recorded_space({"block": [32, 64, 96, 128], "tile_y": [1, 2, 3, 4], "stride_y": [0, 1]}, outcome)
    pool = Pool(space, space.valid)
    ordered = [True, True, False]
    base = pool.encode({"block": 64, "tile_y": 2, "stride_y": 1})
    moves = pool.steps(np.array(base), ordered)
    assert [pool.decode(pool.codes[row]) for row in moves[1]] == [
        {"block": 64, "tile_y": 3, "stride_y": 1},  # up, as before
        {"block": 64, "tile_y": 1, "stride_y": 0},  # down: the stride moved with it
    ]
    row = pool.row(pool.encode({"block": 64, "tile_y": 3, "stride_y": 1}))
    pool._take(np.array(pool.encode({"block": 64, "tile_y": 1, "stride_y": 0})), +1)
    assert pool.steps(np.array(base), ordered)[1] == [row]  # tried: no other one-axis change makes tile 1 valid
    for tile in (3, 4):
        pool._take(np.array(pool.encode({"block": 64, "tile_y": tile, "stride_y": 1})), +1)
    pool._take(np.array(pool.encode({"block": 64, "tile_y": 1, "stride_y": 0})), -1)
    assert pool.steps(np.array(base), ordered)[1] == []  # a repaired move alone does not make the axis one to draw
    from_no_stride = pool.steps(np.array(pool.encode({"block": 64, "tile_y": 2, "stride_y": 0})), ordered)
    assert [pool.decode(pool.codes[row]) for row in from_no_stride[1]] == [  # valid both ways: one axis each
        {"block": 64, "tile_y": 1, "stride_y": 0}, {"block": 64, "tile_y": 3, "stride_y": 0}]


def test_an_ordered_axis_is_counted_same_or_different_where_its_good_values_alternate():
    """Axis 0 (8 levels): good at the even levels only; axis 1 (6 levels): good at the low ones."""
    def observed(n: int) -> Observations:
        obs = Observations()
        for i in range(n):
            a, b = i % 8, (i * 5) % 6
            obs.add(np.array([a, b]), 1.0 + 4.0 * (a % 2) + 0.5 * b + 0.01 * i)
        return obs

    assert choose_kernels(observed(80), [8, 6], [True, True]) == [False, True]  # 8 good of 80
    assert choose_kernels(observed(80), [8, 6], [False, True]) == [False, True]  # a choice axis stays one
    assert choose_kernels(observed(40), [8, 6], [True, True]) == [True, True]  # 4 good of 40: too few to choose


def seeds_finding_the_optimum(recording: Recording, space: Space, seeds: range, trials: int) -> int:
    """How many of ``seeds`` find the recording's optimum within ``trials`` (cold runs, no pruner)."""
    hits = 0
    for seed in seeds:
        settings = RunSettings(study_name=f"s{seed}", sampler="tpe", trials=trials, seed=seed, pruner=False, progress=None)
        runner = Runner(space, ReplayEvaluator(recording), settings, storage_url="memory")
        runner.run()
        hits += runner.study.best_value <= recording.optimum() * (1 + 1e-9)
    return hits


def wavefront_space() -> tuple[Recording, Space]:
    """block_size_x in steps of 16, 10 % faster at multiples of 64 (an AMD wavefront), and four other axes."""
    axes = {"block_size_x": list(range(16, 257, 16)), "block_size_y": [1, 2, 4, 8], "tile_x": list(range(1, 7)),
            "tile_y": [1, 2, 3, 4], "flag": [0, 1]}

    def outcome(c):
        wavefront = 1.0 if c["block_size_x"] % 64 == 0 else 1.1
        shape = 1 + 0.15 * abs(c["tile_x"] - 4) + 0.1 * abs(c["tile_y"] - 2) + 0.2 * c["flag"]
        jitter = 1 + 0.05 * ((c["block_size_x"] * 31 + c["block_size_y"] * 7 + c["tile_x"] * 3) % 5)
        return Record("ok", wavefront * shape * jitter, [1.0])

    return recorded_space(axes, outcome)


@pytest.mark.slow  # sampler quality: 40 runs of 120 trials
def test_a_block_size_fast_at_multiples_of_a_wavefront_is_found(monkeypatch):
    """block_size_x in steps of 16 runs 10 % faster at multiples of 64 (an AMD wavefront): its good
    values alternate with slower ones, and the ordinal kernel spreads their weight onto the slower
    neighbours. Two things find the optimum anyway, each on every seed within 120 trials: the axis
    checked against the data is counted same / different, and a plateau's move along the axis goes
    past its spent near levels to the next multiple of 64 (with the nearest levels only and the
    kernel kept ordinal, 7 of 40 seeds missed it in 100 trials, 2 in 150)."""
    recording, space = wavefront_space()
    monkeypatch.setattr(parzen, "alignments", lambda values: ())  # the axis read by its order (or not) alone

    chosen = seeds_finding_the_optimum(recording, space, range(20), trials=120)
    monkeypatch.setattr(parzen, "MIN_GOOD_TO_CHOOSE_KERNEL", 10**9)  # never choose: ordinal throughout
    ordinal = seeds_finding_the_optimum(recording, space, range(20), trials=120)
    print(f"optimum found in 120 trials: {chosen} of 20 seeds with the kernel choice, {ordinal} kept ordinal")
    assert chosen == 20 and ordinal == 20


def code_path_space() -> tuple[Recording, Space]:
    """Three flags select code paths. With ``shmem`` and ``cached`` both on, every shape runs at 1.25 or
    more, slowly worse away from one shape; with both off, that shape runs at 1.0 (the optimum) and the
    others many times slower (a path poor on average); with one of the two on, every shape is slower
    than 1.9. The best config's single flips are all slower: the optimum is two flags away."""
    axes = {"block": [16, 32, 48, 64, 80, 96, 112, 128], "tile": [1, 2, 3, 4, 5, 6], "unroll": [1, 2, 4, 8],
            "shmem": [0, 1], "cached": [0, 1], "pad": [0, 1]}

    def outcome(c):
        far = abs(c["block"] - 96) / 112 + abs(c["tile"] - 3) / 5 + abs(c["unroll"] - 2) / 7
        path = {(1, 1): (1.25, 0.3), (0, 0): (1.0, 6.0), (1, 0): (1.9, 0.3), (0, 1): (2.2, 0.3)}
        scale, slope = path[(c["shmem"], c["cached"])]
        return Record("ok", scale * (1 + slope * far) * (1 + 0.02 * c["pad"]), [1.0])

    return recorded_space(axes, outcome)


@pytest.mark.slow  # sampler quality: 20 runs of 100 trials
def test_the_best_shape_is_tried_on_a_code_path_two_flags_away():
    """On :func:`code_path_space` a plateau's moves try the best config's shape with two flags flipped
    once both single flips are spent (``Pool.other_code_paths``): every seed finds the optimum within 100
    trials. With one-axis moves and the density ratio alone, no seed of 20 did (the path is poor on
    average and each single flip slower)."""
    recording, space = code_path_space()
    assert seeds_finding_the_optimum(recording, space, range(20), trials=100) == 20


@pytest.mark.slow  # sampler quality: 20 runs of 100 trials
def test_a_long_plateau_widens_the_good_set_to_the_runners_up(monkeypatch):
    """Our FC1 GEMM recorded on an H200 (1,197 configs, 11 axes; one within 1 % of the optimum). The
    best config a run finds early (0.94 of the optimum) is three axes from it; a runner-up (0.92) is one
    axis from it, in a region tried at 0.45-0.90, so the density ratio holds the optimum down while the
    good set is the best tenth. After a plateau three times as long as the axes the good set is the best
    fifth, and the runners-up's region weighs in: 7 of 10 seeds find the optimum within 100 trials,
    against 1 of 10 with the best tenth throughout."""
    recording, space = replay_space(ROOT / "studies" / "recorded" / "fc1_sm90a_hopper_grid_h200.json")

    widened = seeds_finding_the_optimum(recording, space, range(10), trials=100)
    monkeypatch.setattr(parzen, "WIDE_GOOD_SHARE", 0.1)
    narrow = seeds_finding_the_optimum(recording, space, range(10), trials=100)
    print(f"optimum found in 100 trials: {widened} of 10 seeds widening on a long plateau, {narrow} without")
    assert widened >= 6 and narrow <= 2


def test_a_configs_other_code_paths_are_two_flag_flips_once_both_single_flips_are_spent():
    axes = {"block": [16, 32, 64], "shmem": [0, 1], "cached": [0, 1], "pad": [0, 1], "tile": [1, 2, 3]}
    space = types.SimpleNamespace(axis_names=list(axes), axes=axes)
    configs = [dict(zip(axes, values, strict=True)) for values in itertools.product(*axes.values())
               if not (values[3] == 1 and values[1] == 0)]  # padding only with shared memory
    pool = Pool(space, configs)
    best = {"block": 16, "shmem": 1, "cached": 1, "pad": 1, "tile": 2}

    def paths() -> list[dict]:
        return [pool.decode(pool.codes[row]) for row in pool.other_code_paths(pool.encode(best))]

    def tried(**flips) -> None:
        pool.tried[pool.row(pool.encode({**best, **flips}))] = 1

    assert paths() == []  # the single flips of cached and pad are left (shmem's alone is not valid)
    tried(cached=0)
    assert paths() == []  # shmem and cached both flipped: padding without shared memory
    tried(pad=0)
    assert paths() == [{"block": 16, "shmem": 0, "cached": 1, "pad": 0, "tile": 2},
                       {"block": 16, "shmem": 1, "cached": 0, "pad": 0, "tile": 2}]
    tried(shmem=0, pad=0)
    assert paths() == [{"block": 16, "shmem": 1, "cached": 0, "pad": 0, "tile": 2}]
    one_flag = types.SimpleNamespace(axis_names=["block", "flag"], axes={"block": [16, 32, 48], "flag": [0, 1]})
    assert len(Pool(one_flag, [{"block": 16, "flag": 0}, {"block": 16, "flag": 1}]).other_code_paths([0, 0])) == 0


def test_an_axis_counted_in_steps_is_also_read_by_how_many_times_two_divides_it():
    """Sizes in steps of 8 or 16 get an alignment column; counts without a common factor, powers of
    two (their order says it), short axes and other values do not."""
    axes = ([16, 32, 48, 64, 80, 96, 112, 128], [1, 2, 3, 4], [1, 2, 4, 8, 16], [0, 8, 16, 24], [32, 40, 48],
            ["a", "b", "c", "d"], [24, 40, 56, 72], [32, 40, 48, 56, 64])
    found = parzen.alignments(tuple(tuple(values) for values in axes))
    assert [a.axis for a in found] == [0, 7]  # [24, 40, 56, 72]: all divide by 8 and no more
    assert found[0].table.tolist() == [0, 1, 0, 2, 0, 1, 0, 3] and found[0].levels == 4
    assert found[1].table.tolist() == [2, 0, 1, 0, 3] and found[1].levels == 4


def test_a_search_leans_to_multiples_of_a_wavefront_once_they_are_good(monkeypatch):
    """On the wavefront space, the alignment column carries what a good block size of 64 says to 128,
    192 and 256 rather than to 48 and 80: trials 11-40 (after the uniform start-up) of 20 seeds run
    at multiples of 64 far more often with it (0.62 when written) than without it (0.34; uniform: 0.25)."""
    recording, space = wavefront_space()

    def aligned_share() -> float:
        shares = []
        for seed in range(20):
            settings = RunSettings(study_name=f"a{seed}", sampler="tpe", trials=40, seed=seed, pruner=False, progress=None)
            runner = Runner(space, ReplayEvaluator(recording), settings, storage_url="memory")
            runner.run()
            shares.append(np.mean([t.params["block_size_x"] % 64 == 0 for t in runner.study.trials[10:40]]))
        return float(np.mean(shares))

    with_column = aligned_share()
    monkeypatch.setattr(parzen, "alignments", lambda values: ())
    without = aligned_share()
    print(f"trials 11-40 at multiples of 64: {with_column:.2f} with the alignment column, {without:.2f} without")
    assert with_column >= 0.5 and without <= 0.4


def test_warm_start_prior_shapes_the_first_proposals(tmp_path):
    """pnpoly on an RTX 3090 (100 trials) as --warm-start of pnpoly on an RTX 2080 Ti. With one
    queued winner, the next 9 proposals come from the prior where a cold start is still random;
    with the default 5 queued, the best at 25 reaches the issue's bar (0.95) on the median seed of
    five: a seed's best at 25 varies by about 0.03, so a mean of a few seeds sits within noise of it."""
    source, source_space = replay_space(KERNEL_TUNER_CACHES / "pnpoly_RTX_3090.json.gz")
    target, space = replay_space(KERNEL_TUNER_CACHES / "pnpoly_RTX_2080_Ti.json.gz")
    optimum = target.optimum()
    url = str(tmp_path / "warm.log")

    def run(name: str, seed: int, warm_start: list[str], top: int) -> list[float]:
        settings = RunSettings(study_name=name, sampler="tpe", trials=25, seed=seed, pruner=False, progress=None,
                               warm_start=warm_start, warm_start_top=top)
        runner = Runner(space, ReplayEvaluator(target), settings, url)
        runner.run()
        return [optimum / target.lookup(t.params).ms if t.value is not None else 0.0 for t in runner.study.trials]

    warm_first, cold_first, warm_best = [], [], []
    for seed in range(5):
        Runner(source_space, ReplayEvaluator(source), RunSettings(study_name=f"src{seed}", sampler="tpe", trials=100, seed=seed,
                                                                   pruner=False, progress=None), url).run()
        warm_first.append(statistics.mean(run(f"one{seed}", seed, [f"src{seed}"], 1)[1:10]))
        cold_first.append(statistics.mean(run(f"cold{seed}", seed, [], 5)[1:10]))
        warm_best.append(max(run(f"five{seed}", seed, [f"src{seed}"], 5)))
    print(f"trials 1-9: warm {statistics.mean(warm_first):.3f} {warm_first}, cold {statistics.mean(cold_first):.3f}; "
          f"best at 25 with the prior: median {statistics.median(warm_best):.3f} {warm_best}")
    assert statistics.mean(warm_first) > statistics.mean(cold_first) + 0.1
    assert statistics.median(warm_best) >= 0.95


def test_every_sampler_the_options_table_names_has_a_maker():
    assert set(SAMPLERS) == set(PROPOSERS)
    for name in SAMPLERS:
        assert make_proposer(name, seed=0) is not None


def test_a_grid_spreads_its_first_configs_over_the_space_then_walks_in_order():
    recording, space = recorded_space({"A": [1, 2, 3, 4], "B": [1, 2, 3, 4], "C": [1, 2]},
                                      lambda c: Record("ok", 1.0, [1.0]))  # 32 configs, A the slowest-moving axis

    def order(spread: int) -> list[tuple]:
        study = optuna.create_study(sampler=ValidOnlySampler(space, make_proposer("grid", 0, n_startup_trials=spread), seed=0))
        for _ in range(32):
            trial = study.ask()
            for axis, distribution in space.distributions.items():
                suggest(trial, axis, distribution)
            study.tell(trial, 1.0)
        return [(t.params["A"], t.params["B"], t.params["C"]) for t in study.trials]

    in_order, spread = order(0), order(4)
    assert in_order == sorted(in_order) and [c[0] for c in in_order[:4]] == [1, 1, 1, 1]
    assert [c[0] for c in spread[:4]] == [1, 2, 3, 4]  # rows 0, 10, 20 and 31: every value of the first axis
    assert spread[4:] == sorted(spread[4:]) and sorted(spread) == in_order  # then the rest in order, each once


def test_late_in_a_study_the_feasibility_model_weighs_only_the_candidates_l_favours_most(monkeypatch):
    """Its two mixtures over every candidate were most of a proposal's cost late in a long study (2.6
    of 5.7 ms at 2,000 trials, docs/RELIABILITY.md): from FEASIBILITY_TOP_AFTER own observations on it
    sees only the FEASIBILITY_TOP candidates the good-config density favours most, and a failing
    region is still proposed less (planted here: the fastest configs border it)."""
    monkeypatch.setattr(parzen, "FEASIBILITY_TOP_AFTER", 30)
    monkeypatch.setattr(parzen, "FEASIBILITY_TOP", 64)
    seen: list[tuple[int, int]] = []  # (own observations, candidates the feasibility model weighed)
    log_density = parzen.Mixture.log_density

    def counted(self, candidates, rng):
        if self.sharp:
            seen.append((observed[0], len(candidates)))
        return log_density(self, candidates, rng)

    monkeypatch.setattr(parzen.Mixture, "log_density", counted)

    recording, space = failing_region_space()
    observed = [0]
    propose = ParzenSearch.propose

    def counting(self, pool, *args, **kwargs):
        observed[0] = len(pool.observations)
        return propose(self, pool, *args, **kwargs)

    monkeypatch.setattr(ParzenSearch, "propose", counting)
    settings = RunSettings(study_name="late", sampler="tpe", trials=80, seed=0, pruner=False, progress=None)
    runner = Runner(space, ReplayEvaluator(recording), settings, storage_url="memory")
    runner.run()
    study = runner.study
    early = [n for own, n in seen if own < 30]
    late = [n for own, n in seen if own > 30]
    assert max(early) > 64 and late and max(late) <= 64, (max(early), max(late, default=None))
    failing = sum(t.params["a"] >= 12 for t in study.trials[30:]) / len(study.trials[30:])
    assert failing < 0.7 * sum(p["a"] >= 12 for p in space.valid) / len(space.valid)


def test_a_config_stopped_as_slower_is_ranked_by_the_value_it_was_stopped_at():
    """With the pruner on (a GPU run's default) most trials stop early. Each keeps its running value
    (Optuna's value of a pruned trial) and the densities rank it by that value; it never counts as
    the best, and a failure stays a failure."""
    def bowl(config):
        if config["a"] == 15 and config["b"] == 7:
            return Record("compile_error", attrs={"reason": "planted"})
        ms = 1.0 + 0.1 * (config["a"] + config["b"])
        return Record("ok", ms, [ms] * 30)

    recording, space = recorded_space({"a": list(range(16)), "b": list(range(8))}, bowl)
    settings = RunSettings(study_name="p", sampler="tpe", trials=40, seed=0, pruner=True, progress=None)
    runner = Runner(space, ReplayEvaluator(recording), settings, storage_url="memory")
    runner.run()
    stopped = [t for t in runner.study.trials if t.user_attrs.get("status") == "pruned_slow"]
    complete = [t for t in runner.study.trials if t.state == TrialState.COMPLETE]
    assert len(stopped) >= 10 and complete

    pool = Pool(space, space.valid)
    pool.update(runner.study)
    obs = pool.observations
    ranked = {tuple(int(i) for i in code): value for code, value in zip(obs.measured, obs.values, strict=True)}
    for trial in stopped:
        assert ranked[tuple(pool.encode(trial.params))] == pytest.approx(recording.lookup(trial.params).ms)
    assert obs.best == min(t.value for t in complete)
    assert not obs.slower
    failed = [t for t in runner.study.trials if t.user_attrs.get("status") == "compile_error"]
    assert len(obs.failed) == len(failed)


def test_configs_stopped_near_the_best_still_point_the_search_there():
    """One complete config (the best, in a corner) and 60 stopped as slower, whose running values say
    the opposite corner is nearly as fast: the density ratio proposes there. Were the stopped configs
    only "slower", the best alone would be good, and the proposals would stay by it."""
    _, space = recorded_space({"a": list(range(24)), "b": list(range(24))}, lambda c: Record("ok", 1.0, [1.0]))
    study = optuna.create_study()
    distributions = dict(space.distributions)
    rng = np.random.default_rng(0)

    def add(state, value, a, b, status):
        study.add_trial(optuna.trial.create_trial(state=state, value=value, params={"a": a, "b": b},
                                                  distributions=distributions, user_attrs={"status": status}))

    add(TrialState.COMPLETE, 1.0, 0, 0, "ok")
    for a, b in rng.integers(1, 24, size=(60, 2)).tolist():
        add(TrialState.PRUNED, 1.05 + 0.02 * ((23 - a) + (23 - b)), a, b, "pruned_slow")
    pool = Pool(space, space.valid)
    pool.update(study)
    ordered = [True, True]
    proposals = [pool.decode(pool.codes[ParzenSearch(seed=seed, patience=10**6).propose(pool, ordered)]) for seed in range(20)]
    far_corner = sum(p["a"] >= 12 and p["b"] >= 12 for p in proposals)
    print(f"proposals in the corner the stopped configs favour: {far_corner} of 20")
    assert far_corner >= 15


def test_the_margin_pruner_sees_the_trials_that_finish_while_it_measures():
    """``prune_by = "margin"``: the pruner runs on the measuring thread, which asks for no trial, so it
    reads the best from the storage itself; from a snapshot of the asking thread's kind it would see
    no trial finish, and prune nothing."""
    recording, space = recorded_space({"a": list(range(16)), "b": list(range(8))},
                                      lambda c: Record("ok", 1.0 + 0.1 * (c["a"] + c["b"]), [1.0 + 0.1 * (c["a"] + c["b"])] * 30))
    settings = RunSettings(study_name="m", sampler="tpe", trials=30, seed=0, pruner=True, prune_by="margin",
                           pruner_margin=0.05, progress=None)
    runner = Runner(space, ReplayEvaluator(recording), settings, storage_url="memory")
    runner.run()
    stopped = [t for t in runner.study.trials if t.user_attrs.get("status") == "pruned_slow"]
    best = min(t.value for t in runner.study.trials if t.state == TrialState.COMPLETE)
    assert len(stopped) >= 10
    assert all(recording.lookup(t.params).ms > 1.05 * best for t in stopped)


def _whole_recording_as_prior(name: str) -> Observations:
    """Every config of a practice recording as a warm start's prior (``--warm-start FILE``)."""
    recording, space = replay_space(KERNEL_TUNER_CACHES / name)
    prior = Pool(space, space.valid)
    for code in prior.codes:
        record = recording.lookup(prior.decode(code))
        prior.observations.add(code, record.ms if record.status == "ok" else None, failed=record.status != "ok")
    return prior.observations


def test_a_whole_recording_as_prior_is_ranked_once_not_on_each_proposal(monkeypatch):
    """A warm start from another GPU's Kernel Tuner cache gives a prior of every config it holds (82,984 for
    Kernel Tuner's hotspot). Its ranking does not change during a run, so it is sorted once; a proposal reads
    it and sorts only this study's values and the best few of each source (counted here, not timed)."""
    prior = _whole_recording_as_prior("pnpoly_RTX_3090.json.gz")
    target, target_space = replay_space(KERNEL_TUNER_CACHES / "pnpoly_RTX_2080_Ti.json.gz")
    prior_size = len(prior.values)
    assert prior_size > 3000

    sorted_lengths = []
    argsort = np.argsort

    def counting_argsort(values, *args, **kwargs):
        sorted_lengths.append(len(values))
        return argsort(values, *args, **kwargs)

    monkeypatch.setattr(np, "argsort", counting_argsort)
    pool = Pool(target_space, target_space.valid)
    search = ParzenSearch(seed=0)
    for _ in range(30):
        row = search.propose(pool, [True] * len(pool.levels), prior)
        code = pool.codes[row]
        pool.tried[row] = 1
        pool.observations.add(code, target.lookup(pool.decode(code)).ms)
    assert sum(n >= prior_size for n in sorted_lengths) == 1
    assert max(n for n in sorted_lengths if n < prior_size) < 100


def test_a_configs_neighbours_are_looked_up_once_and_follow_what_is_tried():
    """The good configs' neighbours are candidates of every proposal: a config's valid neighbours are looked
    up once (they never change), the untried ones read off them on each call, so a config tried since is gone."""
    _, space = replay_space(KERNEL_TUNER_CACHES / "pnpoly_RTX_3090.json.gz")
    pool = Pool(space, space.valid)
    code = pool.codes[len(space.valid) // 2]

    def untried_one_axis_away():
        return [row for row in pool.one_axis_away(code) if pool.tried[row] == 0]

    first = pool.neighbours(code)
    assert list(first) == untried_one_axis_away() and len(first) > 20
    pool.tried[first[::3]] = 1
    lookups = []

    class Counted(dict):
        def get(self, key, default=None):
            lookups.append(key)
            return super().get(key, default)

    pool._row_of = Counted(pool._row_of)
    again = pool.neighbours(code)
    assert lookups == []  # the kept rows answer
    assert list(again) == untried_one_axis_away() == [r for r in first if r not in set(first[::3])]


def test_with_a_prior_the_feasibility_model_weighs_only_the_candidates_l_favours_most_at_once(monkeypatch):
    """A warm start's prior fills the feasibility model from the first proposal (a whole cache of another GPU:
    thousands of configs), so the rule of a long study holds from there: its observations count, a prior's too."""
    prior = _whole_recording_as_prior("pnpoly_RTX_3090.json.gz")
    _, target_space = replay_space(KERNEL_TUNER_CACHES / "pnpoly_RTX_2080_Ti.json.gz")
    weighed: list[int] = []
    log_density = parzen.Mixture.log_density

    def counted(self, candidates, rng):
        if self.sharp:
            weighed.append(len(candidates))
        return log_density(self, candidates, rng)

    monkeypatch.setattr(parzen.Mixture, "log_density", counted)
    pool = Pool(target_space, target_space.valid)
    pool.observations.since_best = 1  # not on a plateau: a density-ratio turn
    row = ParzenSearch(seed=0).propose(pool, [True] * len(pool.levels), prior)
    assert row is not None and len(pool.observations) == 0
    assert weighed and max(weighed) == parzen.FEASIBILITY_TOP  # of about 1,000 candidates
