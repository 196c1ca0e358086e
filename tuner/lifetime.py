"""Helper processes end with the tuner process that started them.

A ``kill -9`` of ``tuner run`` gives it no chance to stop its GPU worker, its ``--workers``
peers or its compile processes. Left alone they would live on: a compile process waits for
work forever, holds the terminal's pipes open (so ``tuner run … | tee log`` never ends) and
keeps a forkserver alive. Each helper therefore watches the process it serves; pools of
helpers come from :func:`helper_pool`.
"""

from __future__ import annotations

import contextlib
import ctypes
import importlib.machinery
import multiprocessing as mp
import os
import select
import signal
import sys
import threading
import time
import weakref
from collections.abc import Callable, Iterator
from concurrent.futures import ProcessPoolExecutor
from types import FrameType
from typing import Any

from tuner import procfs

PR_SET_PDEATHSIG = 1  # <linux/prctl.h>
#: how long a stop waits for a pool's manager thread to end once the pool's processes are ended
POOL_THREAD_JOIN_S = 5.0

#: imported once by the forkserver that every pooled helper is forked from, rather than by each
#: helper (NumPy and the kernel-spec machinery: ~0.3 s a process, 16 processes at once on a 16-core
#: host while a run starts), and the hook that keeps a helper orphaned at birth quiet
HELPER_MODULES = ["tuner.search.enumeration", "tuner.compile.nvrtc", "tuner.orphaned_helpers"]


#: every pool of helpers this process made (:func:`stop_helpers`)
_pools: weakref.WeakSet[ProcessPoolExecutor] = weakref.WeakSet()


def helper_pool(workers: int) -> ProcessPoolExecutor:
    """Processes for work in parallel (the enumeration, compiles, host dry runs) that end with this
    one. They are forked by a forkserver, never from this threaded process, and find
    :data:`HELPER_MODULES` imported."""
    start_helpers()  # (its forkserver, once)
    pool = ProcessPoolExecutor(max_workers=workers, mp_context=_helper_context(), initializer=exit_with,
                               initargs=(os.getpid(),))
    _pools.add(pool)
    return pool


def stop_helpers() -> None:
    """End every helper and drop the work queued for them: a command that ends early (bad input, no
    GPU, Ctrl-C) does not wait at exit for an enumeration or builds that nobody will read (the
    interpreter's exit waits for a pool's work)."""
    for pool in list(_pools):
        terminate = getattr(pool, "terminate_workers", None)  # Python 3.14
        if terminate is not None:
            terminate()
            continue
        # private before 3.14 (test_space_and_compile checks it), and read before shutdown() drops it
        processes = list((pool._processes or {}).values())
        pool.shutdown(wait=False, cancel_futures=True)
        for process in processes:
            process.terminate()
    # A pool dropped while a stop unwound its shutdown (a second Ctrl-C) is gone from ``_pools``, and
    # its processes wait for work that never comes: the interpreter's exit would join them forever.
    for child in mp.active_children():
        child.terminate()
    # Each pool's manager thread, its processes gone, closes its wake-up pipe as it ends; the
    # interpreter's exit writes to every such pipe without the lock that close holds (Python 3.11),
    # and prints "Bad file descriptor" where the two meet. They end here, before the exit.
    for thread in threading.enumerate():
        if type(thread).__name__ == "_ExecutorManagerThread":
            thread.join(timeout=POOL_THREAD_JOIN_S)


def start_helpers() -> None:
    """Start the helpers' forkserver now: it imports :data:`HELPER_MODULES` while this process goes
    on, and the first pool's first process need not wait for that."""
    from multiprocessing import forkserver

    _helper_context()
    with started_deaf_to_ctrl_c():  # the forkserver, and every helper it forks: the command stops them
        forkserver.ensure_running()


@contextlib.contextmanager
def started_deaf_to_ctrl_c() -> Iterator[None]:
    """Processes started in the block ignore Ctrl-C from their first instruction: an ignored SIGINT
    survives exec, and Python leaves it ignored (a child that ignores it only once its imports are
    done prints a traceback for a Ctrl-C that lands while it imports). This process ignores SIGINT
    for the block's few milliseconds with the signal blocked in this thread, where Linux keeps it
    pending rather than dropping it: it is handled once the block ends (a thread of its own that
    takes it meanwhile drops it). From another thread than the main one nothing changes (only the
    main thread sets a handler)."""
    if threading.current_thread() is not threading.main_thread():
        yield
        return
    from multiprocessing import resource_tracker

    # A spawn or forkserver start starts multiprocessing's resource tracker first, if it runs not yet,
    # and that start unblocks SIGINT as it ends (a Ctrl-C would then be dropped): it starts here.
    resource_tracker.ensure_running()
    mask = signal.pthread_sigmask(signal.SIG_BLOCK, {signal.SIGINT})
    previous = signal.signal(signal.SIGINT, signal.SIG_IGN)
    try:
        yield
    finally:
        signal.signal(signal.SIGINT, previous)
        signal.pthread_sigmask(signal.SIG_SETMASK, mask)


@contextlib.contextmanager
def ctrl_c_ignored() -> Iterator[None]:
    """Ctrl-C does nothing in the block: a command that is over (stopped by a first Ctrl-C, say) ends
    its helpers there, and an impatient second one would cut that short with a traceback. Main
    thread only (only it sets a handler); the handler is put back as the block ends."""
    if threading.current_thread() is not threading.main_thread():
        yield
        return
    previous = signal.signal(signal.SIGINT, signal.SIG_IGN)
    try:
        yield
    finally:
        signal.signal(signal.SIGINT, previous)


def _helper_context() -> mp.context.ForkServerContext:
    context = mp.get_context("forkserver")
    context.set_forkserver_preload(HELPER_MODULES)  # (read when the forkserver starts: once a process)
    return context


#: the spec a script's ``__main__`` wears while the API runs (:func:`children_skip_user_main`)
_MAIN_STAND_IN = importlib.machinery.ModuleSpec("__main__", None)


@contextlib.contextmanager
def children_skip_user_main() -> Iterator[None]:
    """The processes started meanwhile (the GPU worker, helpers) do not run the user's script again.

    A spawned or forkserver child of ``multiprocessing`` first imports its parent's ``__main__``
    (as ``__mp_main__``), by its path, or by its spec's name where it has one; it leaves alone a
    main module whose spec is named ``__main__``. A script that calls :func:`tuner.tune` at its top
    level, without ``if __name__ == "__main__":``, would call it again in each child, which then
    fails as it starts; a guarded one still pays its own imports in each child. Our children run
    functions of this package only, so while an API call runs the script's main module wears a
    spec named ``__main__`` (nested and concurrent calls: the first one sets it, and it is put back
    as it was when that one ends).
    """
    main = sys.modules.get("__main__")
    spec = getattr(main, "__spec__", None)
    if main is None or spec is _MAIN_STAND_IN or (getattr(main, "__file__", None) is None and spec is None):
        yield  # a notebook or an interactive session: nothing to import again
        return
    saved = spec
    main.__spec__ = _MAIN_STAND_IN
    try:
        yield
    finally:
        main.__spec__ = saved


def die_with_parent(parent: int, sig: int = signal.SIGTERM) -> None:
    """Have the kernel send ``sig`` to this process when ``parent`` dies (Linux's
    PR_SET_PDEATHSIG); if it is dead already, now. The parent must have started this process
    from its main thread: the signal follows the thread that forked."""
    if sys.platform.startswith("linux"):
        try:
            ctypes.CDLL(None, use_errno=True).prctl(PR_SET_PDEATHSIG, int(sig), 0, 0, 0)
        except (OSError, AttributeError):
            watch_parent(parent)
    if os.getppid() != parent:  # died before the request was made
        os.kill(os.getpid(), sig)


def watch_parent(parent: int, period_s: float = 1.0) -> None:
    """Exit this process once ``parent`` is gone (a thread polls): for a child started from a
    thread that ends soon after, where PR_SET_PDEATHSIG would fire at once."""
    def watch() -> None:
        while os.getppid() == parent:
            time.sleep(period_s)
        os._exit(0)

    threading.Thread(target=watch, daemon=True, name="tuner-parent-watch").start()


def exit_with(pid: int, period_s: float = 1.0) -> None:
    """Exit this process once process ``pid`` (not necessarily the parent: a forkserver's child
    serves the process that asked the forkserver) has ended, reaped or not. A Ctrl-C, which the
    terminal sends the whole process group, is for ``pid`` to handle: it stops its helpers."""
    ignore_interrupts()

    def wait_pidfd(fd: int) -> None:
        select.select([fd], [], [])  # readable once the process has exited
        os._exit(0)

    def poll() -> None:
        while procfs.alive(pid):
            time.sleep(period_s)
        os._exit(0)

    try:
        fd = os.pidfd_open(pid)
    except ProcessLookupError:
        os._exit(0)
    except (AttributeError, OSError):  # not Linux 5.3+: poll
        threading.Thread(target=poll, daemon=True, name="tuner-exit-with").start()
        return
    threading.Thread(target=wait_pidfd, args=(fd,), daemon=True, name="tuner-exit-with").start()


#: a stop was asked for (SIGTERM, or Ctrl-C where :func:`stop_on_sigterm` handles it)
_stop_asked = False


def stop_on_sigterm() -> None:
    """SIGTERM (``kill``, Slurm's end of a job, ``docker stop``) stops this command as Ctrl-C does:
    trials in flight are failed and queued again, finished ones stay stored. Ctrl-C, where it is not
    ignored, is handled the same way, so that a stop is never lost (:func:`stop_if_asked`)."""
    signal.signal(signal.SIGTERM, _raise_interrupt)
    if signal.getsignal(signal.SIGINT) is signal.default_int_handler:
        signal.signal(signal.SIGINT, _raise_interrupt)


def _raise_interrupt(signum: int, frame: FrameType | None) -> None:
    global _stop_asked
    _stop_asked = True
    raise KeyboardInterrupt


def stop_if_asked() -> None:
    """Raise the stop asked for again: a KeyboardInterrupt raised in a finalizer or a weakref callback
    (a database driver's, say) is printed and dropped by Python, and the run would go on."""
    if _stop_asked:
        raise KeyboardInterrupt


@contextlib.contextmanager
def stop_deferred() -> Iterator[None]:
    """A stop asked for inside the block (Ctrl-C; SIGTERM where :func:`stop_on_sigterm` handles it) is
    raised once the block is done, so that what the block stores is never left half written (a trial
    created but not yet known to the run, say). Main thread only: signals are delivered there. A signal
    ignored, or handled by someone else, is left as it is."""
    if threading.current_thread() is not threading.main_thread():
        yield
        return
    ours = (signal.default_int_handler, _raise_interrupt)
    deferred: dict[int, Callable[[int, FrameType | None], Any]] = {
        sig: handler for sig in (signal.SIGINT, signal.SIGTERM) if (handler := signal.getsignal(sig)) in ours}
    asked: list[int] = []
    for sig in deferred:
        signal.signal(sig, lambda signum, frame: asked.append(signum))
    try:
        yield
    finally:
        for sig, handler in deferred.items():
            signal.signal(sig, handler)
        if asked:
            deferred[asked[0]](asked[0], None)  # the handler it would have run: it raises KeyboardInterrupt


def kill_group(leader: int) -> None:
    """SIGKILL the process group ``leader`` leads (a build, a program and what they started), if any is left."""
    try:
        os.killpg(leader, signal.SIGKILL)
    except (ProcessLookupError, PermissionError):
        pass


def ignore_interrupts() -> None:
    """SIGINT does nothing in this child process: the run that started it stops it (a child
    interrupted too would print its own traceback under the run's one line)."""
    signal.signal(signal.SIGINT, signal.SIG_IGN)
