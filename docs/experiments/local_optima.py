"""Local optima of the practice spaces under one-axis moves (any level), and where a steepest
climb from each config ends. `cd docs/experiments && python3 local_optima.py`"""
import math, sys
import numpy as np
sys.argv = ['x']
import sampler_sim as S
for label, study_file, path in S.RECORDINGS:
    rec = S.load_recording(path); space = S.space_for(study_file, rec); valid = space.valid
    times = np.array([(r.ms if (r := rec.lookup(p)) is not None and r.status == "ok" else math.inf) for p in valid])
    opt = times[np.isfinite(times)].min()
    names = list(space.axes)
    index = {tuple(p[a] for a in names): i for i, p in enumerate(valid)}
    levels = [list(v) for v in space.axes.values()]
    nbrs = []
    for p in valid:
        key = [p[a] for a in names]; out = []
        for ax, lv in enumerate(levels):
            for v in lv:
                if v == key[ax]: continue
                k2 = list(key); k2[ax] = v
                j = index.get(tuple(k2))
                if j is not None: out.append(j)
        nbrs.append(out)
    # local optima: no neighbour strictly better
    fin = np.isfinite(times)
    local = [i for i in range(len(valid)) if fin[i] and all(times[j] >= times[i] for j in nbrs[i])]
    # steepest-descent end from each finite config
    end = {}
    def climb(i):
        path = []
        while i not in end:
            path.append(i)
            better = [j for j in nbrs[i] if times[j] < times[i]]
            if not better: end[i] = i; break
            i = min(better, key=lambda j: times[j])
        e = end[i]
        for k in path: end[k] = e
        return e
    ends = np.array([opt / times[climb(i)] for i in range(len(valid)) if fin[i]])
    print(f"{label:24s} configs {len(valid):6d} local optima {len(local):4d} (>=0.95: {sum(opt/times[i] >= 0.95 for i in local)})  steepest climb ends >=0.95 from {np.mean(ends >= 0.95):.2f} of starts, mean end {ends.mean():.3f}")
