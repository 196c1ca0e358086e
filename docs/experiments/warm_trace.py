"""From an idle GPU: block medians of a study's first start config (the reference) and its last
one, timed in pairs, with the SM clock. When do the times and their ratio settle? (issue 32)

    python3 docs/experiments/warm_trace.py STUDY OUT.json IDLE_S SECONDS

Two repetitions, each after IDLE_S seconds of rest, SECONDS long; 10 pairs per block.
"""

import json
import statistics
import sys
import time
from pathlib import Path

from tuner.compile.nvrtc import compile_kernel
from tuner.contract.kernel_spec import load_spec
from tuner.device.worker import CudaBackend
from tuner.study.file import load_study


def main(study: str, out: str, idle: float, seconds: float) -> None:
    cfg = load_study(study)
    spec = load_spec(cfg.kernel)
    backend = CudaBackend()
    backend.hello()
    backend.prepare(spec, cfg.problem, seed=0)
    handles = []
    for cand in (cfg.search.start[0], cfg.search.start[-1]):
        config = {**cfg.fixed, **cand}
        built = compile_kernel(spec, config, cfg.problem, cfg.arch)
        handles.append(backend.load(spec, {**spec.params, **config}, cfg.problem, built.cubin_path))
    rows = []
    for rep in range(2):
        time.sleep(idle)
        t0 = time.monotonic()
        while time.monotonic() - t0 < seconds:
            pairs = backend.time(handles, 10)  # 10 rounds of (ref, cand)
            ref = statistics.median(p[0] for p in pairs)
            cand = statistics.median(p[1] for p in pairs)
            ratio = statistics.median(p[1] / p[0] for p in pairs)
            rows.append({"rep": rep, "t": round(time.monotonic() - t0, 3), "ref": ref, "cand": cand, "ratio": ratio,
                         **backend.sensors()})
    Path(out).write_text(json.dumps(rows))
    for r in rows[::5]:
        print(r)


if __name__ == "__main__":
    main(sys.argv[1], sys.argv[2], float(sys.argv[3]), float(sys.argv[4]))
