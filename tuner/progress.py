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
    done or :data:`LINE_EVERY_S` passed since the last (with no ``total``, the time alone),
    and the last one at :meth:`close` if unsaid. The calls a tqdm bar takes, so either serves."""

    def __init__(self, total: int | None, desc: str, unit: str,
                 say: Callable[[str], None] = lambda line: print(line, file=sys.stderr, flush=True)) -> None:
        self.total, self.desc, self.unit, self.say = total, desc, unit, say
        self.n = 0  # done (tqdm's name)
        self.postfix = ""
        self._started = self._said_at = time.monotonic()
        self._said_n = 0

    def set_postfix_str(self, text: str, refresh: bool = True) -> None:
        self.postfix = text

    def update(self, n: int = 1) -> None:
        self.n += n
        now = time.monotonic()
        if n and (self._tenth(self.n) > self._tenth(self._said_n) or now - self._said_at >= LINE_EVERY_S):
            self._say(now)

    def refresh(self) -> None:
        """(A bar redraws; a line waits for the count to move.)"""

    def close(self) -> None:
        if self.n != self._said_n:
            self._say(time.monotonic())

    def _tenth(self, done: int) -> int:
        return done * 10 // self.total if self.total else 0  # no total: the time alone

    def _say(self, now: float) -> None:
        of = f"/{self.total}" if self.total else ""
        postfix = f", {self.postfix}" if self.postfix else ""
        self.say(f"{self.desc} {self.n}{of} {self.unit}s{postfix} ({now - self._started:.0f} s)")
        self._said_at, self._said_n = now, self.n


def display(shown: Shown, total: int | None, desc: str, unit: str) -> Any:
    """How long work is shown: a bar (``"bar"``), lines (``"lines"``), or None."""
    if shown == "bar":
        return progress_bar(total=total, desc=desc, unit=unit, dynamic_ncols=True)
    if shown == "lines":
        return ProgressLines(total, desc, unit)
    return None


@contextlib.contextmanager
def progress(total: int, desc: str, unit: str, shown: Shown) -> Iterator[Callable[[], None] | None]:
    """A tick to call as each of ``total`` units is done, shown as ``shown`` says (None: no tick)."""
    bar = display(shown, total, desc, unit)
    if bar is None:
        yield None
        return
    try:
        yield lambda: bar.update(1)
    finally:
        bar.close()
