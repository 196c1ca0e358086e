"""How NVML's energy and power readings move on this GPU: update interval, step size, agreement.

    python3 bench/energy_probe.py [--idle-s 2] [--load-s 8] [--out DIR]

Reads, as fast as it can (about every 0.2 ms), GPU 0's total-energy counter
(``nvmlDeviceGetTotalEnergyConsumption``), ``nvmlDeviceGetPowerUsage`` and the field values
``NVML_FI_DEV_POWER_INSTANT`` / ``NVML_FI_DEV_POWER_AVERAGE`` (newer drivers), first idle,
then while another process keeps the GPU busy with BF16 matrix products, while
``nvidia-smi --query-gpu=power.draw... -lms 100`` samples beside it. Prints, per reading:
how often it changes (median / 10th / 90th percentile interval between changes), its step
(median change; the smallest change: the resolution), and under load the mean power from
the energy counter (between its first and last step) against nvidia-smi's samples of the
same seconds. Writes everything to DIR/energy_probe.json (default $OUT or .).
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import time
from pathlib import Path

LOAD = """
import sys, time, torch
a = torch.randn(8192, 8192, device="cuda", dtype=torch.bfloat16); b = torch.randn_like(a); c = torch.empty_like(a)
until = time.monotonic() + float(sys.argv[1]); print("loaded", flush=True)
while time.monotonic() < until:
    for _ in range(8): torch.mm(a, b, out=c)
    torch.cuda.synchronize()
"""
VALUE_FIELDS = ["d_val", "ui_val", "ul_val", "ull_val", "sll_val", "si_val", "us_val"]  # by nvmlValueType_t


def open_device():
    from cuda.bindings import nvml

    nvml.init_v2()
    return nvml, nvml.device_get_handle_by_index_v2(0)


def field_reader(nvml, handle):
    """A reader of (POWER_INSTANT, POWER_AVERAGE) in mW, or None where the driver has neither."""
    ids = [int(nvml.FieldId.DEV_POWER_INSTANT), int(nvml.FieldId.DEV_POWER_AVERAGE)]

    def read():
        values = nvml.FieldValue(len(ids))
        values.field_id = ids
        nvml.device_get_field_values(handle, values)
        out = []
        for i in range(len(ids)):
            ok = int(values.nvml_return[i]) == 0
            out.append(float(values.value[i][VALUE_FIELDS[int(values.value_type[i])]]) if ok else None)
        return out

    try:
        got = read()
    except Exception:
        return None
    return read if any(v is not None for v in got) else None


def sample(nvml, handle, fields, seconds: float) -> list[dict]:
    rows, until = [], time.perf_counter() + seconds
    while True:
        now = time.perf_counter()
        if now >= until:
            return rows
        row = {"t": now, "energy_mj": float(nvml.device_get_total_energy_consumption(handle)),
               "power_mw": float(nvml.device_get_power_usage(handle))}
        if fields:
            row["instant_mw"], row["average_mw"] = fields()
        rows.append(row)


def changes(rows: list[dict], key: str) -> dict:
    """How often ``key`` changes and by how much."""
    points = [(r["t"], r[key]) for r in rows if r.get(key) is not None]
    moved = [(t, v, v - pv) for (pt, pv), (t, v) in zip(points, points[1:], strict=False) if v != pv]
    if len(moved) < 3:
        return {"reads": len(points), "changes": len(moved)}
    gaps = sorted((b[0] - a[0]) * 1e3 for a, b in zip(moved, moved[1:], strict=False))
    deltas = [abs(d) for _, _, d in moved]
    q = lambda p: gaps[min(len(gaps) - 1, int(p * len(gaps)))]  # noqa: E731
    return {"reads": len(points), "changes": len(moved), "interval_ms_median": round(statistics.median(gaps), 3),
            "interval_ms_p10": round(q(0.1), 3), "interval_ms_p90": round(q(0.9), 3),
            "step_median": statistics.median(deltas), "step_smallest": min(deltas),
            "read_us": round((points[-1][0] - points[0][0]) / len(points) * 1e6, 1)}


def counter_power_w(rows: list[dict], start: float, end: float) -> tuple[float, float, float]:
    """Mean power between the energy counter's first and last step inside [start, end]."""
    inside = [r for r in rows if start <= r["t"] <= end]
    steps = [b for a, b in zip(inside, inside[1:], strict=False) if b["energy_mj"] != a["energy_mj"]]
    first, last = steps[0], steps[-1]
    return (last["energy_mj"] - first["energy_mj"]) / 1e3 / (last["t"] - first["t"]), first["t"], last["t"]


def smi_sampler() -> subprocess.Popen:
    query = "timestamp,power.draw,power.draw.average,power.draw.instant,power.limit,enforced.power.limit"
    probe = subprocess.run(["nvidia-smi", "-i", "0", f"--query-gpu={query}", "--format=csv,noheader,nounits"],
                           capture_output=True, text=True)
    if probe.returncode != 0:  # an older nvidia-smi without the .average/.instant fields
        query = "timestamp,power.draw,power.limit,enforced.power.limit"
    return subprocess.Popen(["nvidia-smi", "-i", "0", f"--query-gpu={query}", "--format=csv,nounits", "-lms", "100"],
                            stdout=subprocess.PIPE, text=True)


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--idle-s", type=float, default=2.0)
    parser.add_argument("--load-s", type=float, default=8.0)
    parser.add_argument("--out", default=os.environ.get("OUT", "."))
    args = parser.parse_args()
    nvml, handle = open_device()
    fields = field_reader(nvml, handle)
    report: dict = {"device": nvml.device_get_name(handle), "driver": nvml.system_get_driver_version(),
                    "date": time.strftime("%Y-%m-%d %H:%M UTC", time.gmtime()),
                    "enforced_limit_w": nvml.device_get_enforced_power_limit(handle) / 1e3,
                    "field_values": fields is not None}
    idle = sample(nvml, handle, fields, args.idle_s)
    load = subprocess.Popen([sys.executable, "-c", LOAD, str(args.load_s + 1.0)], stdout=subprocess.PIPE, text=True)
    assert load.stdout is not None and load.stdout.readline().strip() == "loaded", "the load process did not start"
    time.sleep(1.0)  # clocks and power settle under the load
    smi = smi_sampler()
    smi_start = time.perf_counter()
    busy = sample(nvml, handle, fields, args.load_s - 1.0)
    smi_end = time.perf_counter()
    smi.terminate()
    smi_text = smi.communicate()[0]
    load.wait()
    keys = ["energy_mj", "power_mw", *(["instant_mw", "average_mw"] if fields else [])]
    report["idle"] = {k: changes(idle, k) for k in keys}
    report["load"] = {k: changes(busy, k) for k in keys}
    watts, first, last = counter_power_w(busy, smi_start + 0.3, smi_end - 0.3)
    lines = [line.split(", ") for line in smi_text.strip().splitlines()]
    header, samples = [h.strip() for h in lines[0]], lines[1:]
    column = {name: [float(row[i]) for row in samples if len(row) == len(header) and row[i].strip() not in ("", "[N/A]")]
              for i, name in enumerate(header) if name.startswith("power.draw")}
    report["load"]["energy_counter_w"] = round(watts, 1)
    report["load"]["energy_counter_window_s"] = round(last - first, 3)
    report["load"]["nvidia_smi_w"] = {name: round(statistics.fmean(vals), 1) for name, vals in column.items() if vals}
    report["load"]["nvidia_smi_samples"] = len(samples)
    report["load"]["nvml_power_usage_w"] = round(statistics.fmean(r["power_mw"] for r in busy) / 1e3, 1)
    out = Path(args.out)
    out.mkdir(parents=True, exist_ok=True)
    (out / "energy_probe.json").write_text(json.dumps(report, indent=2, default=str))
    (out / "energy_probe_smi.csv").write_text(smi_text)
    print(json.dumps(report, indent=2, default=str))


if __name__ == "__main__":
    main()
