"""Progress of long work: a bar on a terminal (a widget in a notebook that can draw one), plain lines
on stderr in a log or a pipe, where a bar's redraws would show nothing until the work is over."""

from __future__ import annotations

import contextlib
import sys
import time
from collections.abc import Callable, Iterator
from typing import Any, Literal

#: how a command shows long work: a bar, plain lines, or nothing (None: ``--json``, or an API call without ``progress``)
Shown = Literal["bar", "lines"] | None

#: off a terminal, a line each time another tenth of the work is done, and at least this often
#: (seconds) while units keep finishing: a slow tenth still shows the work goes on
LINE_EVERY_S = 20.0


def progress_bar(**kwargs: Any) -> Any:
    """A tqdm bar; in Jupyter (with ipywidgets) the notebook's widget, where text redrawn with
    carriage returns would pile up in the cell's output."""
    try:
        import ipywidgets  # noqa: F401  (tqdm's notebook bar needs it, and fails without it)
        from tqdm.auto import tqdm
    except ImportError:
        from tqdm import tqdm
    return tqdm(file=sys.stderr, **kwargs)


def shown_on_stderr(quiet: bool) -> Shown:
    """What a command shows of long work: nothing when ``quiet`` (its stderr is for errors then),
    a bar on a terminal, else lines (CI logs, ``nohup``, a notebook's ``!tuner``)."""
    if quiet:
        return None
    return "bar" if sys.stderr.isatty() else "lines"


class ProgressLines:
    """Progress as lines such as ``compiling 24/48 configs (12 s)``: one each time another tenth is
    done or :data:`LINE_EVERY_S` passed since the last, and the last one at :meth:`close` if unsaid."""

    def __init__(self, total: int, desc: str, unit: str,
                 say: Callable[[str], None] = lambda line: print(line, file=sys.stderr, flush=True)) -> None:
        self.total, self.desc, self.unit, self.say = total, desc, unit, say
        self.done = 0
        self._started = self._said_at = time.monotonic()
        self._said_done = 0

    def update(self, n: int = 1) -> None:
        self.done += n
        now = time.monotonic()
        if self._tenth(self.done) > self._tenth(self._said_done) or now - self._said_at >= LINE_EVERY_S:
            self._say(now)

    def close(self) -> None:
        if self.done != self._said_done:
            self._say(time.monotonic())

    def _tenth(self, done: int) -> int:
        return done * 10 // self.total if self.total > 0 else 10

    def _say(self, now: float) -> None:
        self.say(f"{self.desc} {self.done}/{self.total} {self.unit}s ({now - self._started:.0f} s)")
        self._said_at, self._said_done = now, self.done


@contextlib.contextmanager
def progress(total: int, desc: str, unit: str, shown: Shown) -> Iterator[Callable[[], None] | None]:
    """A tick to call as each of ``total`` units is done, shown as ``shown`` says (None: no tick)."""
    if shown is None:
        yield None
        return
    bar = progress_bar(total=total, desc=desc, unit=unit) if shown == "bar" else ProgressLines(total, desc, unit)
    try:
        yield lambda: bar.update(1)
    finally:
        bar.close()
