"""What Linux's ``/proc`` says of a process: whether it lives and when it started.

A PID alone names a process only until it is reused: a process's start time (clock ticks after
boot, ``/proc/PID/stat`` field 22) tells the one that held the PID from a later one. Elsewhere than
Linux the answers fall back to what a signal says.
"""

from __future__ import annotations

import os
import time
from dataclasses import dataclass


@dataclass(frozen=True)
class ProcessStat:
    state: str  # "R", "S", ...; "Z": exited, not yet reaped
    start_ticks: int  # clock ticks after boot


def stat(pid: int | str) -> ProcessStat | None:
    """Process ``pid``'s state and start time (``"self"``: this process, right inside a PID namespace
    too), else None (no /proc, or no such process)."""
    try:
        with open(f"/proc/{pid}/stat") as f:
            fields = f.read().rsplit(")", 1)[1].split()  # after the command name, which may hold spaces
        return ProcessStat(fields[0], int(fields[19]))
    except (OSError, ValueError, IndexError):
        return None


def alive(pid: int, start_ticks: object = None) -> bool:
    """Does process ``pid`` of this PID space live (a killed one not yet reaped is a zombie: gone)?
    With ``start_ticks``, only if it is the process that started then (not a later one of that PID)."""
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        pass
    found = stat(pid)
    if found is None:
        return True  # no /proc: the signal is all we know
    return found.state != "Z" and (not isinstance(start_ticks, int) or found.start_ticks == start_ticks)


def started_monotonic() -> float:
    """``time.monotonic()`` at this process's start, else now."""
    found = stat("self")
    try:
        with open("/proc/uptime") as f:
            uptime = float(f.read().split()[0])
    except (OSError, ValueError, IndexError):
        return time.monotonic()
    if found is None:
        return time.monotonic()
    return time.monotonic() - max(0.0, uptime - found.start_ticks / os.sysconf("SC_CLK_TCK"))
