"""Our kernels against cuBLAS, through the engine's own evaluation path.

For each study, its known best config (the first ``[search] start`` entry, or the one
given) is measured by the engine's GPU evaluator with the spec's baseline as the
reference: ``[measure] reference = "baseline"`` (for the Hopper GEMM, cuBLAS FP8 via
torch._scaled_mm, GEMM only). The pairs alternate launch by launch in the worker
process; the figure is the median of the per-pair ratios with its 95 % interval.

Like for like: a study of the fast class (``[study] precision``) is paired with cuBLAS's fast
accumulation (``use_fast_accum=True``), any other with its precise mode, and the config is
checked with its class's tolerance (outside it: ``mismatch``, no ratio). ``--errors`` then counts,
for each shape, the outputs of ours and of both cuBLAS modes off by more than 0.02 + 2 % of the
FP32 reference (bench/precision_check.py, same inputs).

    python3 bench/bench_vs_cublas.py studies/patch_embed_sm90a.toml studies/patch_embed_sm90a_precise.toml \\
        [--regime sustained|burst] [--pairs 200] [--errors] [--out results.json]

Needs a GPU, and torch with CUDA in the worker's Python (the spec's baseline).
"""

from __future__ import annotations

import argparse
import dataclasses
import datetime
import json
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from tuner.contract.kernel_spec import load_spec  # noqa: E402
from tuner.contract.precision import tolerance  # noqa: E402
from tuner.evaluate.gpu import BASELINE, GpuEvaluator  # noqa: E402
from tuner.search.space import Space  # noqa: E402
from tuner.search.start import start_params  # noqa: E402
from tuner.study.file import load_study  # noqa: E402


def measure(study_path: str, regime: str, pairs: int, evaluator: GpuEvaluator | None) -> tuple[dict, GpuEvaluator]:
    path = Path(study_path)
    cfg = load_study(path if path.suffix == ".toml" else ROOT / "studies" / f"{study_path}.toml")
    spec = load_spec(cfg.kernel)
    space = Space.from_study(cfg, spec)
    settings = dataclasses.replace(cfg.measure, reference=BASELINE, regime=regime, repeats=pairs, min_pairs=pairs,
                                   ci_target=0.0, timeout_s=60.0,
                                   energy_s=1.0)  # the W column: the candidate alone, step-aligned (tuner/device/energy.py)
    supervisor = evaluator.supervisor if evaluator else None  # one worker for every shape
    fast = cfg.precision == "fast"   # the matching cuBLAS mode (the spec's baseline reads it from the problem)
    problem = {**space.problem, "BASELINE_FAST_ACCUM": int(fast)}
    evaluator = GpuEvaluator(spec, problem, cfg.arch, settings, supervisor=supervisor, reference=BASELINE,
                             tolerance=tolerance(cfg.precision, spec))
    device = evaluator.start() if supervisor is None else supervisor.device
    params = start_params(space, cfg.search.start[:1])[0] if cfg.search.start else space.defaults()
    m = evaluator.evaluate(params, space.full_config(params), lambda step, value, samples: False)
    row = {"study": cfg.name, "precision": cfg.precision, "cublas_fast_accum": fast, "shape": cfg.shape,
           "device": device.get("name"), "regime": regime, "status": m.status, "reason": m.reason,
           "flags": m.flags, "ms": m.ms, "ratio": m.ratio, "reference_ms": m.reference_ms,
           **{k: m.extra.get(k) for k in ("ratio_lo", "ratio_hi", "pairs", "sm_clock_mhz", "power_w")}}
    if m.status != "ok" and m.extra.get("traceback"):
        row["traceback"] = m.extra["traceback"]
    return row, evaluator


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("studies", nargs="+", help="study files, or names under studies/ (patch_embed_sm90a)")
    parser.add_argument("--regime", choices=("sustained", "burst"), default="sustained")
    parser.add_argument("--pairs", type=int, default=200)
    parser.add_argument("--errors", action="store_true",
                        help="then count each shape's outputs off by more than 0.02 + 2 %% (ours, cuBLAS fast and precise)")
    parser.add_argument("--out", type=Path, help="write the rows as JSON here too")
    args = parser.parse_args()
    rows, evaluator = [], None
    try:
        for path in args.studies:
            row, evaluator = measure(path, args.regime, args.pairs, evaluator)
            rows.append(row)
            print(json.dumps(row), flush=True)
    finally:
        if evaluator is not None:
            evaluator.close()
    print(f"\nours / cuBLAS GEMM-only, {args.regime}, {rows[0]['device']}, "
          f"{datetime.datetime.now(datetime.UTC):%Y-%m-%d}")
    print(f"{'study':28} {'cuBLAS':8} {'ratio':>7} {'95% interval':>17} {'ours ms':>8} {'cuBLAS ms':>9} {'pairs':>5} "
          f"{'MHz':>5} {'W':>5}")
    for r in rows:
        mode = "fast" if r["cublas_fast_accum"] else "precise"
        if r["status"] != "ok":
            print(f"{r['study']:28} {mode:8} {r['status']}: {r['reason']}\n{r.get('traceback', '')}")
            continue
        print(f"{r['study']:28} {mode:8} {r['ratio']:7.3f} [{r['ratio_lo']:.3f}, {r['ratio_hi']:.3f}] {r['ms']:8.4f} "
              f"{r['reference_ms']:9.4f} {r['pairs']:5d} {r.get('sm_clock_mhz') or '':>5} {r.get('power_w') or '':>5}")
    result: dict = {"timing": rows}
    if args.errors:   # after the worker has gone: its buffers are freed
        import torch

        from bench.precision_check import run_shape
        from tuner.device.worker import CudaBackend

        backend, shapes = CudaBackend(), dict.fromkeys(r["shape"] for r in rows)
        backend.hello()
        result["errors"] = [row for shape in shapes for row in run_shape(shape, None, backend, torch)]
        print("\noutputs off by more than 0.02 + 2 % of the FP32 reference (same inputs)")
        for e in result["errors"]:
            what = e.get("over") if e.get("status", "ok") == "ok" else f"{e['status']}: {e.get('reason')}"
            print(f"{e['shape']:12} {e['who']:7} {e['label']:34} {what} of {e['outputs']}")
    if args.out:
        args.out.write_text(json.dumps(result, indent=1))
    return 0


if __name__ == "__main__":
    sys.exit(main())
