"""A process as /proc tells it: alive or not (a zombie is not), and the one that held a PID."""

import os
import subprocess
import sys
import time

from tuner import procfs


def test_this_process_lives_and_is_told_from_a_later_one_of_its_pid():
    me = procfs.stat("self")
    assert me is not None and me.state == "R"
    assert procfs.stat(os.getpid()).start_ticks == me.start_ticks
    assert procfs.alive(os.getpid()) and procfs.alive(os.getpid(), me.start_ticks)
    assert not procfs.alive(os.getpid(), me.start_ticks + 1)  # the PID reused by a process started later


def test_an_exited_child_not_yet_reaped_is_gone():
    child = subprocess.Popen([sys.executable, "-c", "pass"])
    deadline = time.monotonic() + 30
    while (found := procfs.stat(child.pid)) is not None and found.state != "Z" and time.monotonic() < deadline:
        time.sleep(0.05)
    assert found is not None and found.state == "Z"  # exited, its entry kept until the parent waits
    assert not procfs.alive(child.pid)
    child.wait()
    assert procfs.stat(child.pid) is None and not procfs.alive(child.pid)


def test_a_process_knows_when_it_started():
    """A command's start-up clock (``startup_s``) counts from its process's start, not its first import."""
    before = time.monotonic()
    told = subprocess.run([sys.executable, "-c", "import time; time.sleep(0.5); from tuner import procfs; "
                           "print(procfs.started_monotonic())"], capture_output=True, text=True, check=True)
    after = time.monotonic()
    started = float(told.stdout)
    slack = 0.05  # the start time is counted in clock ticks (10 ms), the uptime in hundredths
    assert before - slack <= started <= after - 0.5 + slack
