"""Is energy per launch a measurement? Two invocations, the power limit, and nvidia-smi (issue 34).

    python3 docs/experiments/energy_repeat.py measure OUT.json [--energy-s 1.5]   # one invocation
    python3 docs/experiments/energy_repeat.py smi OUT.json [--energy-s 4] [--configs 3]
    python3 docs/experiments/energy_repeat.py compare RUN1.json RUN2.json SMI.json
    python3 docs/experiments/energy_repeat.py ratios RUN1.json RUN2.json [RUN3.json ...]

``measure`` times 10 configs of studies/patch_embed_sm90a.toml (its three start configs,
the kernel's defaults and six one-axis neighbours of the first start config, the same
in every invocation) through the engine's GPU evaluator with ``[measure] energy_s``: each
trial's paired timing, then the candidate alone and the reference alone on windows from
one energy-counter step to another. ``smi`` measures configs paired with themselves, so the
GPU runs one kernel the whole call while ``nvidia-smi -lms 100`` samples its power.
``compare`` checks: energy per launch of the two invocations within 5 %; every stored
power at or below the enforced limit; stored power (= energy per launch x launch rate)
within 10 % of nvidia-smi's mean over the same call. Exit 1 when a check fails. ``ratios``: for
each pair of invocations (on one GPU, or on several), how far apart energy per launch in mJ and
the energy ratio (over the reference's, measured in the same trial: the objective) are.
"""

from __future__ import annotations

import argparse
import dataclasses
import json
import random
import statistics
import subprocess
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT))

from tuner.contract.kernel_spec import load_spec  # noqa: E402
from tuner.evaluate.gpu import GpuEvaluator  # noqa: E402
from tuner.search.space import Space  # noqa: E402
from tuner.search.start import start_params  # noqa: E402
from tuner.study.file import load_study  # noqa: E402

STUDY = ROOT / "studies" / "patch_embed_sm90a.toml"
KEEP = ("status", "reason", "ms", "ratio", "sm_clock_mhz", "energy_mj_per_launch", "energy_mj_per_launch_err", "power_w",
        "power_w_err", "energy_window_s", "energy_steps", "energy_step_ms", "energy_note", "reference_energy_mj_per_launch",
        "reference_energy_mj_per_launch_err", "reference_power_w", "reference_energy_note", "energy_ratio",
        "energy_ratio_err")


def configs(space: Space, cfg, n: int = 10) -> list[dict]:
    """The start configs, the defaults, then seeded one-axis neighbours of the first start config."""
    chosen = start_params(space, cfg.search.start)
    if space.check(space.defaults()) is None:
        chosen.append(space.defaults())
    rng = random.Random(0)
    neighbours = [{**chosen[0], axis: v} for axis, values in space.axes.items() for v in values if v != chosen[0][axis]]
    rng.shuffle(neighbours)
    for params in neighbours:
        if len(chosen) >= n:
            break
        if params not in chosen and space.check(params) is None:
            chosen.append(params)
    return chosen[:n]


def evaluator_for(space: Space, cfg, energy_s: float, reference: dict, supervisor=None) -> GpuEvaluator:
    settings = dataclasses.replace(cfg.measure, energy_s=energy_s, timeout_s=60.0)
    return GpuEvaluator(space.spec, dict(space.problem), cfg.arch, settings, supervisor=supervisor,
                        reference=space.full_config(reference))


def row(m, params: dict, device: dict) -> dict:
    return {"config": params, "device": device.get("name"), "status": m.status, "reason": m.reason, "ms": m.ms,
            **{k: m.extra.get(k) for k in KEEP if k in m.extra}}


def enforced_limit_w() -> float | None:
    try:
        from cuda.bindings import nvml

        nvml.init_v2()
        return nvml.device_get_enforced_power_limit(nvml.device_get_handle_by_index_v2(0)) / 1e3
    except Exception:
        return None


def measure(out: Path, energy_s: float) -> None:
    cfg = load_study(STUDY)
    space = Space.from_study(cfg, load_spec(cfg.kernel))
    chosen = configs(space, cfg)
    evaluator = evaluator_for(space, cfg, energy_s, chosen[0])
    rows = []
    try:
        device = evaluator.start()
        for params in chosen:
            m = evaluator.evaluate(params, space.full_config(params), lambda step, value, samples: False)
            rows.append(row(m, params, device))
            print(json.dumps(rows[-1]), flush=True)
    finally:
        evaluator.close()
    out.write_text(json.dumps({"date": time.strftime("%Y-%m-%d %H:%M UTC", time.gmtime()), "energy_s": energy_s,
                               "limit_w": enforced_limit_w(), "serial": serial(), "rows": rows}, indent=1))


def smi(out: Path, energy_s: float, n: int) -> None:
    """Each config paired with itself: one kernel runs the whole call; nvidia-smi samples beside."""
    cfg = load_study(STUDY)
    space = Space.from_study(cfg, load_spec(cfg.kernel))
    rows, supervisor = [], None
    try:
        for params in configs(space, cfg)[:n]:
            evaluator = evaluator_for(space, cfg, energy_s, params, supervisor)
            device = evaluator.start() if supervisor is None else supervisor.device
            supervisor = evaluator.supervisor
            evaluator.reference_job()  # compiled before the sampling starts: the GPU is busy all the call
            sampler = subprocess.Popen(["nvidia-smi", "-i", "0", "--query-gpu=power.draw", "--format=csv,noheader,nounits",
                                        "-lms", "100"], stdout=subprocess.PIPE, text=True)
            m = evaluator.evaluate(params, space.full_config(params), lambda step, value, samples: False)
            sampler.terminate()
            watts = [float(x) for x in sampler.communicate()[0].split() if x.replace(".", "", 1).isdigit()]
            trimmed = watts[len(watts) // 5: len(watts) - len(watts) // 10]  # the paired start and the end ramp out
            rows.append({**row(m, params, device), "smi_samples": len(watts),
                         "smi_w": round(statistics.fmean(trimmed), 1) if trimmed else None})
            print(json.dumps(rows[-1]), flush=True)
            evaluator.compiler.close()
    finally:
        if supervisor is not None:
            supervisor.stop()
    out.write_text(json.dumps({"date": time.strftime("%Y-%m-%d %H:%M UTC", time.gmtime()), "energy_s": energy_s,
                               "limit_w": enforced_limit_w(), "rows": rows}, indent=1))


def compare(run1: Path, run2: Path, smi_run: Path) -> int:
    a, b, s = (json.loads(p.read_text()) for p in (run1, run2, smi_run))
    limit = a.get("limit_w") or b.get("limit_w")
    failed = []
    print(f"device {a['rows'][0]['device']}, {a['date']} / {b['date']}, energy_s {a['energy_s']}, enforced limit {limit} W")
    print(f"{'config':60} {'mJ/launch 1':>14} {'mJ/launch 2':>14} {'diff %':>7} {'W 1':>6} {'W 2':>6}")
    diffs = []
    for ra, rb in zip(a["rows"], b["rows"], strict=True):
        assert ra["config"] == rb["config"], "the invocations measured different configs"
        label = " ".join(f"{k}={v}" for k, v in ra["config"].items() if v != 0)[:60]
        ea, eb = ra.get("energy_mj_per_launch"), rb.get("energy_mj_per_launch")
        if ea is None or eb is None:
            failed.append(f"no value: {ra.get('energy_note') or ra.get('reason')} / {rb.get('energy_note') or rb.get('reason')}")
            print(f"{label:60} {ea!s:>14} {eb!s:>14}")
            continue
        diff = abs(ea - eb) / ((ea + eb) / 2) * 100
        diffs.append(diff)
        print(f"{label:60} {ea:8.1f}±{ra['energy_mj_per_launch_err']:<5.1f} {eb:8.1f}±{rb['energy_mj_per_launch_err']:<5.1f} "
              f"{diff:7.2f} {ra['power_w']:6.0f} {rb['power_w']:6.0f}")
        if diff > 5:
            failed.append(f"{label}: invocations differ by {diff:.1f} %")
    powers = [r[k] for run in (a, b, s) for r in run["rows"] for k in ("power_w", "reference_power_w") if r.get(k)]
    over = [p for p in powers if limit and p > limit]
    if over:
        failed.append(f"stored powers above the limit: {over}")
    if diffs:
        print(f"energy per launch, two invocations: median diff {statistics.median(diffs):.2f} %, max {max(diffs):.2f} %; "
              f"{len(powers)} stored powers, max {max(powers):.0f} W (limit {limit} W)")
    for r in s["rows"]:
        if r.get("power_w") is None or not r.get("smi_w"):
            failed.append(f"smi check without a value: {r.get('energy_note') or r.get('reason')}")
            continue
        rel = (r["power_w"] - r["smi_w"]) / r["smi_w"] * 100
        rate = 1e3 / r["ms"] if r.get("ms") else None
        print(f"smi: {r['energy_mj_per_launch']:.1f} mJ/launch x rate = {r['power_w']:.0f} W (launch rate from the window; "
              f"events say {rate and round(rate)} /s) vs nvidia-smi {r['smi_w']:.0f} W over {r['smi_samples']} samples: "
              f"{rel:+.1f} %")
        if abs(rel) > 10:
            failed.append(f"power {r['power_w']} W vs nvidia-smi {r['smi_w']} W")
    print("PASS" if not failed else "FAIL:\n  " + "\n  ".join(failed))
    return 1 if failed else 0


def ratios(runs: list[Path]) -> int:
    """Energy per launch (mJ) against the energy ratio: how far apart two invocations put each config."""
    loaded = [json.loads(p.read_text()) for p in runs]
    for i, a in enumerate(loaded):
        for j in range(i + 1, len(loaded)):
            b = loaded[j]
            mj, ratio = [], []
            for ra, rb in zip(a["rows"], b["rows"], strict=True):
                assert ra["config"] == rb["config"], "the invocations measured different configs"
                if all(r.get(k) for r in (ra, rb) for k in ("energy_mj_per_launch", "energy_ratio")):
                    for out, key in ((mj, "energy_mj_per_launch"), (ratio, "energy_ratio")):
                        out.append(abs(ra[key] - rb[key]) / ((ra[key] + rb[key]) / 2) * 100)
            serials = a.get("serial"), b.get("serial")
            print(f"{runs[i].name} ({a['date']}, GPU {serials[0]}) vs {runs[j].name} ({b['date']}, GPU {serials[1]}): "
                  f"{len(mj)} configs; mJ/launch median {statistics.median(mj):.2f} % max {max(mj):.2f} %; "
                  f"energy ratio median {statistics.median(ratio):.2f} % max {max(ratio):.2f} %")
    return 0


def serial() -> str | None:
    try:
        out = subprocess.run(["nvidia-smi", "-i", "0", "--query-gpu=serial", "--format=csv,noheader"],
                             capture_output=True, text=True, timeout=30).stdout.strip()
        return out or None
    except (OSError, subprocess.SubprocessError):
        return None


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("mode", choices=("measure", "smi", "compare", "ratios"))
    parser.add_argument("paths", nargs="+", type=Path)
    parser.add_argument("--energy-s", type=float, default=None)
    parser.add_argument("--configs", type=int, default=3)
    args = parser.parse_args()
    if args.mode == "measure":
        measure(args.paths[0], args.energy_s or 1.5)
    elif args.mode == "smi":
        smi(args.paths[0], args.energy_s or 4.0, args.configs)
    elif args.mode == "ratios":
        return ratios(args.paths)
    else:
        return compare(*args.paths[:3])
    return 0


if __name__ == "__main__":
    sys.exit(main())
