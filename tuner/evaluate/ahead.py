"""How many configs to propose and compile ahead of the one on the GPU.

A config proposed ahead is proposed without the results of those before it: with one compile
process per core (16 on a GPU host) and every process busy, a 25-trial run would propose its
first 17 configs knowing nothing (replayed so, cold runs end 0.023 of the optimum lower at 25
trials: docs/experiments/results_sampler.md). Proposing ahead only pays while a config's
compile would otherwise keep the GPU waiting, so the depth follows Little's law: to
hand the GPU a compiled config every ``gpu_s`` seconds when a compile takes ``compile_s``, about
``compile_s / gpu_s`` configs are compiling at once; one more is ready when the GPU asks.
"""

from __future__ import annotations

import math
from collections import deque

#: the configs the estimate reads (the latest: a study's configs change as its search narrows)
WINDOW = 16
#: configs ahead before anything was measured: the first compiles overlap the first measurement
START_DEPTH = 2


class AheadDepth:
    """The depth of the compile-ahead pipeline, from the latest configs' compile and GPU times,
    never more than ``limit`` (the compile processes)."""

    def __init__(self, limit: int) -> None:
        self.limit = limit
        self._compile_s: deque[float] = deque(maxlen=WINDOW)
        self._gpu_s: deque[float] = deque(maxlen=WINDOW)

    def add(self, compile_s: float, gpu_s: float) -> None:
        """One config's compile time and the time the GPU (its worker) spent on it."""
        self._compile_s.append(max(0.0, compile_s))
        self._gpu_s.append(max(0.0, gpu_s))

    def __call__(self) -> int:
        if not self._gpu_s:
            return min(self.limit, START_DEPTH)
        compile_s = sum(self._compile_s) / len(self._compile_s)
        gpu_s = max(sum(self._gpu_s) / len(self._gpu_s), 1e-3)
        return min(self.limit, math.ceil(compile_s / gpu_s) + 1)
