"""Copies of a problem's buffers at other device addresses, for timing over several placements.

How fast one kernel runs against another depends on where their data lies in device memory:
on an H100, FC2's BLOCK_N 192 configs measured against a BLOCK_N 128 reference gave ratios
from 0.770 to 0.784 over twelve allocations of the same buffers, each within ±0.1 % when
re-measured in its own allocation (docs/experiments/MEASUREMENT.md, 2026-11-26). A worker
allocates once per process, so every value of an invocation carried that invocation's draw
and two invocations disagreed by up to 1.6 % on one config. The worker therefore keeps a few
copies of the inputs and outputs and rotates the timed rounds over them: each value averages
over the placements instead of inheriting one.

A problem whose buffers fit a few times in L2 is not copied: its data does not stream from
DRAM, and switching copies would turn warm-cache launches into cold ones.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from typing import Any

from tuner.device.driver import check as _ck

#: at most this share of the free device memory goes to copies
MEMORY_SHARE = 0.5
#: problems with less than this many L2 sizes of buffers get no copies
L2_MULTIPLE = 4


def copies_that_fit(wanted: int, set_bytes: int, free_bytes: int, l2_bytes: int) -> int:
    """How many buffer sets (the original included) to keep: ``wanted``, fewer when memory is short,
    one when the problem's data lives in L2."""
    if wanted <= 1 or set_bytes < L2_MULTIPLE * l2_bytes:
        return 1
    extra = int(free_bytes * MEMORY_SHARE) // max(1, set_bytes)
    return max(1, min(wanted, 1 + extra))


class Placements:
    """Buffer sets: the original (index 0, the worker's own buffers) and copies made by :meth:`make`."""

    def __init__(self, cu: Any):
        self.cu = cu
        self.sets: list[Mapping[str, Any]] = []
        self._copies: list[dict[str, Any]] = []

    def make(self, original: Mapping[str, Any], nbytes: Mapping[str, int], inputs: list[str], wanted: int,
             l2_bytes: int) -> int:
        """Copies of ``original`` (name -> device pointer): inputs with their contents, outputs
        uninitialised (they are only written). Returns the number of sets."""
        self.free()
        cu = self.cu
        free_bytes, _ = _ck("cuMemGetInfo", cu.cuMemGetInfo())
        count = copies_that_fit(wanted, sum(nbytes.values()), int(free_bytes), l2_bytes)
        for _ in range(count - 1):
            copy: dict[str, Any] = {}
            try:
                for name, size in nbytes.items():
                    copy[name] = _ck("cuMemAlloc", cu.cuMemAlloc(max(1, size)))
                    if name in inputs:
                        _ck("cuMemcpyDtoD", cu.cuMemcpyDtoD(copy[name], original[name], size))
            except Exception:
                for ptr in copy.values():
                    cu.cuMemFree(ptr)
                break
            self._copies.append(copy)
        self.sets = [original, *self._copies]
        return len(self.sets)

    def free(self) -> None:
        for copy in self._copies:
            for ptr in copy.values():
                self.cu.cuMemFree(ptr)
        self._copies = []
        self.sets = []

    def bind(self, build: Callable[[Callable[[str], int]], Any]) -> list[Any]:
        """``build(address_of)`` for every set: one launch variant per placement."""
        def address_in(buffers: Mapping[str, Any]) -> Callable[[str], int]:
            return lambda name: int(buffers[name])

        return [build(address_in(buffers)) for buffers in self.sets or [{}]]
