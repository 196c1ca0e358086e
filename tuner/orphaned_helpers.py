"""A helper whose requester died before handing it its work ends without a traceback.

Imported by the helpers' forkserver only (:data:`tuner.lifetime.HELPER_MODULES`), never by a
command: the hook below would hide a command's own ``EOFError``.

The forkserver forks a helper, and the helper then reads its work from the process that asked for
it. When that process was killed meanwhile (``kill -9`` of a run or of one of its GPU workers), the
read meets a closed pipe, and the forkserver reports the ``EOFError`` through ``sys.excepthook``
into the terminal it shares with the run: a traceback printed under "run the same command to
resume", about a process nobody waits for.
"""

from __future__ import annotations

import pickle
import sys
from types import TracebackType

_report = sys.excepthook


def _quiet_when_orphaned(kind: type[BaseException], value: BaseException, tb: TracebackType | None) -> None:
    # A helper's work is read with pickle: an ended or cut-off stream means its requester is gone.
    if issubclass(kind, (EOFError, pickle.UnpicklingError)):
        return
    _report(kind, value, tb)


sys.excepthook = _quiet_when_orphaned
