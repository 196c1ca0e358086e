"""The valid configurations of a cross product, by the kernel's own constraint model.

A megakernel's constraint model is Python and its cross product can hold hundreds of
thousands of configs (patch_embed_sm90a: 414,720, about 17 us each), so a large product is
split into slices checked in parallel processes, each importing the spec from its file.
Slices are contiguous runs of the product, so the result is in product order whatever the
number of processes.
"""

from __future__ import annotations

import itertools
import multiprocessing as mp
import os
import re
from collections import Counter
from concurrent.futures import ProcessPoolExecutor
from concurrent.futures.process import BrokenProcessPool
from dataclasses import dataclass, field
from typing import Any

from tuner.spec import KernelSpec, Problem, Value, load_spec

#: below this many configs one process is faster than starting several
PARALLEL_FROM = 50_000


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
    slices = min(4 * jobs, total // 1000 + 1)  # a few per process, so an uneven slice does not hold the rest up
    bounds = [total * i // slices for i in range(slices + 1)]
    result = Enumeration()
    context = mp.get_context("forkserver")  # the caller may have threads: no fork
    try:
        with ProcessPoolExecutor(max_workers=min(jobs, slices), mp_context=context) as pool:
            parts = [pool.submit(_check_slice_of_file, str(spec.path), problem, axes, fixed, lo, hi)
                     for lo, hi in itertools.pairwise(bounds)]
            for part in parts:
                result.merge(part.result())
    except BrokenProcessPool:  # no child could start (say, a __main__ read from stdin): check here
        return _check_slice(spec, problem, axes, fixed, 0, total)
    return result


def _loadable(spec: KernelSpec) -> bool:
    """Whether a child process can rebuild ``spec`` from its file (replay specs live in memory)."""
    try:
        return load_spec(spec.path) is spec
    except Exception:
        return False


def _check_slice_of_file(spec_path: str, problem: Problem, axes: dict[str, list[Value]], fixed: dict[str, Value],
                         lo: int, hi: int) -> Enumeration:
    return _check_slice(load_spec(spec_path), problem, axes, fixed, lo, hi)


def _check_slice(spec: KernelSpec, problem: Problem, axes: dict[str, list[Value]], fixed: dict[str, Value],
                 lo: int, hi: int) -> Enumeration:
    result = Enumeration()
    base: dict[str, Any] = {**spec.params, **fixed}
    names = list(axes)
    for combo in itertools.islice(itertools.product(*axes.values()), lo, hi):
        params = dict(zip(names, combo))
        reason = spec.check({**base, **params}, problem)
        if reason is None:
            result.valid.append(params)
        else:
            kind = reason_kind(reason)
            result.invalid[kind] += 1
            result.invalid_examples.setdefault(kind, reason)
    return result
