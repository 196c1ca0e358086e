"""Synthetic studies that follow the engine's trial record contract.

Used by the tests, the report benchmark and the documentation screenshots, so the
dashboards can be built and looked at without a GPU or a recorded replay. The numbers are
shaped like the H200 FP8 GEMM sweeps (a fast region, a register cliff, SMEM limits,
pruned slow configs, hangs) but are made up.

    python -m dashboards.demo sqlite:///demo.db      # three shapes + an empty study
"""

from __future__ import annotations

import datetime as _dt
import itertools
import math
import random
import sys
import warnings

import optuna
from optuna.distributions import CategoricalDistribution
from optuna.trial import TrialState

from tuner.contract.arch import limits

AXES: dict[str, list] = {
    "TN": [128, 192, 256],
    "N_STAGES": [2, 3, 4, 5, 6],
    "NUM_EPI_WARPS": [4, 5],
    "PHASE2_UNROLL": [4, 8, 16],
    "STAGING_ROW_PAD": [0, 16, 32],
    "SNAKE_ORDER": ["off", "on"],
    "TMA_L2_PROMOTION": ["none", "l2_128b", "l2_256b"],
}
TIER1 = ["TN", "N_STAGES", "NUM_EPI_WARPS", "PHASE2_UNROLL", "STAGING_ROW_PAD"]
TIER2 = ["SNAKE_ORDER", "TMA_L2_PROMOTION"]
HOPPER_SMEM = limits("sm_90a").max_smem_per_block  # the demo's device is an H200

SHAPES = {
    "patch_embed": dict(M=928256, N=768, K=768, EPILOGUE="bias_pos", baseline=(1.04, 2.96)),
    "fc1": dict(M=928256, N=3072, K=768, EPILOGUE="bias_gelu", baseline=(4.51, 11.6)),
    "fc2": dict(M=928256, N=768, K=3072, EPILOGUE="bias_residual", baseline=(3.76, 5.56)),
}

DEVICE = {"name": "NVIDIA H200", "sm_count": 132, "driver": "580.95.05"}


def flags_of(params: dict) -> str:
    return " ".join(f"-D{k}={v}" for k, v in params.items())


def _evaluate(params: dict, problem: dict, rng: random.Random) -> dict:
    """One made-up trial record (user attrs) and its state for ``params``."""
    tn, stages = params["TN"], params["N_STAGES"]
    epi, unroll, pad = params["NUM_EPI_WARPS"], params["PHASE2_UNROLL"], params["STAGING_ROW_PAD"]
    smem = stages * (128 * 128 + 128 * tn) + epi * 32 * (tn // 2 + pad) * 2 + 1024
    regs = 96 + tn // 4 + unroll * 6 + (8 if params["SNAKE_ORDER"] == "on" else 0) + rng.randint(-6, 6)
    spills = max(0, regs - 240) * 4
    attrs: dict = {"flags": flags_of(params), "phase": "joint"}
    if tn == 192:
        attrs.update(status="invalid", reason="TN=192 gives COLS_PER_THREAD=6: no vector store width")
        return attrs
    if smem > HOPPER_SMEM:
        attrs.update(status="invalid", reason=f"SMEM {smem} B > {HOPPER_SMEM} B per block")
        return attrs
    attrs["compile_s"] = round(rng.uniform(1.5, 4.0), 2)
    if rng.random() < 0.015:
        attrs.update(status="compile_error", reason="NVRTC: error: identifier \"STORE_V3\" is undefined")
        return attrs
    attrs.update(regs=regs, spills=spills, smem_bytes=smem)
    if regs > 255:
        attrs.update(status="too_many_regs", reason=f"ptxas: {regs} registers > 255")
        return attrs
    if spills > 0:
        attrs.update(status="spills", reason=f"ptxas: {spills} bytes spill stores")
        return attrs
    if stages == 2 and epi == 5 and rng.random() < 0.5:
        attrs.update(status="hang", reason="worker killed after 10.0 s: kernel did not finish")
        return attrs
    if pad == 0 and unroll == 16 and rng.random() < 0.3:
        attrs.update(status="mismatch", reason="row 1234: max rel err 0.31 > 0.01")
        return attrs
    flops = 2.0 * problem["M"] * problem["N"] * problem["K"]
    base = flops / 1.45e15 * 1e3  # ms at ~1450 TFLOPS
    ms = base * (1.0 + 0.35 * abs(stages - 4) / 2 + (0.12 if tn == 128 else 0.0)
                 + 0.05 * (epi == 5) + 0.04 * abs(math.log2(unroll) - 3)
                 + 0.03 * (pad == 0) + (0.02 if params["SNAKE_ORDER"] == "off" else 0.0)
                 + 0.015 * (params["TMA_L2_PROMOTION"] == "none"))
    ms *= 1.0 + rng.gauss(0, 0.01)
    attrs.update(ms=round(ms, 5), tflops=round(flops / (ms * 1e-3) / 1e12, 1))
    return attrs


def make_study(storage, name: str, shape: str = "patch_embed", n_trials: int = 300,
               seed: int = 0, with_baseline: bool = True, kind: str = "replay",
               created: _dt.datetime | None = None) -> optuna.Study:
    """Create study ``name`` in ``storage`` with ``n_trials`` contract-shaped trials."""
    spec = SHAPES.get(shape, SHAPES["patch_embed"])
    problem = {k: spec[k] for k in ("M", "N", "K", "EPILOGUE")}
    flops = 2.0 * problem["M"] * problem["N"] * problem["K"]
    study = optuna.create_study(storage=storage, study_name=name, direction="minimize")
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", optuna.exceptions.ExperimentalWarning)
        study.set_metric_names(["ms"])
    created = created or _dt.datetime(2026, 11, 1, 9, 0, 0)
    attrs = {
        "kind": kind, "shape": shape, "problem": problem, "arch": "sm_90a",
        "kernel": "gemm_sm90a", "kernel_path": "kernel/gemm_sm90a.cu",
        "source_hash": "3f9c2a71d0e4b8a65c1e0f9d2b7a4c3e1f0a9b8c7d6e5f4a3b2c1d0e9f8a7b6c",
        "device": DEVICE, "nvrtc_version": "13.0.88", "tool_version": "0.1.0",
        "axes": list(AXES), "tier1": TIER1, "tier2": TIER2, "flops": flops,
        "created": created.isoformat(),
    }
    if with_baseline:
        attrs["baseline_ms"] = {"cublas": spec["baseline"][0], "cublas_plus_epilogue": spec["baseline"][1]}
    if kind == "replay":
        attrs["replay_file"] = f"studies/recorded/{shape}_h200.csv"
    for key, value in attrs.items():
        study.set_user_attr(key, value)

    rng = random.Random(seed)
    dists = {k: CategoricalDistribution(v) for k, v in AXES.items()}
    grid = list(itertools.product(*AXES.values()))
    seen: dict[tuple, float] = {}
    trials = []
    t = created
    for number in range(n_trials):
        combo = rng.choice(grid)
        params = dict(zip(AXES, combo, strict=True))
        rec = _evaluate(params, problem, rng)
        while rec.get("status") == "invalid" and rng.random() < 0.85:  # the sampler mostly
            combo = rng.choice(grid)  # proposes valid configs; a few invalid ones still land
            params = dict(zip(AXES, combo, strict=True))
            rec = _evaluate(params, problem, rng)
        rec["phase"] = "tier1" if number < n_trials // 3 else "joint"
        start = t
        t = t + _dt.timedelta(seconds=rng.uniform(0.5, 6.0))
        intermediate: dict[int, float] = {}
        state = TrialState.PRUNED
        value = None
        if combo in seen and rec.get("status") is None:
            rec.update(status="duplicate", reason="same flags as an earlier trial: stored value reused",
                       ms=seen[combo], tflops=round(flops / (seen[combo] * 1e-3) / 1e12, 1))
            state, value = TrialState.COMPLETE, seen[combo]
        elif "ms" in rec:
            if number > 20 and rng.random() < 0.25:  # pruner stops a slow one after a few blocks
                blocks = rng.randint(1, 4)
                for step in range(blocks):
                    intermediate[step] = round(rec["ms"] * (1 + rng.gauss(0, 0.005)), 5)
                rec.update(status="pruned_slow", reason=f"median of {blocks} blocks above the pruner's threshold")
                rec.pop("ms")
                rec.pop("tflops")
            else:
                for step in range(5):
                    intermediate[step] = round(rec["ms"] * (1 + rng.gauss(0, 0.003)), 5)
                rec["status"] = "ok"
                rec["reason"] = ""
                seen[combo] = rec["ms"]
                state, value = TrialState.COMPLETE, rec["ms"]
        if number == n_trials - 1 and n_trials > 10:
            state, value, rec = TrialState.FAIL, None, {"flags": rec["flags"], "phase": rec["phase"]}
        trials.append(optuna.trial.create_trial(
            state=state, value=value, params=params, distributions=dists, user_attrs=rec,
            intermediate_values=intermediate,
        ))
        trials[-1].datetime_start = start
        trials[-1].datetime_complete = t
    study.add_trials(trials)
    return study


def make_all_failed_study(storage, name: str, n_trials: int = 12) -> optuna.Study:
    """A study whose every trial failed (pruned with a reason, or FAIL)."""
    study = make_study(storage, name, shape="fc2", n_trials=0, with_baseline=False, kind="gpu")
    dists = {k: CategoricalDistribution(v) for k, v in AXES.items()}
    rng = random.Random(1)
    trials = []
    for i in range(n_trials):
        params = {k: rng.choice(v) for k, v in AXES.items()}
        status = ["compile_error", "hang", "launch_error"][i % 3]
        rec = {"status": status, "reason": f"{status.replace('_', ' ')} in trial {i}",
               "flags": flags_of(params), "phase": "tier1"}
        state = TrialState.FAIL if i == n_trials - 1 else TrialState.PRUNED
        trials.append(optuna.trial.create_trial(state=state, params=params, distributions=dists,
                                                user_attrs=rec))
    study.add_trials(trials)
    return study


def make_demo_storage(storage, n_trials: int = 300) -> list[str]:
    """Three shapes, one all-failed and one empty study: the names created."""
    names = []
    for i, shape in enumerate(SHAPES):
        name = f"{shape}-h200-sm90a"
        make_study(storage, name, shape=shape, n_trials=n_trials, seed=i,
                   created=_dt.datetime(2026, 11, 1 + i, 9, 0, 0))
        names.append(name)
    make_all_failed_study(storage, "fc2-bf16-broken")
    names.append("fc2-bf16-broken")
    empty = optuna.create_study(storage=storage, study_name="fc1-new-empty", direction="minimize")
    empty.set_user_attr("shape", "fc1")
    names.append("fc1-new-empty")
    return names


if __name__ == "__main__":  # pragma: no cover - manual helper
    url = sys.argv[1] if len(sys.argv) > 1 else "sqlite:///demo.db"
    print("\n".join(make_demo_storage(url)))
