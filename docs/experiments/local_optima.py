"""Local optima of the practice spaces under one-axis moves (any level), and where a steepest
climb from each config ends.

    cd docs/experiments && python3 local_optima.py
"""
from __future__ import annotations

import numpy as np
from sampler_sim import RECORDINGS, Pool, load_recording, recorded_times, space_for


def climb_ends(times: np.ndarray, neighbours: list[np.ndarray]) -> np.ndarray:
    """For each config, the config a steepest one-axis climb from it ends on (memoised)."""
    end = np.full(len(times), -1)
    for start in range(len(times)):
        path, row = [], start
        while end[row] < 0:
            path.append(row)
            near = neighbours[row]
            best = near[np.argmin(times[near])] if len(near) else row
            if times[best] >= times[row]:
                end[row] = row
                break
            row = best
        end[path] = end[row]
    return end


def main() -> None:
    for label, study_file, path in RECORDINGS:
        recording = load_recording(path)
        space = space_for(study_file, recording)
        times = recorded_times(recording, space)
        optimum = times[np.isfinite(times)].min()
        pool = Pool(space, space.valid)  # nothing tried: its neighbours are all one-axis neighbours
        neighbours = [pool.neighbours(code) for code in pool.codes]
        working = np.flatnonzero(np.isfinite(times))
        local = [i for i in working if all(times[neighbours[i]] >= times[i])]
        ends = optimum / times[climb_ends(times, neighbours)[working]]
        near_optimum = sum(optimum / times[i] >= 0.95 for i in local)
        print(f"{label:24s} configs {len(times):6d} local optima {len(local):4d} (>=0.95: {near_optimum})  "
              f"steepest climb ends >=0.95 from {np.mean(ends >= 0.95):.2f} of starts, mean end {ends.mean():.3f}")


if __name__ == "__main__":
    main()
