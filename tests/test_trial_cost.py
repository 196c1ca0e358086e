"""A trial's bookkeeping does not grow with the study (issue 33, item 12).

The timing itself is bench/bench_trial_cost.py (numbers in docs/RELIABILITY.md); this counts
the work, which is deterministic: deciding whether a trial takes a place in the budget is
done once per trial, not once per trial per ask (quadratic in the study's size).
"""

from __future__ import annotations

from tests.conftest import PNPOLY
from tuner.cli import commands as cli
from tuner.run import objective, runner

TRIALS = 300


def test_budget_checks_look_at_each_trial_once(monkeypatch, tmp_path):
    calls = 0
    counts = runner.Runner._counts

    def counted(self, *args):
        nonlocal calls
        calls += 1
        return counts(self, *args)

    monkeypatch.setattr(runner.Runner, "_counts", counted)
    code = cli.main(["run", "--replay", str(PNPOLY), "--storage", f"sqlite:///{tmp_path / 'c.db'}",
                     "--trials", str(TRIALS), "--seed", "1", "--json"])
    assert code == 0
    # each trial: once when finished, plus a few times while in flight; quadratic was ~TRIALS**2
    assert TRIALS <= calls <= 6 * TRIALS, calls


def test_budget_and_repeat_lookups_read_each_finished_trial_once(monkeypatch, tmp_path):
    """The checks before and after each ask, and the look-up of a stored result, go over the
    trials finished since their last look (and those in flight), not over the whole study."""
    calls = {"facts": 0, "key_of": 0}
    facts, key_of = runner._Tally.facts, objective.Objective._key_of

    def counted_facts(self, t):
        calls["facts"] += 1
        return facts(self, t)

    def counted_key_of(self, t):
        calls["key_of"] += 1
        return key_of(self, t)

    monkeypatch.setattr(runner._Tally, "facts", counted_facts)
    monkeypatch.setattr(objective.Objective, "_key_of", counted_key_of)
    code = cli.main(["run", "--replay", str(PNPOLY), "--storage", f"sqlite:///{tmp_path / 'c.db'}",
                     "--trials", str(TRIALS), "--seed", "1", "--json"])
    assert code == 0
    # a few per trial; reading the whole study each time was ~TRIALS**2 / 2 per check
    assert calls["facts"] <= 10 * TRIALS, calls
    assert calls["key_of"] <= 4 * TRIALS, calls
