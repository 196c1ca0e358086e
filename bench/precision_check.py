"""How many outputs are off by more than 0.02 + 2 % of the FP32 reference: ours and cuBLAS (on a GPU host).

For each Hopper shape, on the same FP8 inputs (the worker's generator, seed 0) and the same FP32
reference (kernel/gemm_reference.cu, every output), in this process through the worker's CUDA
backend:

* ours: each config (the fast study's first start config, the precise study's with
  PROMOTE_EVERY 0 / 1 / 2 / 4: the same tile, only the promotion differs), every output counted
  against the precise tolerance (no row-RMS floor), and a relaunch compared bitwise (a race in
  the promotion would show there);
* cuBLAS FP8 (torch._scaled_mm, FP32 out) with ``use_fast_accum`` True and False, followed by the
  same epilogue in FP32 torch ops and one BF16 rounding, counted the same way.

    python3 bench/precision_check.py [patch_embed fc1 fc2] [--rows M] [--out errors.json]

Needs a GPU and torch with CUDA.
"""

from __future__ import annotations

import argparse
import json
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from tuner.compile.nvrtc import compile_kernel  # noqa: E402
from tuner.contract.kernel_spec import load_spec  # noqa: E402
from tuner.contract.precision import PRECISE_ATOL, PRECISE_RTOL, Tolerance  # noqa: E402
from tuner.search.start import start_params  # noqa: E402
from tuner.study.file import load_study  # noqa: E402

SHAPES = ("patch_embed", "fc1", "fc2")
#: every output counted against the precise tolerance; none may fail the check itself (the count is the result)
COUNT_ONLY = Tolerance(PRECISE_ATOL, PRECISE_RTOL, rms_floor=False, max_bad_fraction=1.0, precision="count")
CHUNK_ROWS = 65536


def study_config(path: Path, promote: int | None = None) -> dict:
    from tuner.search.space import Space

    cfg = load_study(path)
    space = Space.from_study(cfg, load_spec(cfg.kernel))
    params = start_params(space, cfg.search.start[:1])[0] if cfg.search.start else space.defaults()
    config = space.full_config(params)
    if promote is not None:
        config["PROMOTE_EVERY"] = promote
        if not promote:   # the start's tile, unpromoted: nothing to split, and unrolled ptxas serializes FC1's
            config["PROMOTE_SPLIT"] = config["UNROLL_K"] = 0
    return config


def configs_of(shape: str) -> list[tuple[str, dict]]:
    fast = ROOT / "studies" / f"{shape}_sm90a.toml"
    precise = ROOT / "studies" / f"{shape}_sm90a_precise.toml"
    return [("fast study's start", study_config(fast))] + [
        (f"precise start, PROMOTE_EVERY={p}", study_config(precise, p)) for p in (0, 1, 2, 4)]


def cublas_errors(torch, backend, spec, problem: dict, fast: bool) -> dict:
    """cuBLAS FP8 GEMM (FP32 out) + the epilogue in FP32, one BF16 rounding, against the reference."""
    M, N, K, epi, seq = spec._prob(problem)

    def view(ptr, shape, typestr, dtype):
        class _View:
            __cuda_array_interface__ = {"shape": shape, "typestr": typestr, "data": (int(ptr), False), "version": 3}
        return torch.as_tensor(_View(), device="cuda").view(dtype)

    buf = backend.buffers
    a = view(buf["A"], (M, K), "|u1", torch.float8_e4m3fn)
    w = view(buf["W"], (N, K), "|u1", torch.float8_e4m3fn)
    ref = view(backend.verifier.expected, (M, N), "<f4", torch.float32)
    one = torch.ones((), device="cuda", dtype=torch.float32)
    bias = view(buf["bias"], (N,), "<u2", torch.bfloat16).float() if epi != "BIAS_POS" else None
    combined = view(buf["combined"], (seq, N), "<u2", torch.bfloat16).float() if epi == "BIAS_POS" else None
    residual = view(buf["residual"], (M, N), "<u2", torch.bfloat16) if epi == "BIAS_RESIDUAL" else None
    over = nan = 0
    worst = 0.0
    out_dtype = torch.float32
    for r0 in range(0, M, CHUNK_ROWS):
        r1 = min(M, r0 + CHUNK_ROWS)
        try:
            acc = torch._scaled_mm(a[r0:r1], w.t(), scale_a=one, scale_b=one, out_dtype=out_dtype, use_fast_accum=fast)
        except RuntimeError:   # a torch without FP32 output for FP8: BF16 out (one more rounding, reported)
            out_dtype = torch.bfloat16
            acc = torch._scaled_mm(a[r0:r1], w.t(), scale_a=one, scale_b=one, out_dtype=out_dtype, use_fast_accum=fast)
        x = acc.float()
        if epi == "BIAS_POS":
            x = x + combined[torch.arange(r0, r1, device="cuda") % seq]
        elif epi == "BIAS_GELU":
            x = x + bias
            x = 0.5 * x * (1.0 + torch.tanh(0.7978845608028654 * (x + 0.044715 * x * x * x)))
        else:
            x = x + bias + residual[r0:r1].float()
        y = x.to(torch.bfloat16).float()
        r = ref[r0:r1]
        diff = (y - r).abs()
        tol = PRECISE_ATOL + PRECISE_RTOL * r.abs()
        over += int((diff > tol).sum())
        nan += int((~torch.isfinite(y)).sum())
        worst = max(worst, float((diff / tol).max()))
    return {"over": over, "nan": nan, "max_err": worst, "gemm_out": str(out_dtype).replace("torch.", "")}


def run_shape(shape: str, rows: int | None, backend, torch) -> list[dict]:
    spec = load_spec(ROOT / "kernel" / "gemm_sm90a.py")
    problem = dict(load_study(ROOT / "studies" / f"{shape}_sm90a.toml").problem)
    if rows:
        problem["M"] = rows
    started = time.perf_counter()
    backend.prepare(spec, problem, seed=0)
    total = int(problem["M"]) * int(problem["N"])
    rows_out = []
    base = {"shape": shape, "M": int(problem["M"]), "outputs": total, "prepare_s": round(time.perf_counter() - started, 2)}
    for label, config in configs_of(shape):
        reason = spec.check(config, problem)
        row = {**base, "who": "ours", "label": label, "PROMOTE_EVERY": int(config.get("PROMOTE_EVERY", 0))}
        if reason:
            rows_out.append({**row, "status": "invalid", "reason": reason})
            continue
        built = compile_kernel(spec, config, problem, "sm_90a")
        if not built.ok:
            rows_out.append({**row, "status": built.status, "reason": built.reason})
            continue
        handle = backend.load(spec, config, problem, built.cubin_path)
        try:
            m = backend.check(handle, spec, problem, 0, 0, COUNT_ONLY.as_job())
        finally:
            backend.unload(handle)
        rows_out.append({**row, "status": m.status, "reason": m.reason, "over": m.extra.get("n_bad"),
                         "race_rows": m.extra.get("race"), "max_err": m.max_err, "spills": built.spills})
    for fast in (True, False):
        errors = cublas_errors(torch, backend, spec, problem, fast)
        rows_out.append({**base, "who": "cublas", "label": f"use_fast_accum={fast}", **errors})
    return rows_out


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("shapes", nargs="*", default=list(SHAPES), choices=SHAPES)
    parser.add_argument("--rows", type=int, help="M (default: the study's, 928256); a multiple of 256")
    parser.add_argument("--out", type=Path, help="write the rows as JSON here too")
    args = parser.parse_args()
    import torch

    from tuner.device.worker import CudaBackend

    backend = CudaBackend()
    device = backend.hello()
    rows = []
    for shape in args.shapes:
        for row in run_shape(shape, args.rows, backend, torch):
            row["device"] = device.get("name")
            rows.append(row)
            print(json.dumps(row), flush=True)
    print(f"\noutputs off by more than {PRECISE_ATOL} + {PRECISE_RTOL:.0%} of the FP32 reference, {device.get('name')}")
    for r in rows:
        what = r.get("over") if r.get("status", "ok") == "ok" else f"{r['status']}: {r.get('reason')}"
        race = f"  relaunch differs in {r['race_rows']} rows" if r.get("race_rows") else ""
        print(f"{r['shape']:12} {r['who']:7} {r['label']:34} {what} of {r['outputs']}{race}")
    if args.out:
        args.out.write_text(json.dumps(rows, indent=1))
    return 0


if __name__ == "__main__":
    sys.exit(main())
