"""Replay: evaluate against a recorded full-grid table instead of a GPU.

Formats read:

- our results table (:mod:`tuner.results`; ``tuner grid`` and ``tuner export`` write it),
  also in the ``params_`` / ``user_attrs_`` columns of older Optuna exports;
- a Kernel Tuner cache file (JSON, optionally gzipped), which carries its own space
  (``tune_params``) in its header, so it needs no study file;
- a Kernel Tuner T4 results file (JSON, optionally gzipped).

A recorded space becomes a :class:`ReplaySpec`, so the same :class:`~tuner.space.Space`,
sampler and objective run unchanged; configurations absent from the recording are
invalid (Kernel Tuner's restrictions removed them).
"""

from __future__ import annotations

import gzip
import hashlib
import io
import json
import statistics
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Callable

import pandas as pd

from tuner.errors import UserError
from tuner.record import Measurement
from tuner.results import TableError, normalise
from tuner.spec import KernelSpec, Value

# Kernel Tuner's failure strings and T4 invalidity kinds, in our statuses.
KT_FAILURES = {
    "InvalidConfig": "invalid",
    "CompilationFailedConfig": "compile_error",
    "RuntimeFailedConfig": "launch_error",
}
T4_INVALIDITY = {"compile": "compile_error", "runtime": "launch_error", "constraints": "invalid", "correctness": "mismatch"}


@dataclass
class Record:
    status: str
    ms: float | None = None
    times: list[float] = field(default_factory=list)
    attrs: dict[str, Any] = field(default_factory=dict)


@dataclass
class Recording:
    path: Path
    format: str  # "csv" | "kernel_tuner" | "t4"
    axes: dict[str, list[Value]]
    records: dict[tuple, Record]
    device: str = ""
    kernel: str = ""

    def digest(self) -> str:
        return hashlib.sha256(self.path.read_bytes()).hexdigest()[:16]

    def lookup(self, params: dict[str, Value]) -> Record | None:
        return self.records.get(tuple(params[a] for a in self.axes))

    def optimum(self) -> float:
        return min(r.ms for r in self.records.values() if r.status == "ok" and r.ms is not None)


def _coerce(text: str) -> Value:
    try:
        return int(text)
    except ValueError:
        return text


def _open_text(path: Path) -> str:
    raw = path.read_bytes()
    if raw[:2] == b"\x1f\x8b":
        try:
            raw = gzip.decompress(raw)
        except (OSError, EOFError) as exc:
            raise UserError(f"replay file {path}: broken gzip data ({exc})") from None
    try:
        return raw.decode()
    except UnicodeDecodeError:
        raise UserError(f"replay file {path}: not text (expected CSV or Kernel Tuner JSON)") from None


def load_recording(path: str | Path) -> Recording:
    path = Path(path)
    if not path.is_file():
        raise UserError(f"replay file {path} not found")
    text = _open_text(path)
    stripped = text.lstrip()
    if stripped.startswith("{"):
        try:
            data = json.loads(text)
        except json.JSONDecodeError as exc:
            raise UserError(f"replay file {path}: invalid JSON ({exc.msg} at line {exc.lineno})") from None
        if isinstance(data, dict) and "cache" in data and "tune_params" in data:
            return _from_kernel_tuner(path, data)
        if isinstance(data, dict) and "results" in data and "schema_version" in data:
            return _from_t4(path, data)
        raise UserError(
            f"replay file {path}: JSON but neither a Kernel Tuner cache (cache + tune_params) nor T4 (results + schema_version)"
        )
    return _from_csv(path, text)


def _from_csv(path: Path, text: str) -> Recording:
    try:
        frame, axis_names = normalise(pd.read_csv(io.StringIO(text), dtype=str, keep_default_na=False))
    except (TableError, pd.errors.ParserError, pd.errors.EmptyDataError) as exc:
        raise UserError(f"replay file {path}: {exc}") from None
    if frame.empty:
        raise UserError(f"replay file {path}: a results table needs a header with the define columns, 'ms' and 'status' and rows")
    axes: dict[str, list[Value]] = {a: [] for a in axis_names}
    records: dict[tuple, Record] = {}
    for row in frame.to_dict("records"):
        key = tuple(_coerce(row[a]) for a in axis_names)
        for a, v in zip(axis_names, key):
            if v not in axes[a]:
                axes[a].append(v)
        ms = float(row["ms"]) if row.get("ms") not in (None, "", "-") else None
        status = row["status"] or "ok"
        if status == "duplicate" and ms is not None:  # a repeat: its stored result is the config's
            status = "ok"
        attrs = {}
        for column in ("regs", "spills", "smem_bytes"):
            if row.get(column) not in (None, "", "-"):
                attrs[column] = int(float(row[column]))
        record = Record(status, ms, [], attrs)
        if key not in records or _rank(record) < _rank(records[key]):
            records[key] = record
    for a in axes:
        axes[a] = sorted(axes[a], key=lambda v: (isinstance(v, str), v))
    device = str(frame["device"].iloc[0]) if "device" in frame.columns else ""
    return Recording(path, "csv", axes, records, device=device)


def _rank(record: Record) -> tuple[int, float]:
    """A config recorded several times (a study's repeats): a measured result wins, the fastest."""
    return (record.status != "ok" or record.ms is None, record.ms if record.ms is not None else 0.0)


def _from_kernel_tuner(path: Path, data: dict) -> Recording:
    keys = data.get("tune_params_keys") or list(data["tune_params"])
    axes = {k: list(data["tune_params"][k]) for k in keys}
    records: dict[tuple, Record] = {}
    for entry in data["cache"].values():
        key = tuple(entry[k] for k in keys)
        time = entry.get(data.get("objective", "time"), entry.get("time"))
        if isinstance(time, str):
            records[key] = Record(KT_FAILURES.get(time, "launch_error"), attrs={"reason": time})
        else:
            records[key] = Record("ok", float(time), [float(t) for t in entry.get("times", [])])
    return Recording(path, "kernel_tuner", axes, records, data.get("device_name", ""), data.get("kernel_name", ""))


def _from_t4(path: Path, data: dict) -> Recording:
    results = data["results"]
    if not results:
        raise UserError(f"replay file {path}: T4 file with no results")
    keys = list(results[0]["configuration"])
    axes: dict[str, list[Value]] = {k: [] for k in keys}
    records: dict[tuple, Record] = {}
    for entry in results:
        config = entry["configuration"]
        key = tuple(config[k] for k in keys)
        for k, v in zip(keys, key):
            if v not in axes[k]:
                axes[k].append(v)
        invalidity = entry.get("invalidity", "correct")
        value = next((m["value"] for m in entry.get("measurements", []) if m.get("name") == "time"), None)
        if invalidity != "correct" or not isinstance(value, (int, float)):
            records[key] = Record(T4_INVALIDITY.get(invalidity, "launch_error"), attrs={"reason": str(value)})
        else:
            times = entry.get("times", {}).get("runtimes", [])
            records[key] = Record("ok", float(value), [float(t) for t in times])
    for k in axes:
        axes[k] = sorted(axes[k], key=lambda v: (isinstance(v, str), v))
    return Recording(path, "t4", axes, records)


def make_replay_spec(recording: Recording) -> KernelSpec:
    """A kernel spec whose space is the recording's and whose model is 'was it recorded'."""

    class ReplaySpec(KernelSpec):
        name = recording.kernel or recording.path.name.split(".")[0]
        params = {a: v[0] for a, v in recording.axes.items()}

        def check(self, config, problem):
            record = recording.lookup(config)
            if record is None:
                return "not in the recording (restricted)"
            if record.status == "invalid":
                return "recorded as invalid"
            return None

        def source_hash(self) -> str:
            return recording.digest()

    spec = ReplaySpec(recording.path)
    return spec


class ReplayEvaluator:
    """Looks a config up instead of running it; replays recorded times block by block."""

    kind = "replay"

    def __init__(self, recording: Recording, block: int = 10):
        self.recording = recording
        self.block = block

    def evaluate(self, params: dict[str, Value], config: dict[str, Value], report: Callable[[int, float, list[float]], bool]) -> Measurement:
        record = self.recording.lookup(params)
        if record is None:
            return Measurement("invalid", reason="not in the recording")
        attrs = dict(record.attrs)
        reason = str(attrs.pop("reason", ""))
        if record.status != "ok":
            return Measurement(record.status, reason=reason or f"recorded as {record.status}", **_known(attrs))
        blocks = [record.times[i : i + self.block] for i in range(0, len(record.times), self.block)]
        medians = []
        for step, chunk in enumerate(blocks):
            medians.append(statistics.median(chunk))
            if report(step, medians[-1], list(chunk)):
                return Measurement("pruned_slow", reason=f"running median {statistics.median(medians):.4g} ms after {step + 1} blocks", blocks=medians, **_known(attrs))
        return Measurement("ok", ms=record.ms, blocks=medians, **_known(attrs))


def _known(attrs: dict) -> dict:
    return {k: v for k, v in attrs.items() if k in ("regs", "spills", "smem_bytes")}
