"""A warm start that stays near what it transferred (not kept unless measured better): while a
prior is in use and the study has fewer than LOCAL_TRIALS of its own, the density ratio chooses
only among the untried one-axis neighbours of the good configs, not among a uniform sample too.

    PYTHONPATH=$PWD python3 docs/experiments/transfer_local.py [--seeds 10] SOURCE:TARGET ...

(the protocol of warm_pairs.py, run on this variant).
"""
import sys
from pathlib import Path

import numpy as np

ROOT = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT / "docs/experiments"))

from tuner.search import parzen  # noqa: E402

LOCAL_TRIALS = 20


class LocalAfterTransfer(parzen.ParzenSearch):
    def propose(self, pool, ordered, prior=None):
        if prior is None or not len(prior) or len(pool.observations) >= LOCAL_TRIALS:
            return super().propose(pool, ordered, prior)
        sample = pool.random_untried
        pool.random_untried = lambda k, rng: sample(k, rng) if k == 1 else np.empty(0, dtype=np.int64)
        try:
            row = super().propose(pool, ordered, prior)
        finally:
            del pool.random_untried
        return row if row is not None else super().propose(pool, ordered, prior)


if __name__ == "__main__":
    parzen.ParzenSearch = LocalAfterTransfer
    import tuner.search.sampler as sampler_module
    sampler_module.ParzenSearch = LocalAfterTransfer
    import warm_pairs
    warm_pairs.main()
