"""The seed's result table (``TN EPI STG PAD UNR VEC REGS SPILL SMEM_KB MS TFLOPS CHECKSUM STATUS``)
and its CSV, built from trials or from compile results."""

from __future__ import annotations

import csv
import math
from pathlib import Path
from typing import Any, Iterable, Sequence

import optuna
from optuna.trial import TrialState

# The seed's short column names; any other define keeps its own name.
SHORT = {
    "TN": "TN",
    "NUM_EPI_WARPS": "EPI",
    "N_STAGES": "STG",
    "STAGING_ROW_PAD": "PAD",
    "PHASE2_UNROLL": "UNR",
    "COMBINED_LOAD_VEC": "VEC",
}


def _fmt(value: Any, digits: int = 4) -> str:
    if value is None or (isinstance(value, float) and math.isnan(value)):
        return "-"
    if isinstance(value, float):
        return f"{value:.{digits}g}" if abs(value) < 1e5 else f"{value:.1f}"
    return str(value)


def render(headers: Sequence[str], rows: Iterable[Sequence[Any]]) -> str:
    rows = [[_fmt(v) for v in row] for row in rows]
    widths = [max([len(h)] + [len(r[i]) for r in rows]) for i, h in enumerate(headers)]
    lines = ["  ".join(h.ljust(w) for h, w in zip(headers, widths)).rstrip()]
    lines += ["  ".join(v.ljust(w) for v, w in zip(r, widths)).rstrip() for r in rows]
    return "\n".join(lines)


def trial_rows(study: optuna.Study, axes: Sequence[str]) -> list[dict[str, Any]]:
    """One dict per finished trial, best first, the winner's status shown as BEST."""
    rows = []
    for t in study.get_trials(deepcopy=False, states=(TrialState.COMPLETE, TrialState.PRUNED, TrialState.FAIL)):
        a = t.user_attrs
        row = {axis: t.params.get(axis) for axis in axes}
        smem = a.get("smem_bytes")
        row.update(
            regs=a.get("regs"),
            spills=a.get("spills"),
            smem_bytes=smem,
            smem_kb=round(smem / 1024, 1) if isinstance(smem, (int, float)) else None,
            ms=t.value if t.state == TrialState.COMPLETE else a.get("ms"),
            tflops=a.get("tflops"),
            checksum=a.get("checksum"),
            status=a.get("status", t.state.name.lower()),
            reason=a.get("reason", ""),
            flags=a.get("flags", ""),
            trial=t.number,
        )
        rows.append(row)
    rows.sort(key=lambda r: (r["status"] not in ("ok",), r["ms"] if r["ms"] is not None else math.inf))
    if rows and rows[0]["status"] == "ok":
        rows[0]["status"] = "BEST"
    return rows


def seed_table(rows: list[dict[str, Any]], axes: Sequence[str]) -> str:
    headers = [SHORT.get(a, a) for a in axes] + ["REGS", "SPILL", "SMEM_KB", "MS", "TFLOPS", "CHECKSUM", "STATUS"]
    body = [
        [r[a] for a in axes] + [r["regs"], r["spills"], r["smem_kb"], r["ms"], r["tflops"], r["checksum"], r["status"]]
        for r in rows
    ]
    return render(headers, body)


def write_csv(rows: list[dict[str, Any]], axes: Sequence[str], path: Path, extra: dict[str, Any] | None = None) -> None:
    """Our CSV: define columns, then the metrics; ``tuner run --replay`` reads it back."""
    extra = extra or {}
    columns = list(axes) + ["ms", "tflops", "status", "reason", "regs", "spills", "smem_bytes", "checksum", "flags"] + list(extra)
    with open(path, "w", newline="") as f:
        writer = csv.DictWriter(f, fieldnames=columns)
        writer.writeheader()
        for r in rows:
            out = {a: r[a] for a in axes}
            out.update(
                ms=r["ms"], tflops=r["tflops"], status="ok" if r["status"] == "BEST" else r["status"],
                reason=r["reason"], regs=r["regs"], spills=r["spills"],
                smem_bytes=r["smem_bytes"],
                checksum=r["checksum"], flags=r["flags"], **extra,
            )
            writer.writerow(out)
