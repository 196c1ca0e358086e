"""`tuner confirm`'s table and what `tied` names, on confirmations of planted times (no GPU, no compile).

Trials are stored with known values; a confirmation double times their configs round-robin at
ratios to the reference chosen per round, and the real ranking (:func:`rank_interleaved`) judges them.
"""

import json
import random

import pytest

from tests.conftest import planted_study
from tuner.evaluate.confirm import confirm_study, describe
from tuner.measurement.paired import rank_interleaved
from tuner.run.session import Session
from tuner.testing import cli

AXES = {"BLOCK": [32, 64], "THREAD_TILE": [1, 2]}
STORED = {(32, 1): 0.95, (32, 2): 0.97, (64, 1): 0.99}  # the top 3 in this order

# Ratios to the reference, round by round. (32, 2)'s median (0.93) is above (32, 1)'s (0.92): (32, 1) wins;
# yet (32, 2) is below (32, 1) in 6 of the 7 rounds, so its median ratio to the winner is 0.989; its
# interval reaches above 1: tied. (64, 1) is slower in every round, by 2 % or more: not tied.
NON_TRANSITIVE = {(32, 1): [0.90, 0.90, 0.90, 0.95, 0.95, 0.95, 0.92],
                  (32, 2): [0.93, 0.89, 0.89, 0.94, 0.94, 0.94, 0.915],
                  (64, 1): [0.97] * 7}


class PlantedSession:
    """Times the configs round-robin, the reference at 1 ms: per round the ratios of ``per_round``
    (a config's list), else its stored ratio with 0.1 % noise."""

    def __init__(self, per_round: dict | None = None):
        self.per_round, self.rng = per_round, random.Random(5)

    def confirm(self, configs, rounds):
        keys = [(c["BLOCK"], c["THREAD_TILE"]) for c in configs]
        if self.per_round:
            times = [[1.0, *(self.per_round[k][r] for k in keys)] for r in range(rounds)]
        else:
            times = [[1.0, *(STORED[k] * (1 + 0.001 * self.rng.gauss(0, 1)) for k in keys)] for _ in range(rounds)]
        return rank_interleaved(times), {}


@pytest.fixture
def stored(tmp_path):
    return planted_study(tmp_path, AXES, STORED)


def trial_of(study, key) -> int:
    return next(t.number for t in study.trials if (t.params["BLOCK"], t.params["THREAD_TILE"]) == key)


def test_the_table_shows_what_the_winner_is_chosen_by(stored, tmp_path, monkeypatch):
    """A config tied with the winner may have a median ratio to it below 1 (medians of per-round ratios do
    not compose): the table orders by, and shows, the median ratio to the reference the winner is chosen by,
    and for the others the interval that ties them, so no row reads faster than the winner."""
    url, study, space = stored
    record = confirm_study(study, space, PlantedSession(NON_TRANSITIVE), {"name": "Fake GPU"}, top=3, rounds=7)
    winner, tie, slower = (trial_of(study, k) for k in NON_TRANSITIVE)
    assert record["winner"] == winner and record["tied"] == [tie]
    tie_row = next(r for r in record["standings"] if r["trial"] == tie)
    assert tie_row["to_winner"] < 1 < tie_row["to_winner_ci"][1]  # the planted case: it reads faster in the pairs

    monkeypatch.setattr(Session, "confirm_stored", lambda self: ("s", record))
    (study_file := tmp_path / "s.toml").write_text("")  # (the session never reads it here)
    result = cli("confirm", study_file, "--storage", url)
    assert result.returncode == 0, result.stderr
    out = result.stdout.splitlines()
    rows = {int(line.split()[1]): line for line in out if line.startswith("trial")}
    assert list(rows) == [winner, tie, slower]
    lo, hi = tie_row["to_winner_ci"]
    assert rows[tie].endswith(f"x0.9300 of the reference  x[{lo:.4f}, {hi:.4f}] of the winner  TIED")
    assert rows[winner].endswith("x0.9200 of the reference  WINNER")
    assert rows[slower].endswith(" of the winner") and "x0.9700 of the reference" in rows[slower]
    assert out[0].startswith("WINNER: the lowest median ratio to the reference; TIED: not provably slower than it "
                             "by more than 0.25 %")  # why the winner is the winner, and what ties


@pytest.mark.parametrize("planted", ["no tie", "a tie"])
def test_tied_names_the_others_alone_in_the_text_and_the_json(planted, stored, capsys):
    """`tied` is the other configs tied with the winner: in the record, `tuner best --json` and the line."""
    url, study, space = stored
    session = PlantedSession(NON_TRANSITIVE) if planted == "a tie" else PlantedSession()
    record = confirm_study(study, space, session, {"name": "Fake GPU"}, top=3, rounds=7 if planted == "a tie" else 60)
    winner = trial_of(study, (32, 1))
    expected = [trial_of(study, (32, 2))] if planted == "a tie" else []
    assert record["winner"] == winner and record["tied"] == expected
    assert [r["trial"] for r in record["standings"] if r["tied"]] == expected
    best = cli("best", "--study", "s", "--storage", url, "--json")
    assert best.returncode == 0, best.stderr
    answer = json.loads(best.stdout)
    assert answer["trial"] == winner and answer["confirmed"] is True and answer["tied"] == expected
    text = cli("best", "--study", "s", "--storage", url)
    assert (f"tied with trial(s) {expected[0]};" if expected else "(no tie;") in text.stderr


def test_a_record_stored_with_the_winner_among_its_tied_reads_as_the_others(stored):
    """Records stored before `tied` left the winner out listed it: they read as the new ones."""
    import tuner

    url, study, space = stored
    record = confirm_study(study, space, PlantedSession(), {"name": "Fake GPU"}, top=3, rounds=60)
    winner = record["winner"]
    study.set_user_attr("confirmations", [{**record, "tied": [winner]}])
    answer = json.loads(cli("best", "--study", "s", "--storage", url, "--json").stdout)
    assert answer["trial"] == winner and answer["tied"] == []
    assert "(no tie;" in describe(study.user_attrs["confirmations"][0])
    assert tuner.load("s", storage=url).tied == []
