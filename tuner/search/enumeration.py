"""The valid configurations of a cross product, by the kernel's own constraint model.

A megakernel's constraint model is Python and its cross product can hold hundreds of
thousands of configs (patch_embed_sm90a: 414,720, about 25 us each), so a large product is
split into slices checked in parallel processes, each importing the spec from its file.
Slices are contiguous runs of the product, so the result is in product order whatever the
number of processes.
"""

from __future__ import annotations

import ctypes
import hashlib
import inspect
import itertools
import json
import os
import re
import threading
import time
from collections import Counter
from concurrent.futures.process import BrokenProcessPool
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from tuner.contract.kernel_spec import Config, KernelSpec, Problem, Value, load_spec
from tuner.errors import UserError
from tuner.lifetime import helper_pool

#: the longest one call of a spec's ``check()`` may take (it runs for every config of the product,
#: in microseconds; one that takes seconds is in a loop)
CHECK_LIMIT_S = 10.0

#: below this many configs one process is faster than starting several
PARALLEL_FROM = 50_000

#: at most about this many configs a slice of a parallel enumeration (most of a second of checks)
SLICE_CONFIGS = 20_000

#: from this many configs an enumeration is kept on disk (a second run of the study starts at once)
CACHE_FROM = 20_000


def reason_kind(reason: str) -> str:
    """Group reasons that differ only in numbers ("SMEM 240000 > 232448" -> "SMEM N > N")."""
    return re.sub(r"\d+", "N", reason)


@dataclass
class Enumeration:
    valid: list[dict[str, Value]] = field(default_factory=list)
    invalid: Counter[str] = field(default_factory=Counter)
    invalid_examples: dict[str, str] = field(default_factory=dict)

    def merge(self, other: Enumeration) -> None:
        self.valid.extend(other.valid)
        self.invalid.update(other.invalid)
        for kind, reason in other.invalid_examples.items():
            self.invalid_examples.setdefault(kind, reason)


def enumerate_valid(
    spec: KernelSpec,
    problem: Problem,
    axes: dict[str, list[Value]],
    fixed: dict[str, Value],
    total: int,
    jobs: int | None = None,
) -> Enumeration:
    """Check every config of ``axes``' product (over the spec's defaults and ``fixed``)."""
    jobs = jobs if jobs is not None else (os.cpu_count() or 1)
    if jobs <= 1 or total < PARALLEL_FROM or not _loadable(spec):
        return _check_slice(spec, problem, axes, fixed, 0, total)
    # a few per process, so an uneven slice does not hold the rest up, and short ones (a run that ends
    # early waits for the slices under way: tuner.lifetime.stop_helpers)
    slices = min(max(4 * jobs, total // SLICE_CONFIGS), total // 1000 + 1)
    bounds = [total * i // slices for i in range(slices + 1)]
    result = Enumeration()
    try:
        with helper_pool(min(jobs, slices)) as pool:
            parts = [pool.submit(_check_slice_of_file, str(spec.path), problem, axes, fixed, lo, hi)
                     for lo, hi in itertools.pairwise(bounds)]
            for part in parts:
                result.merge(part.result())
    except BrokenProcessPool:  # no child could start (say, a __main__ read from stdin): check here
        return _check_slice(spec, problem, axes, fixed, 0, total)
    return result


def enumerate_cached(
    spec: KernelSpec,
    problem: Problem,
    axes: dict[str, list[Value]],
    fixed: dict[str, Value],
    total: int,
    cache_dir: Path | None,
) -> Enumeration:
    """:func:`enumerate_valid`, kept in ``cache_dir`` for large products of specs loaded from a file.

    The key covers everything ``check()`` can depend on: the files of :func:`_validity_files` (the
    spec's, its data files', the tuner's spec base classes and rule tables), the problem, the axes,
    the fixed defines and the source's defaults. An unreadable or unwritable cache only costs the
    enumeration.
    """
    if cache_dir is None or total < CACHE_FROM or not _loadable(spec):
        return enumerate_valid(spec, problem, axes, fixed, total)
    path = Path(cache_dir) / f"space-{_enumeration_key(spec, problem, axes, fixed)}.json"
    try:
        stored = json.loads(path.read_text())
        names = list(axes)
        return Enumeration(
            valid=[dict(zip(names, values, strict=True)) for values in stored["valid"]],
            invalid=Counter(stored["invalid"]),
            invalid_examples=stored["invalid_examples"],
        )
    except (OSError, ValueError, KeyError, TypeError):
        pass
    result = enumerate_valid(spec, problem, axes, fixed, total)
    try:
        path.parent.mkdir(parents=True, exist_ok=True)
        partial = path.with_suffix(f".{os.getpid()}.tmp")
        partial.write_text(json.dumps({"valid": [list(p.values()) for p in result.valid], "invalid": result.invalid,
                                       "invalid_examples": result.invalid_examples}))
        os.replace(partial, path)  # whole or not at all: another run may read it at any moment
    except OSError:
        pass
    return result


def _enumeration_key(spec: KernelSpec, problem: Problem, axes: dict[str, list[Value]], fixed: dict[str, Value]) -> str:
    import tuner

    # the source's defaults are in every config checked (the axes and fixed defines over them)
    digest = hashlib.sha256(json.dumps([tuner.__version__, problem, axes, fixed, spec.params], sort_keys=True,
                                       default=str).encode())
    for source in _validity_files(spec):
        if source.is_file():
            digest.update(source.name.encode() + b"\0" + source.read_bytes())
    return digest.hexdigest()[:24]


def _validity_files(spec: KernelSpec) -> list[Path]:
    """The files whose content decides which configs ``spec`` finds valid: its module, the Python files
    beside it and its data files (a tune_kernel folder's kernel.json holds the restrictions); the modules
    of its base classes (a light spec's restrictions are evaluated there), the contract package the specs
    check with (rules, arch limits), and this module's checking."""
    bases = [Path(inspect.getfile(cls)) for cls in type(spec).__mro__ if cls.__module__.startswith("tuner.")]
    contract = Path(__file__).parents[1] / "contract"
    files = [spec.path, *sorted(spec.path.parent.glob("*.py")), *spec.data_paths(), *bases,
             *sorted(contract.glob("*.py")), Path(__file__)]
    return list(dict.fromkeys(path.resolve() for path in files))


def _loadable(spec: KernelSpec) -> bool:
    """Whether a child process can rebuild ``spec`` from its file (replay specs live in memory)."""
    try:
        return load_spec(spec.path) is spec
    except Exception:
        return False


def _check_slice_of_file(spec_path: str, problem: Problem, axes: dict[str, list[Value]], fixed: dict[str, Value],
                         lo: int, hi: int) -> Enumeration:
    return _check_slice(load_spec(spec_path), problem, axes, fixed, lo, hi)


class _CheckTimeout(Exception):
    """Raised inside a ``check()`` call that ran past :data:`CHECK_LIMIT_S`."""


class _CheckWatch:
    """One daemon thread per process that stops any ``check()`` call running past the limit,
    by raising :class:`_CheckTimeout` in its thread (between two Python bytecodes)."""

    def __init__(self) -> None:
        self.calls: dict[int, float] = {}  # thread id -> when its call started
        self._thread: threading.Thread | None = None
        self._pid = 0

    def enter(self) -> int:
        if self._thread is None or self._pid != os.getpid():  # started lazily, again in a child process
            thread = threading.Thread(target=self._watch, daemon=True, name="tuner-check-watch")
            thread.start()
            self._thread, self._pid = thread, os.getpid()  # once it runs: a Ctrl-C before leaves it to the next call
        ident = threading.get_ident()
        self.calls[ident] = time.monotonic()
        return ident

    def _watch(self) -> None:
        while True:
            time.sleep(min(1.0, CHECK_LIMIT_S / 4))
            now = time.monotonic()
            for ident, since in list(self.calls.items()):
                if now - since > CHECK_LIMIT_S and self.calls.pop(ident, None) == since:
                    ctypes.pythonapi.PyThreadState_SetAsyncExc(ctypes.c_ulong(ident), ctypes.py_object(_CheckTimeout))


_watch = _CheckWatch()


def checked_reason(spec: KernelSpec, config: Config, problem: Problem) -> str | None:
    """``spec.check(config, problem)`` held to its contract -- None or a reason string, within
    :data:`CHECK_LIMIT_S` -- else one line naming the spec and the config (a spec is a user's
    Python: it may raise, exit, loop, or return something else)."""
    ident = _watch.enter()
    try:
        reason = spec.check(config, problem)
        _watch.calls.pop(ident, None)
    except UserError:  # the spec said what is wrong already
        _watch.calls.pop(ident, None)
        raise
    except _CheckTimeout:
        raise UserError(f"kernel spec {spec.path}: check() ran longer than {CHECK_LIMIT_S:.0f} s on "
                        f"{_short(config)}: does it loop?") from None
    except (Exception, SystemExit) as exc:
        _watch.calls.pop(ident, None)
        raise UserError(f"kernel spec {spec.path}: check() raised {type(exc).__name__}: "
                        f"{' '.join(str(exc).split())[:200]} on {_short(config)}") from None
    except BaseException:
        _watch.calls.pop(ident, None)
        raise
    if reason is not None and not isinstance(reason, str):
        raise UserError(f"kernel spec {spec.path}: check() must return None (valid) or a reason string, "
                        f"got {type(reason).__name__} {reason!r:.60} on {_short(config)}")
    return reason


def _short(config: Config) -> str:
    text = " ".join(f"{k}={v}" for k, v in config.items())
    return text if len(text) <= 160 else text[:157] + "..."


def _check_slice(spec: KernelSpec, problem: Problem, axes: dict[str, list[Value]], fixed: dict[str, Value],
                 lo: int, hi: int) -> Enumeration:
    result = Enumeration()
    base: dict[str, Any] = {**spec.params, **fixed}
    names = list(axes)
    for combo in itertools.islice(itertools.product(*axes.values()), lo, hi):
        params = dict(zip(names, combo, strict=True))
        reason = checked_reason(spec, {**base, **params}, problem)
        if reason is None:
            result.valid.append(params)
        else:
            kind = reason_kind(reason)
            result.invalid[kind] += 1
            result.invalid_examples.setdefault(kind, reason)
    return result
