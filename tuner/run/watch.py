"""The progress of a study that other processes fill: ``tuner run --workers N`` reads the shared
storage while its workers run, and shows the trials done of the budget and the best so far.

A read that fails is no error of the run: the first worker may not have created the study yet
(``KeyError``), a database may not answer this once; the next read tries again.
"""

from __future__ import annotations

import math
import time

import optuna

from tuner.errors import interrupted
from tuner.lifetime import stop_if_asked
from tuner.progress import Shown, display
from tuner.run.runner import FINISHED
from tuner.store.results import best_trial, metric_of, value_of, value_text
from tuner.table import printable

#: seconds between two reads of the study
POLL_S = 2.0


class StudyWatch:
    """Study ``name`` in ``storage`` as its workers fill it: its trials done of ``budget`` (None: no
    trial budget, as with a tiered search or a timeout alone) and its best value, shown as ``shown`` says
    (:func:`tuner.progress.display`)."""

    def __init__(self, storage: optuna.storages.BaseStorage, name: str, budget: int | None, shown: Shown) -> None:
        self.storage, self.name, self.budget = storage, name, budget
        self.study: optuna.Study | None = None
        self._bar = display(shown, budget, printable(name), "trial")
        self._read_at = -math.inf

    def poll(self) -> None:
        """Read the study where :data:`POLL_S` passed since the last read, and show what changed."""
        now = time.monotonic()
        if now - self._read_at >= POLL_S:
            self._read_at = now
            self._show()

    def finish(self) -> None:
        """The workers are done: a last read, shown (off a terminal: a last line where the count moved)."""
        self._show()
        self.close()

    def close(self) -> None:
        if self._bar is not None:
            self._bar.close()
            self._bar = None

    def _show(self) -> None:
        reading = self._read()
        stop_if_asked()  # a Ctrl-C that a database driver's finalizer swallowed while reading
        if reading is None or self._bar is None:
            return
        done, best = reading
        self._bar.set_postfix_str(f"best={best}", refresh=False)
        if done > self._bar.n:
            self._bar.update(done - self._bar.n)
        else:
            self._bar.refresh()

    def _read(self) -> tuple[int, str] | None:
        """(trials done, the best value in words), or None where the study could not be read this time.
        Done: as a run's budget counts them, measured or pruned, a reused (duplicate) value not."""
        try:
            if self.study is None:
                self.study = optuna.load_study(study_name=self.name, storage=self.storage)
            trials = self.study.get_trials(deepcopy=False, states=FINISHED)
            best = best_trial(trials, self.study.directions[0])
            done = sum(1 for t in trials if t.user_attrs.get("status") != "duplicate")
            return done, "-" if best is None else value_text(value_of(best), metric_of(self.study))
        except Exception as exc:
            if interrupted(exc):  # something broke while a Ctrl-C unwound the read: the Ctrl-C it is
                raise KeyboardInterrupt from exc
            return None
