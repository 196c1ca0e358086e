"""Self-contained Plotly HTML reports over a tuner storage.

``write_report(storage, out_dir)`` writes ``index.html`` (every study in the storage, one
row each, plus a side-by-side comparison of the shapes) and one ``study-*.html`` page per
study. Every page embeds plotly.js once, so the folder opens offline and can be mailed.

Figures come from :mod:`optuna.visualization` where Optuna has one (history with the
best-so-far line, parallel coordinates, parameter importances, slices) and from Plotly
directly for the rest (box plots per define, time versus registers / SMEM by status, the
failure breakdown, the shape comparison).

Only COMPLETE trials (statuses ``ok`` and ``duplicate``) have a value, so an invalid or
failed configuration can never be ranked best: failures are PRUNED (or FAIL) and only
appear in the failure breakdown.
"""

from __future__ import annotations

import copy
import dataclasses
import datetime as _dt
import hashlib
import html
import json
import logging
import math
import re
import time
import warnings
from collections import Counter
from collections.abc import Callable, Iterable, Sequence
from pathlib import Path
from typing import Any

import optuna
import pandas as pd
import plotly.graph_objects as go
from optuna.storages import BaseStorage, InMemoryStorage
from optuna.study import StudyDirection
from optuna.trial import FrozenTrial, TrialState
from plotly.subplots import make_subplots

from tuner.evaluate.confirm import describe
from tuner.store.results import (
    COLUMNS,
    best_trial,
    last_confirmation_of,
    metric_of,
    paired_ms,
    reference_ms,
    trials_frame,
    value_text,
    winner,
)
from tuner.store.storage import describe_storage, open_storage, storage_identity
from tuner.store.url import redact

log = logging.getLogger(__name__)

#: fixed colours per status, so every page and figure reads the same way
STATUS_COLORS = {
    "ok": "#2ca02c",
    "duplicate": "#98df8a",
    "pruned_slow": "#ff7f0e",
    "invalid": "#7f7f7f",
    "compile_error": "#d62728",
    "too_many_regs": "#9467bd",
    "spills": "#c5b0d5",
    "wgmma_serialized": "#dbdb8d",
    "hang": "#8c564b",
    "launch_error": "#e377c2",
    "mismatch": "#bcbd22",
    "killed": "#17becf",
    "failed": "#000000",
    "running": "#1f77b4",
}
SHAPE_ORDER = ["patch_embed", "fc1", "fc2"]
TOP_N = 20
#: fewer COMPLETE trials than this give no importance figure (PED-ANOVA needs a top 10%)
MIN_IMPORTANCE_TRIALS = 10
#: parallel coordinates draw at most this many trials (one SVG line each)
PARALLEL_MAX_TRIALS = 1000
#: above this many points per status, scatter plots draw a sample (page weight)
SCATTER_MAX_POINTS = 4000


# ----------------------------------------------------------------------------- data


@dataclasses.dataclass
class StudyData:
    """One study, loaded once: its attributes, trials and a flat table of the trials."""

    name: str
    direction: StudyDirection
    attrs: dict[str, Any]
    trials: list[FrozenTrial]
    df: pd.DataFrame
    metric: str = "ms"
    #: a multi-objective study (time and energy): its trials with every value, and the metric names
    #: (``trials`` then carry the time alone, so the single-objective figures show time)
    pareto_trials: list[FrozenTrial] | None = None
    metric_names: list[str] = dataclasses.field(default_factory=list)

    @property
    def complete(self) -> pd.DataFrame:
        return self.df[self.df["state"] == "COMPLETE"]

    @property
    def axes(self) -> list[str]:
        axes = self.attrs.get("axes")
        names = [c[2:] for c in self.df.columns if c.startswith("p:")]
        if isinstance(axes, list) and axes:
            return [a for a in axes if a in names] + [n for n in names if n not in axes]
        return names

    def best(self) -> pd.Series | None:
        """The study's winner (:func:`tuner.store.results.winner`, as ``tuner best`` names it)."""
        trial = winner(self.attrs, self.trials, self.direction)
        if trial is None:
            return None
        row = self.df[self.df["number"] == trial.number].iloc[0].copy()
        record = self.confirmation()
        if pd.isna(row["value"]) and record is not None:  # a config the pruner had stopped: the value its confirmation measured
            row["value"] = record["standings"][0].get("value")
        return row

    def confirmation(self) -> dict | None:
        return last_confirmation_of(self.attrs)

    def last_update(self) -> _dt.datetime | None:
        stamps = [t.datetime_complete or t.datetime_start for t in self.trials]
        stamps = [s for s in stamps if s is not None]
        if stamps:
            return max(stamps)
        created = self.attrs.get("created")
        try:
            return _dt.datetime.fromisoformat(created) if isinstance(created, str) else None
        except ValueError:
            return None


def best_ms(best: pd.Series) -> float:
    """The best trial's time in ms: its ``ms`` (a paired study's value is a ratio to its reference)."""
    return float(best["ms"]) if pd.notna(best["ms"]) else float(best["value"])


def _num(value: Any) -> float | None:
    if isinstance(value, bool) or value is None:
        return None
    if isinstance(value, (int, float)):
        return float(value) if math.isfinite(value) else None
    return None


def _frame(trials: list[FrozenTrial], metric: str) -> pd.DataFrame:
    """The engine's results table, params as ``p:NAME`` columns, plus the last block median
    and each trial's time in ms (a paired study's values and block medians are ratios)."""
    df = trials_frame(trials)
    params = [c for c in df.columns if c not in COLUMNS]
    df = df.rename(columns={**{p: "p:" + p for p in params}, "datetime_start": "start", "datetime_complete": "end"})
    for col in ("reason", "flags", "phase"):
        df[col] = df[col].fillna("").astype(str)
    partial = [t.intermediate_values[max(t.intermediate_values)] if t.intermediate_values else None for t in trials]
    scale = reference_ms(trials) if metric == "ratio" else 1.0
    df["partial_ms"] = pd.to_numeric(pd.Series(partial, index=df.index, dtype=object), errors="coerce") * (scale or math.nan)
    # the time a trial shows on scatter plots: its time on the study's one scale, or its last block median
    df["time_ms"] = df["number"].map(paired_ms(trials)).fillna(df["partial_ms"])
    if metric != "ratio":
        df["time_ms"] = df["time_ms"].fillna(df["value"])
    return df


def _time_only(trial: FrozenTrial) -> FrozenTrial:
    """A trial of a multi-objective study as a time-only one (the figures of one objective)."""
    if not trial.values or len(trial.values) == 1:
        return trial
    copied = copy.copy(trial)
    copied.values = trial.values[:1]
    return copied


def load_study(study: optuna.Study) -> StudyData:
    trials = study.get_trials(deepcopy=False)
    multi = len(study.directions) > 1
    shown = [_time_only(t) for t in trials] if multi else trials
    return StudyData(
        name=study.study_name,
        direction=study.directions[0],
        attrs=dict(study.user_attrs),
        trials=shown,
        df=_frame(shown, metric_of(study)),
        metric=metric_of(study),
        pareto_trials=trials if multi else None,
        metric_names=list(study.metric_names or []),
    )


class _SnapshotStorage(InMemoryStorage):
    """A read-only in-memory view over already loaded trials, for Optuna's figures.

    Optuna's figures call ``study.trials`` (a deep copy of every trial) once per figure and
    even once per parameter; over an RDB that is also a full reload. Serving the loaded
    list as is keeps a 10,000-trial study at a fraction of a second per figure. The
    figures only read trials, never modify them.
    """

    def __init__(self, trials: list[FrozenTrial]) -> None:
        super().__init__()
        self._snapshot = sorted(trials, key=lambda t: t.number)

    def get_all_trials(self, study_id, deepcopy=True, states=None):
        if states is None:
            return list(self._snapshot)
        return [t for t in self._snapshot if t.state in states]

    def get_n_trials(self, study_id, state=None):
        if state is None:
            return len(self._snapshot)
        states = state if isinstance(state, tuple) else (state,)
        return sum(1 for t in self._snapshot if t.state in states)

    def get_best_trial(self, study_id):
        best = best_trial(self._snapshot, self.get_study_directions(study_id)[0])
        if best is None:
            raise ValueError("No trials are completed yet.")
        return best


def _memory_study(data: StudyData) -> optuna.Study:
    """The study as Optuna's figures see it: every stored trial, numbers as stored."""
    storage = _SnapshotStorage(data.trials)
    study = optuna.create_study(storage=storage, direction=data.direction, study_name=data.name)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", optuna.exceptions.ExperimentalWarning)
        study.set_metric_names([data.metric])
    return study


# ------------------------------------------------------------------------- figures


def _layout(fig: go.Figure, title: str, height: int = 420, subplots: bool = False) -> go.Figure:
    # subplot titles sit just above the plots: leave room for the figure title over them
    fig.update_layout(title=dict(text=title, y=0.98 if subplots else None, yanchor="top" if subplots else None),
                      height=height, template="plotly_white",
                      margin=dict(l=60, r=30, t=95 if subplots else 60, b=50))
    return fig


def fig_pareto(data: StudyData) -> go.Figure:
    """Time against energy per launch, the Pareto front highlighted (Optuna's ``plot_pareto_front``)."""
    trials = data.pareto_trials or []
    directions = [StudyDirection.MINIMIZE] * len(trials[0].values if trials and trials[0].values else [0, 0])
    study = optuna.create_study(storage=_SnapshotStorage(trials), directions=directions, study_name=data.name)
    names = data.metric_names or [data.metric, "energy_mj"]
    fig = optuna.visualization.plot_pareto_front(study, target_names=names)
    return _layout(fig, f"Pareto front: {names[0]} against energy per launch ({names[1]})")


def fig_history(data: StudyData, mem: optuna.Study) -> go.Figure:
    fig = optuna.visualization.plot_optimization_history(mem, target_name=data.metric)
    fig.update_yaxes(title_text=f"{data.metric} (lower is better)"
                     if data.direction == StudyDirection.MINIMIZE else data.metric)
    return _layout(fig, "Optimisation history (COMPLETE trials; line = best so far)")


def _thinned(data: StudyData, mem: optuna.Study, limit: int) -> tuple[optuna.Study, int]:
    """``mem`` or, above ``limit`` COMPLETE trials, a study of the best quarter of ``limit``
    and an even sample of the rest (Optuna draws one line per trial in parallel coordinates)."""
    done = [t for t in data.trials if t.state == TrialState.COMPLETE and t.values is not None]
    if len(done) <= limit:
        return mem, len(done)
    done.sort(key=lambda t: t.value, reverse=data.direction == StudyDirection.MAXIMIZE)
    keep = done[: limit // 4]
    rest = done[limit // 4:]
    step = len(rest) / (limit - len(keep))
    keep += [rest[int(i * step)] for i in range(limit - len(keep))]
    sub = _memory_study(dataclasses.replace(data, trials=keep))
    return sub, len(keep)


def fig_parallel(data: StudyData, mem: optuna.Study) -> go.Figure:
    study, shown = _thinned(data, mem, PARALLEL_MAX_TRIALS)
    fig = optuna.visualization.plot_parallel_coordinate(study, params=data.axes, target_name=data.metric)
    title = f"Parallel coordinates over the defines, coloured by {data.metric}"
    if shown < len(data.complete):
        title += f" ({shown} of {len(data.complete)} COMPLETE trials: the best {shown // 4} and an even sample)"
    return _layout(fig, title, 460)


def fig_importances(data: StudyData, mem: optuna.Study) -> go.Figure:
    # PED-ANOVA: pure numpy (fANOVA, Optuna's default, needs scikit-learn), deterministic,
    # and linear in the number of trials, so a 10,000-trial study costs well under a second
    evaluator = optuna.importance.PedAnovaImportanceEvaluator()
    fig = optuna.visualization.plot_param_importances(
        mem, evaluator=evaluator, params=data.axes, target_name=data.metric)
    return _layout(fig, f"Parameter importances for {data.metric} (PED-ANOVA: what sets the best 10% "
                        f"of {len(data.complete)} COMPLETE trials apart)", 360)


def fig_slice(data: StudyData, mem: optuna.Study) -> go.Figure:
    """Each define's values against the metric, four panels a row (Optuna's ``plot_slice`` puts
    every define in one row of fixed width: wider than the page past four or five defines)."""
    axes = data.axes
    cols = min(4, max(1, len(axes)))
    rows = math.ceil(len(axes) / cols)
    fig = make_subplots(rows=rows, cols=cols, subplot_titles=axes, vertical_spacing=0.12 if rows > 1 else 0.1)
    done = data.complete.dropna(subset=["value"])
    for i, axis in enumerate(axes):
        order = [str(v) for v in _sorted_values(done["p:" + axis].unique())]
        fig.add_trace(
            go.Scatter(x=done["p:" + axis].astype(str), y=done["value"], mode="markers", showlegend=False,
                       text=[f"trial {n}" for n in done["number"]], hovertemplate="%{x}: %{y:.4f}<br>%{text}<extra></extra>",
                       marker=dict(color=done["number"], colorscale="Blues", size=6, opacity=0.8,
                                   showscale=i == 0, colorbar=dict(title="trial"))),
            row=i // cols + 1, col=i % cols + 1)
        fig.update_xaxes(type="category", categoryorder="array", categoryarray=order, row=i // cols + 1, col=i % cols + 1)
    fig.update_yaxes(title_text=data.metric, col=1)
    return _layout(fig, f"Slices: {data.metric} against each define (colour = trial number)", 300 * rows + 80,
                   subplots=True)


def fig_boxes(data: StudyData) -> go.Figure:
    axes = data.axes
    cols = min(4, max(1, len(axes)))
    rows = math.ceil(len(axes) / cols)
    fig = make_subplots(rows=rows, cols=cols, subplot_titles=axes,
                        vertical_spacing=0.12 if rows > 1 else 0.1)
    done = data.complete.dropna(subset=["value"])
    for i, axis in enumerate(axes):
        col = "p:" + axis
        labels = done[col].astype(str)
        for value in _sorted_values(done[col].unique()):
            values = done.loc[labels == str(value), "value"]
            fig.add_trace(
                go.Box(y=list(values), name=str(value), boxpoints=False, showlegend=False,
                       marker_color="#1f77b4"),
                row=i // cols + 1, col=i % cols + 1)
    fig.update_yaxes(title_text=data.metric, col=1)
    return _layout(fig, f"{data.metric} by value of each define (COMPLETE trials)", 300 * rows + 80, subplots=True)


def _sorted_values(values: Iterable) -> list:
    values = list(values)
    try:
        return sorted(values)
    except TypeError:
        return sorted(values, key=str)


def _status_groups(df: pd.DataFrame) -> list[tuple[str, pd.DataFrame]]:
    order = list(STATUS_COLORS)
    statuses = sorted(df["status"].unique(), key=lambda s: (order.index(s) if s in order else 99, s))
    return [(s, df[df["status"] == s]) for s in statuses]


def _sample(df: pd.DataFrame, n: int) -> pd.DataFrame:
    return df if len(df) <= n else df.sample(n=n, random_state=0)


def fig_resources(data: StudyData) -> go.Figure:
    df = data.df.dropna(subset=["time_ms"])
    fig = make_subplots(rows=1, cols=2, shared_yaxes=True, horizontal_spacing=0.06,
                        subplot_titles=("time vs registers per thread", "time vs shared memory (KiB)"))
    for status, group in _status_groups(df):
        group = _sample(group, SCATTER_MAX_POINTS)
        color = STATUS_COLORS.get(status, "#333333")
        label = status + (" (last block median)" if status == "pruned_slow" else "")
        text = [f"#{n} {f}" for n, f in zip(group["number"], group["flags"], strict=True)]
        common = dict(mode="markers", name=label, legendgroup=status, text=text,
                      marker=dict(color=color, size=6, opacity=0.75),
                      hovertemplate="%{x}, %{y:.4f} ms<br>%{text}<extra>" + status + "</extra>")
        fig.add_trace(go.Scatter(x=group["regs"], y=group["time_ms"], **common), row=1, col=1)
        fig.add_trace(go.Scatter(x=group["smem_bytes"] / 1024.0, y=group["time_ms"], showlegend=False,
                                 **common), row=1, col=2)
    fig.update_xaxes(title_text="registers", row=1, col=1)
    fig.update_xaxes(title_text="SMEM KiB", row=1, col=2)
    fig.update_yaxes(title_text="ms", row=1, col=1)
    untimed = len(data.df) - len(df)
    title = "Time against resources, coloured by status"
    if untimed:
        title += f" ({untimed} trials without a time are in the breakdown below)"
    return _layout(fig, title, 440, subplots=True)


_NUMBER = re.compile(r"\d+(\.\d+)?")


def reason_key(reason: str) -> str:
    """A reason with its numbers replaced, so that 'regs 262 > 255' groups with 'regs 270 > 255'."""
    return _NUMBER.sub("#", reason.strip()) or "(no reason recorded)"


def failure_table(data: StudyData) -> pd.DataFrame:
    bad = data.df[~data.df["status"].isin(["ok", "duplicate"])]
    if bad.empty:
        return pd.DataFrame(columns=["status", "reason", "count", "example"])
    bad = bad.assign(key=bad["reason"].map(reason_key))
    table = (bad.groupby(["status", "key"], sort=False)
             .agg(count=("number", "size"), example=("reason", "first"), trial=("number", "first"))
             .reset_index().rename(columns={"key": "reason"})
             .sort_values("count", ascending=False))
    return table


def fig_failures(data: StudyData) -> go.Figure:
    df = data.df
    counts = df.groupby(["status", "state"]).size().reset_index(name="n")
    table = failure_table(data).head(15)
    fig = make_subplots(rows=1, cols=2, column_widths=[0.35, 0.65], horizontal_spacing=0.32,
                        subplot_titles=("trials by status (bar colour) and state",
                                        "most frequent reasons of pruned / failed trials"))
    for status, group in _status_groups(counts.rename(columns={"n": "count"})):
        fig.add_trace(go.Bar(x=group["state"], y=group["count"], name=status, legendgroup=status,
                             marker_color=STATUS_COLORS.get(status, "#333333")), row=1, col=1)
    if not table.empty:
        labels = [_clip(f"{s}: {r}", 60) for s, r in zip(table["status"], table["reason"], strict=True)]
        fig.add_trace(go.Bar(
            x=table["count"][::-1], y=labels[::-1], orientation="h", showlegend=False,
            marker_color=[STATUS_COLORS.get(s, "#333333") for s in table["status"]][::-1],
            text=table["count"][::-1], textposition="auto"), row=1, col=2)
    fig.update_layout(barmode="stack")
    return _layout(fig, "Pruned and failed trials by status and reason", max(380, 26 * len(table) + 140),
                   subplots=True)


def _clip(text: str, n: int) -> str:
    return text if len(text) <= n else text[: n - 1] + "…"


# ------------------------------------------------------------------------ HTML bits


_CSS = """
body{font-family:-apple-system,Segoe UI,Helvetica,Arial,sans-serif;margin:0;color:#222;background:#fafafa}
header{background:#263238;color:#fff;padding:14px 28px}
header a{color:#b3e5fc} header h1{margin:0;font-size:22px} header p{margin:4px 0 0;color:#cfd8dc}
main{padding:10px 28px 40px} section{background:#fff;border:1px solid #e0e0e0;border-radius:6px;
margin:14px 0;padding:10px 16px} h2{font-size:17px;margin:6px 0 10px}
table{border-collapse:collapse;font-size:13px;max-width:100%} th,td{border-bottom:1px solid #e6e6e6;padding:4px 8px;
text-align:left;vertical-align:top} th{background:#f0f3f5} section{overflow-x:auto} td.n{text-align:right;font-variant-numeric:tabular-nums}
code{font-family:SFMono-Regular,Consolas,monospace;font-size:12px}
.msg{padding:12px 14px;border-left:4px solid #ff9800;background:#fff8e1;margin:10px 0}
.err{border-left-color:#d62728;background:#fdecea}
.grid{display:grid;grid-template-columns:repeat(auto-fit,minmax(420px,1fr));gap:10px}
dl.fp{display:grid;grid-template-columns:max-content auto;gap:3px 14px;margin:0;font-size:13px}
dl.fp dt{color:#555;font-weight:600} dl.fp dd{margin:0;overflow-wrap:anywhere}
.pill{display:inline-block;border-radius:9px;padding:0 7px;margin:1px;color:#fff;font-size:12px}
.good{color:#2e7d32;font-weight:600} .bad{color:#c62828;font-weight:600}
footer{color:#777;font-size:12px;padding:0 28px 20px}
"""


def _e(value: Any) -> str:
    return html.escape(str(value), quote=True)


def _fmt(value: Any, digits: int = 4) -> str:
    if value is None or (isinstance(value, float) and math.isnan(value)):
        return "–"
    if isinstance(value, float):
        if value.is_integer() and abs(value) < 1e15:
            return str(int(value))
        return f"{value:.{digits}g}" if abs(value) >= 1e4 or abs(value) < 1e-3 else f"{value:.{digits}f}".rstrip("0").rstrip(".")
    return str(value)


def _page(title: str, subtitle: str, body: str, plotly_js: str, footer: str) -> str:
    return (
        "<!DOCTYPE html>\n<html lang=\"en\"><head><meta charset=\"utf-8\">"
        f"<meta name=\"viewport\" content=\"width=device-width, initial-scale=1\"><title>{_e(title)}</title>"
        f"<style>{_CSS}</style><script type=\"text/javascript\">{plotly_js}</script></head><body>"
        f"<header><h1>{_e(title)}</h1><p>{subtitle}</p></header><main>{body}</main>"
        f"<footer>{footer}</footer></body></html>\n"
    )


class _Figures:
    """Renders figures into a page, turning a failing figure into a message, not a crash."""

    def __init__(self) -> None:
        self.count = 0
        self.errors: list[str] = []

    def render(self, name: str, build: Callable[[], go.Figure]) -> str:
        try:
            fig = build()
        except Exception as exc:  # one broken figure must not lose the whole report
            log.warning("figure %s failed: %s", name, exc, exc_info=True)
            self.errors.append(name)
            return f'<div class="msg err">The {_e(name)} figure could not be built: {_e(redact(exc))}</div>'
        self.count += 1
        return fig.to_html(full_html=False, include_plotlyjs=False, div_id=f"fig-{name}",
                           config={"displaylogo": False, "responsive": True})


def _fingerprint(attrs: dict[str, Any]) -> str:
    device = attrs.get("device") if isinstance(attrs.get("device"), dict) else {}
    problem = attrs.get("problem") if isinstance(attrs.get("problem"), dict) else {}
    rows = [
        ("device", ", ".join(f"{k} {v}" for k, v in device.items()) or attrs.get("device", "–")),
        ("arch", attrs.get("arch", "–")),
        ("problem", " ".join(f"{k}={v}" for k, v in problem.items()) or "–"),
        ("kernel", f"{attrs.get('kernel', '–')} ({attrs.get('kernel_path', '–')})"),
        ("source hash", attrs.get("source_hash", "–")),
        ("NVRTC", attrs.get("nvrtc_version", "–")),
        ("tool", attrs.get("tool_version", "–")),
        ("kind", attrs.get("kind", "–") + (f" from {attrs['replay_file']}" if attrs.get("replay_file") else "")),
        ("tier 1 / tier 2", f"{', '.join(map(str, attrs.get('tier1', []))) or '–'} / "
                            f"{', '.join(map(str, attrs.get('tier2', []))) or '–'}"),
        ("created", attrs.get("created", "–")),
    ]
    items = "".join(f"<dt>{_e(k)}</dt><dd><code>{_e(redact(v))}</code></dd>" for k, v in rows)
    return f'<dl class="fp">{items}</dl>'


def speedups(attrs: dict[str, Any], best_ms: float | None) -> list[tuple[str, float, float]]:
    """(baseline name, baseline ms, speed-up = baseline / best) for every recorded baseline."""
    base = attrs.get("baseline_ms")
    if not isinstance(base, dict) or not best_ms:
        return []
    out = []
    for name, ms in base.items():
        ms = _num(ms)
        if ms:
            out.append((str(name), ms, ms / best_ms))
    return out


def _speedup_html(attrs: dict[str, Any], best_ms: float | None) -> str:
    rows = speedups(attrs, best_ms)
    if not rows:
        return ""
    cells = "".join(
        f"<tr><td>{_e(n)}</td><td class=n>{_fmt(ms)}</td><td class=n><span class=\"{'good' if s >= 1 else 'bad'}\">"
        f"{s:.2f}×</span></td></tr>" for n, ms, s in rows)
    return ("<h2>Speed-up of the best configuration over the recorded baselines</h2>"
            f"<table><tr><th>baseline</th><th>baseline ms</th><th>speed-up</th></tr>{cells}</table>")


def _status_pills(df: pd.DataFrame) -> str:
    counts = Counter(df["status"]) if len(df) else Counter()
    order = list(STATUS_COLORS)
    return "".join(
        f'<span class="pill" style="background:{STATUS_COLORS.get(s, "#555")}">{_e(s)} {n}</span>'
        for s, n in sorted(counts.items(), key=lambda kv: (order.index(kv[0]) if kv[0] in order else 99, kv[0])))


def top_configs(data: StudyData, n: int = TOP_N) -> pd.DataFrame:
    done = data.complete.dropna(subset=["value"])
    done = done.sort_values("value", ascending=data.direction == StudyDirection.MINIMIZE)
    key = done["flags"].where(done["flags"] != "", done["number"].astype(str))
    return done[~key.duplicated()].head(n)


def differing_axes(top: pd.DataFrame, axes: Sequence[str]) -> tuple[list[str], dict[str, Any]]:
    """(the tuned defines whose values differ among ``top``'s rows, {define: value} of the others)."""
    differ = [a for a in axes if top["p:" + a].astype(str).nunique() > 1]
    same = {a: top["p:" + a].iloc[0] for a in axes if a not in differ and len(top)}
    return differ, same


def _breakable(name: str) -> str:
    """A define's name that may wrap after its underscores: twenty of them fit the page's width."""
    return _e(name).replace("_", "_<wbr>")


def _top_table(data: StudyData) -> str:
    """The best configs: one column per tuned define that differs among them (the full flags in
    each row's tooltip), the defines they share once below."""
    top = top_configs(data)
    base = speedups(data.attrs, 1.0)
    differ, same = differing_axes(top, data.axes)
    head = (f"<tr><th>#</th><th>trial</th><th>{_e(data.metric)}</th><th>TFLOPS</th>"
            + "".join(f"<th>× {_breakable(n)}</th>" for n, _, _ in base)
            + "".join(f"<th>{_breakable(a)}</th>" for a in differ)
            + "<th>regs</th><th>spills</th><th>SMEM KiB</th><th>status</th></tr>")
    rows = []
    for rank, (_, r) in enumerate(top.iterrows(), 1):
        flags = r["flags"] or " ".join(f"-D{a}={r['p:' + a]}" for a in data.axes)
        smem = r["smem_bytes"] / 1024.0 if pd.notna(r["smem_bytes"]) else None
        kernel_ms = r["ms"] if "ms" in r and pd.notna(r["ms"]) else r["value"]  # speed-ups compare times
        rows.append(
            f"<tr title=\"{_e(flags)}\"><td class=n>{rank}</td><td class=n>{int(r['number'])}</td>"
            f"<td class=n>{_fmt(r['value'])}</td><td class=n>{_fmt(r['tflops'], 1)}</td>"
            + "".join(f"<td class=n>{ms / kernel_ms:.2f}</td>" for _, ms, _ in base)
            + "".join(f"<td class=n>{_e(_fmt(r['p:' + a]))}</td>" for a in differ)
            + f"<td class=n>{_fmt(r['regs'])}</td><td class=n>{_fmt(r['spills'])}</td>"
            f"<td class=n>{_fmt(smem, 1)}</td><td>{_e(r['status'])}</td></tr>")
    shared = " ".join(f"{a}={_fmt(v)}" for a, v in same.items())
    note = f"<p>Same in all of them: <code>{_e(shared)}</code> (a row's tooltip: its -D flags)</p>" if shared else ""
    return f"<table>{head}{''.join(rows)}</table>{note}"


def _failure_html(data: StudyData) -> str:
    table = failure_table(data)
    if table.empty:
        return "<p>No trial was pruned or failed.</p>"
    rows = "".join(
        f"<tr><td><span class=\"pill\" style=\"background:{STATUS_COLORS.get(r.status, '#555')}\">{_e(r.status)}</span>"
        f"</td><td class=n>{r.count}</td><td>{_e(r.example)}</td><td class=n>{r.trial}</td></tr>"
        for r in table.head(40).itertuples())
    more = f"<p>{len(table) - 40} more reasons not shown.</p>" if len(table) > 40 else ""
    return ("<table><tr><th>status</th><th>trials</th><th>reason (an example; numbers vary)</th>"
            f"<th>first trial</th></tr>{rows}</table>{more}")


def _study_title(data: StudyData) -> str:
    return f"Study {data.name}"


def _device_name(attrs: dict[str, Any]) -> str:
    device = attrs.get("device")
    if isinstance(device, dict):
        return str(device.get("name", "–"))
    return str(device or "–")


# --------------------------------------------------------------------------- pages


def render_study_page(data: StudyData, plotly_js: str, footer: str, index_href: str | None = "index.html") -> tuple[str, _Figures]:
    figs = _Figures()
    attrs = data.attrs
    df = data.df
    best = data.best()
    n_complete = len(data.complete)
    parts: list[str] = []

    summary = (f"{_e(attrs.get('shape', '–'))} · {_e(attrs.get('arch', '–'))} · {_e(_device_name(attrs))}"
               f" · {len(df)} trials")
    if index_href:
        summary = f'<a href="{_e(index_href)}">all studies</a> · ' + summary

    head = [f"<h2>Fingerprint</h2>{_fingerprint(attrs)}"]
    if best is not None:
        tflops = best["tflops"]
        head.append(
            f"<h2>Best configuration</h2><p><b>{_e(value_text(float(best['value']), data.metric))}</b>"
            + (f", {_fmt(best_ms(best))} ms" if data.metric == "ratio" else "")
            + (f", {_fmt(tflops, 1)} TFLOPS" if pd.notna(tflops) else "")
            + f" (trial {int(best['number'])})</p><p><code>{_e(best['flags'])}</code></p>"
            + (f"<p>{_e(describe(data.confirmation()))}</p>" if data.confirmation() else "")
            + _speedup_html(attrs, best_ms(best)))
    head.append(f"<h2>Trials by status</h2><p>{_status_pills(df) or 'none'}</p>")
    parts.append('<section class="grid">' + "".join(f"<div>{h}</div>" for h in head) + "</section>")

    if df.empty:
        parts.append('<section><div class="msg">This study has no trials yet: nothing to plot. '
                     "Run <code>tuner run</code> on it, then build the report again.</div></section>")
    else:
        if n_complete == 0:
            parts.append(
                f'<section><div class="msg">No trial of this study completed: all {len(df)} trials were pruned or '
                "failed (in a time-and-energy study, also those whose energy could not be measured), so there is "
                "no history, importance or top configuration. "
                "The breakdown below says why.</div></section>")
        else:
            mem = _memory_study(data)
            parts.append("<section><h2>Optimisation history</h2>" + figs.render("history", lambda: fig_history(data, mem)) + "</section>")
            if data.pareto_trials is not None:
                parts.append("<section><h2>Time and energy</h2>" + figs.render("pareto", lambda: fig_pareto(data)) + "</section>")
            parts.append(f"<section><h2>Top {TOP_N} configurations</h2>{_top_table(data)}</section>")
            parts.append("<section><h2>Which defines matter</h2>"
                         + figs.render("parallel", lambda: fig_parallel(data, mem))
                         + (figs.render("importances", lambda: fig_importances(data, mem))
                            if n_complete >= MIN_IMPORTANCE_TRIALS and data.axes else
                            f'<div class="msg">Parameter importances need at least {MIN_IMPORTANCE_TRIALS} COMPLETE trials.</div>')
                         + figs.render("slice", lambda: fig_slice(data, mem))
                         + figs.render("boxes", lambda: fig_boxes(data))
                         + "</section>")
        resources = df[["regs", "smem_bytes"]].notna().any(axis=None)  # a Kernel Tuner replay records neither
        if df["time_ms"].notna().any() and resources:
            parts.append("<section><h2>Resources</h2>" + figs.render("resources", lambda: fig_resources(data)) + "</section>")
        stopped = (df["state"] != "COMPLETE").any()
        parts.append("<section><h2>Pruned and failed trials</h2>"
                     + (figs.render("failures", lambda: fig_failures(data)) if stopped else "")
                     + _failure_html(data) + "</section>")
    return _page(_study_title(data), summary, "".join(parts), plotly_js, footer), figs


def index_rows(studies: list[StudyData]) -> list[dict[str, Any]]:
    rows = []
    for d in studies:
        best = d.best()
        states = Counter(d.df["state"]) if len(d.df) else Counter()
        rows.append({
            "name": d.name, "shape": str(d.attrs.get("shape", "–")), "arch": str(d.attrs.get("arch", "–")),
            "device": _device_name(d.attrs), "kind": str(d.attrs.get("kind", "–")),
            "best_ms": best_ms(best) if best is not None else None,
            "best_tflops": float(best["tflops"]) if best is not None and pd.notna(best["tflops"]) else None,
            "best_flags": str(best["flags"]) if best is not None else "",
            "trials": len(d.df), "complete": states.get("COMPLETE", 0), "pruned": states.get("PRUNED", 0),
            "fail": states.get("FAIL", 0), "running": states.get("RUNNING", 0) + states.get("WAITING", 0),
            "last_update": d.last_update(),
            "speedups": speedups(d.attrs, best_ms(best) if best is not None else None),
        })
    return rows


def _shape_rank(shape: str) -> tuple[int, str]:
    return (SHAPE_ORDER.index(shape.lower()) if shape.lower() in SHAPE_ORDER else len(SHAPE_ORDER), shape)


def fig_shapes(studies: list[StudyData]) -> go.Figure | None:
    rows = [r for r in index_rows(studies) if r["best_ms"] is not None]
    if not rows:
        return None
    rows.sort(key=lambda r: (_shape_rank(r["shape"]), r["name"]))
    labels = [f"{r['shape']}<br><sub>{_clip(r['name'], 28)}</sub>" for r in rows]
    fig = make_subplots(rows=1, cols=3, horizontal_spacing=0.08,
                        subplot_titles=("best time vs baselines (ms)", "best TFLOPS", "speed-up over baselines"))
    fig.add_trace(go.Bar(x=labels, y=[r["best_ms"] for r in rows], name="tuned kernel",
                         marker_color="#2ca02c", legendgroup="tuned"), row=1, col=1)
    baseline_names = sorted({n for r in rows for n, _, _ in r["speedups"]})
    palette = ["#1f77b4", "#ff7f0e", "#9467bd", "#8c564b", "#e377c2"]
    for i, name in enumerate(baseline_names):
        color = palette[i % len(palette)]
        ms = [next((b for n, b, _ in r["speedups"] if n == name), None) for r in rows]
        sp = [next((s for n, _, s in r["speedups"] if n == name), None) for r in rows]
        fig.add_trace(go.Bar(x=labels, y=ms, name=name, marker_color=color, legendgroup=name), row=1, col=1)
        fig.add_trace(go.Bar(x=labels, y=sp, name=name, marker_color=color, legendgroup=name,
                             showlegend=False, text=[f"{s:.2f}×" if s else "" for s in sp],
                             textposition="outside"), row=1, col=3)
    fig.add_trace(go.Bar(x=labels, y=[r["best_tflops"] for r in rows], showlegend=False,
                         marker_color="#2ca02c", text=[_fmt(r["best_tflops"], 1) for r in rows],
                         textposition="outside"), row=1, col=2)
    fig.add_hline(y=1.0, line_dash="dot", line_color="#555", row=1, col=3)
    fig.update_layout(barmode="group")
    return _layout(fig, "Shapes side by side (best COMPLETE trial of each study)", 460, subplots=True)


def _shape_defines_table(studies: list[StudyData]) -> str:
    """The winning value of every define, one column per study: which choices move with the shape."""
    cols = []
    for d in sorted(studies, key=lambda d: (_shape_rank(str(d.attrs.get("shape", ""))), d.name)):
        best = d.best()
        if best is not None:
            cols.append((d, best))
    if not cols:
        return ""
    axes: list[str] = []
    for d, _ in cols:
        axes += [a for a in d.axes if a not in axes]
    head = "<tr><th>define</th>" + "".join(
        f"<th>{_e(d.attrs.get('shape', '–'))}<br><small>{_e(d.name)}</small></th>" for d, _ in cols) + "</tr>"
    body = []
    for a in axes:
        vals = [str(b.get("p:" + a, "–")) if pd.notna(b.get("p:" + a)) else "–" for _, b in cols]
        differs = len(set(vals) - {"–"}) > 1  # a study without the define does not make a row differ
        body.append(f"<tr><td><code>{_e(a)}</code></td>" + "".join(
            f"<td>{'<b>' if differs else ''}{_e(v)}{'</b>' if differs else ''}</td>" for v in vals) + "</tr>")
    return ("<h2>Winning defines per study</h2><p>Bold rows differ between the studies that have the define.</p>"
            f"<table>{head}{''.join(body)}</table>")


def render_index(studies: list[StudyData], links: dict[str, str], plotly_js: str, footer: str) -> tuple[str, _Figures]:
    figs = _Figures()
    parts = []
    rows = index_rows(studies)
    if not rows:
        parts.append('<section><div class="msg">This storage holds no studies yet. Create one with '
                     "<code>tuner run studies/NAME.toml</code>.</div></section>")
    else:
        rows_html = []
        for r in sorted(rows, key=lambda r: (_shape_rank(r["shape"]), r["name"])):
            link = links.get(r["name"])
            name = f'<a href="{_e(link)}">{_e(r["name"])}</a>' if link else _e(r["name"])
            sp = " ".join(f"{s:.2f}× {_e(n)}" for n, _, s in r["speedups"]) or "–"
            last = r["last_update"].strftime("%Y-%m-%d %H:%M") if r["last_update"] else "–"
            rows_html.append(
                f"<tr><td>{name}</td><td>{_e(r['shape'])}</td><td>{_e(r['arch'])}</td><td>{_e(r['device'])}</td>"
                f"<td>{_e(r['kind'])}</td><td class=n>{_fmt(r['best_ms'])}</td><td class=n>{_fmt(r['best_tflops'], 1)}</td>"
                f"<td>{sp}</td><td class=n>{r['trials']}</td><td class=n>{r['complete']}</td><td class=n>{r['pruned']}</td>"
                f"<td class=n>{r['fail']}</td><td class=n>{r['running']}</td><td>{last}</td></tr>")
        parts.append(
            "<section><h2>Studies</h2><table><tr><th>study</th><th>shape</th><th>arch</th><th>device</th><th>kind</th>"
            "<th>best ms</th><th>TFLOPS</th><th>speed-up</th><th>trials</th><th>complete</th><th>pruned</th>"
            f"<th>failed</th><th>running</th><th>last update</th></tr>{''.join(rows_html)}</table></section>")
        shape_fig = fig_shapes(studies)
        if shape_fig is None:
            parts.append('<section><div class="msg">No study has a COMPLETE trial yet: nothing to compare.</div></section>')
        else:
            parts.append("<section><h2>Shapes side by side</h2>" + figs.render("shapes", lambda: shape_fig)
                         + _shape_defines_table(studies) + "</section>")
    sub = f"{len(rows)} studies"
    return _page("Kernel tuning studies", sub, "".join(parts), plotly_js, footer), figs


def study_filename(name: str) -> str:
    slug = re.sub(r"[^A-Za-z0-9_.-]+", "-", name).strip("-.")[:60] or "study"
    return f"study-{slug}-{hashlib.sha1(name.encode()).hexdigest()[:6]}.html"


#: beside index.html: which storage the folder's report shows (a report of another is not replaced unasked)
REPORT_MARK = ".tuner-report.json"


def write_report(storage: str | BaseStorage, out_dir: str | Path,
                 study_names: list[str] | None = None, force: bool = False) -> list[Path]:
    """Write ``index.html`` and one page per study into ``out_dir``; return the paths written.

    ``storage`` is an Optuna storage object or a URL (``sqlite:///…``, ``postgresql+psycopg://…``,
    or a journal ``.log`` path). ``study_names=None`` reports every study; the index always
    lists every study in the storage and links those that have a page in ``out_dir``.
    A folder holds the report of one storage: writing again from it updates the report (the
    storage holds everything the pages show); a report of another storage there, or an
    ``index.html`` of unknown origin, is replaced only with ``force``.
    """
    from tuner.errors import UserError

    started = time.perf_counter()
    label = redact(storage) if not isinstance(storage, BaseStorage) else describe_storage(storage)
    out = Path(out_dir)
    if out.exists() and not out.is_dir():
        raise UserError(f"-o {out} is a file: give a folder for the report's pages")
    whose = _whose(storage, label)
    replacing = _check_report_folder(out, whose, force)
    storage = storage if isinstance(storage, BaseStorage) else open_storage(storage, create=False)
    studies = {name: optuna.load_study(study_name=name, storage=storage) for name in optuna.get_all_study_names(storage)}
    if study_names is not None:
        missing = [n for n in study_names if n not in studies]
        if missing:
            known = ", ".join(sorted(studies)) or "none"
            raise UserError(f"no study named {', '.join(missing)} in {label} (studies there: {known})")
        wanted = list(dict.fromkeys(study_names))
    else:
        wanted = sorted(studies)
    out.mkdir(parents=True, exist_ok=True)
    if replacing:  # another storage's pages: the index must not link them as this one's
        for page in out.glob("study-*.html"):
            page.unlink()

    plotly_js = _plotly_js()
    stamp = _dt.datetime.now().strftime("%Y-%m-%d %H:%M")
    footer = f"Built {stamp} from {_e(redact(label))} by the tuner's dashboards (plotly {_e(_plotly_version())})."
    loaded = {name: load_study(studies[name]) for name in studies}
    written: list[Path] = []
    links = {}
    for name in wanted:
        html_text, _ = render_study_page(loaded[name], plotly_js, footer)
        path = out / study_filename(name)
        _write(path, html_text)
        written.append(path)
    for name in studies:
        if (out / study_filename(name)).exists():
            links[name] = study_filename(name)
    index_html, _ = render_index(list(loaded.values()), links, plotly_js, footer)
    index_path = out / "index.html"
    _write(index_path, index_html)
    _write(out / REPORT_MARK, json.dumps({"storage": whose, "built": stamp}))
    log.info("report: %d pages in %.1f s", len(written) + 1, time.perf_counter() - started)
    return [index_path] + written


def _whose(storage: str | BaseStorage, label: str) -> str:
    """What a report folder records as its storage: a URL's :func:`storage_identity`, else the storage as shown."""
    return label if isinstance(storage, BaseStorage) else storage_identity(storage)


def _check_report_folder(out: Path, label: str, force: bool) -> bool:
    """Refuse to replace the report of another storage (or an index.html not ours) unless ``force``;
    whether the folder holds one that is replaced."""
    from tuner.errors import UserError
    from tuner.table import printable

    if not (out / "index.html").exists():
        return False
    try:
        previous = json.loads((out / REPORT_MARK).read_text(encoding="utf-8")).get("storage")
    except (OSError, ValueError, AttributeError):
        previous = None
    if previous == label:
        return False
    if force:
        return True
    what = f"the report of {printable(previous)}" if isinstance(previous, str) else "an index.html the tuner did not write"
    raise UserError(f"-o {out} holds {what}: give another folder, or --force to replace it")


def _write(path: Path, text: str) -> None:
    tmp = path.with_name(path.name + ".tmp")
    tmp.write_text(text, encoding="utf-8")
    tmp.replace(path)


_PLOTLY_JS: str | None = None


def _plotly_js() -> str:
    global _PLOTLY_JS
    if _PLOTLY_JS is None:
        from plotly.offline import get_plotlyjs

        _PLOTLY_JS = get_plotlyjs()
    return _PLOTLY_JS


def _plotly_version() -> str:
    import plotly

    return plotly.__version__


__all__ = ["write_report", "load_study", "StudyData", "study_filename", "reason_key", "top_configs",
           "speedups", "failure_table", "index_rows", "STATUS_COLORS"]
