"""Replay: evaluate against a recorded full-grid table instead of a GPU.

Formats read:

- our results table (:mod:`tuner.store.results`; ``tuner grid`` and ``tuner export`` write it),
  also in the ``params_`` / ``user_attrs_`` columns of older Optuna exports;
- a Kernel Tuner cache file (JSON, optionally gzipped), which carries its own space
  (``tune_params``) in its header, so it needs no study file; also one whose run was cut short
  (Kernel Tuner appends each config as it goes and closes the file only at the end);
- a Kernel Tuner T4 results file (JSON, optionally gzipped);
- a KTT (Kernel Tuning Toolkit) JSON output file (``Metadata`` + ``Results``, optionally gzipped).

A recorded space becomes a :class:`ReplaySpec`, so the same :class:`~tuner.search.space.Space`,
sampler and objective run unchanged; configurations absent from the recording are
invalid (Kernel Tuner's restrictions removed them).
"""

from __future__ import annotations

import gzip
import hashlib
import io
import json
import math
import statistics
import zlib
from collections.abc import Callable, Iterator, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from optuna.trial import FrozenTrial, TrialState

from tuner.contract.kernel_spec import KernelSpec, Value, as_define_value
from tuner.errors import UserError
from tuner.evaluate.evaluator import Evaluator
from tuner.measurement.value import COMPLETE_STATUSES, EXTRA_STATUSES, STATUSES, Measurement
from tuner.search.distributions import space_distributions
from tuner.search.enumeration import Enumeration
from tuner.search.space import Space
from tuner.search.warm_start import Source, finished_trial
from tuner.store.results import KT_FAILURES, TableError, normalise

# T4's invalidity kinds, in our statuses (Kernel Tuner's failure strings: tuner.store.results.KT_FAILURES).
T4_INVALIDITY = {"compile": "compile_error", "runtime": "launch_error", "constraints": "invalid", "correctness": "mismatch"}
# KTT's result statuses (ktt::ResultStatus), in ours. A launch beyond the device's limits is not a
# config of that GPU at all, as Kernel Tuner leaves such configs out of its space.
KTT_STATUSES = {"Ok": "ok", "ComputationFailed": "launch_error", "ValidationFailed": "mismatch",
                "CompilationFailed": "compile_error", "DeviceLimitsExceeded": "invalid"}
# KTT's time units (ktt::TimeUnit), in milliseconds
KTT_TIME_UNITS = {"Nanoseconds": 1e-6, "Microseconds": 1e-3, "Milliseconds": 1.0, "Seconds": 1e3}


@dataclass
class Record:
    status: str
    ms: float | None = None
    times: list[float] = field(default_factory=list)
    attrs: dict[str, Any] = field(default_factory=dict)


@dataclass
class Recording:
    path: Path
    format: str  # "csv" | "kernel_tuner" (a cache, or a results list) | "t4" | "ktt"
    axes: dict[str, list[Value]]
    records: dict[tuple, Record]
    device: str = ""
    kernel: str = ""
    #: a Kernel Tuner cache's ``problem_size`` (kept for an export of the replay)
    problem_size: Any = None
    #: what a user should know of how the file was read (a Kernel Tuner cache cut short, ...)
    notes: list[str] = field(default_factory=list)
    #: recorded columns a study holds at one value (its [fixed] or [problem]): every lookup reads that slice
    pinned: dict[str, Value] = field(default_factory=dict)

    #: the file's digest once read (a replay's fingerprint and its spec's source hash both ask for it)
    _digest: str = field(default="", init=False, repr=False, compare=False)

    def digest(self) -> str:
        if not self._digest:
            self._digest = hashlib.sha256(self.path.read_bytes()).hexdigest()[:16]
        return self._digest

    def lookup(self, params: dict[str, Value]) -> Record | None:
        given = {**self.pinned, **params}
        return self.records.get(tuple(given[a] for a in self.axes))

    def optimum(self) -> float:
        return min(r.ms for r in self.records.values() if r.status == "ok" and r.ms is not None)

    def pin(self, space: Space, held: Mapping[str, Value], study: str) -> None:
        """Read the recording as ``study``'s (its file name): a column the study holds at a recorded value
        (``held``: its [problem] and [fixed]) reads that slice; an axis it lacks, or a column neither an
        axis nor held, is refused (a config of the study would name no recorded row)."""
        missing = [a for a in space.axes if a not in self.axes]
        if missing:
            raise UserError(f"replay file {self.path} has no column for {', '.join(missing)}: record it from this study")
        self.pinned = {a: held[a] for a in self.axes if a not in space.axes and a in held and held[a] in self.axes[a]}
        extra = [a for a in self.axes if a not in space.axes and a not in self.pinned]
        if extra:
            raise UserError(f"replay file {self.path} has define columns {', '.join(extra)} that are not axes of "
                            f"{study}: add them to its space, or hold each at one of its recorded values in [fixed]")

    def in_space(self, space: Space) -> list[Record]:
        """The records of the study's valid configs (the slice its pinned columns hold)."""
        found = []
        for key, record in self.records.items():
            params = dict(zip(self.axes, key, strict=True))
            if all(params[a] == v for a, v in self.pinned.items()) and space.key(params) in space.valid_keys:
                found.append(record)
        return found

    def best_against(self, space: Space, best: dict | None) -> dict:
        """A replay's yardstick: the fastest config the recording holds in the study's space, and the
        fraction of its speed the study's best (a summary's ``best``) reaches (1: found it)."""
        times = [r.ms for r in self.in_space(space) if r.status == "ok" and r.ms]
        return yardstick(min(times), best) if times else {}


def yardstick(fastest_ms: float, best: dict | None) -> dict:
    """A summary's ``recorded_best_ms``, and the fraction of its speed ``best`` (a summary's) reaches."""
    out: dict = {"recorded_best_ms": fastest_ms}
    if best and best.get("ms"):
        out["fraction_of_recorded_best"] = round(fastest_ms / best["ms"], 4)
    return out


def _coerce(text: str, where: str) -> Value:
    """A CSV cell as a define value: a number as the compiler reads it, else the name."""
    return as_define_value(text, where)


#: a Kernel Tuner cache whose run was cut short (Kernel Tuner closes the file only at the end)
CUT_SHORT = "a Kernel Tuner cache cut short, {n} configs"
#: gzip data that ends early (a copy cut short in transfer): a Kernel Tuner cache in it reads as one cut short
GZIP_CUT_SHORT = "gzip data that ends early, read as a Kernel Tuner cache cut short, {n} configs"
GZIP_ENDS_EARLY = "replay file {path}: broken gzip data (it ends early: the file was cut short; copy it again)"
#: Kernel Tuner 0.4.1 and earlier stored a config that failed to compile or run as this time (a number, where
#: later versions store the failure's name)
KT_FAILED_TIME = 1e20
KT_FAILED_TIMES = ("configs with time 1e20, Kernel Tuner's mark (0.4.1 and earlier) of a config that failed to compile or "
                   "run: read as failed, {n} configs")
#: the fields Kernel Tuner adds to each result besides the tunable parameters and the measurements
KT_RESULT_FIELDS = {"time", "times", "compile_time", "verification_time", "benchmark_time", "strategy_time",
                    "framework_time", "timestamp"}
KT_RESULTS_LIST = "a Kernel Tuner results list of {n} configs: its defines read as {defines}"
#: a results table of a paired study: its 'value' is each config's ratio to the reference launched
#: alternately, its 'ms' the config's own median, which moved with the clock
PAIRED_TABLE = ("times are the table's paired ratios ('value') x {scale:.4g} ms, its median time per unit ratio "
                "('ms' moved with the clock)")
#: Kernel Tuner 1.1-1.3 on HIP stored each launch's time as HIP Python's (status, ms) pair and averaged
#: the pairs, zeros and all, into "time" (its issue #332)
HIP_PAIRS = ("times recorded as (status, ms) pairs by Kernel Tuner's HIP backend (its issue #332): each config's time "
             "is the mean of the ms, twice the recorded 'time'")

#: the most a replay file may hold, uncompressed (the largest recorded space, 1,184 configs
#: with their samples, is a few MB; a gzip bomb of 1 MB expands to GBs)
MAX_REPLAY_BYTES = 256 * 2**20


def _open_text(path: Path) -> tuple[str, bool]:
    """The file's text, unzipped where it is gzip data, and whether that gzip data ends early (a copy
    cut short in transfer: its text up to the cut is returned; its checksum, at the end, is lost)."""
    ends_early = False
    try:
        with open(path, "rb") as f:
            raw = f.read(MAX_REPLAY_BYTES + 1)
            if raw[:2] == b"\x1f\x8b":
                f.seek(0)
                try:
                    with gzip.GzipFile(fileobj=f) as unzipped:
                        raw = unzipped.read(MAX_REPLAY_BYTES + 1)
                except EOFError:
                    f.seek(0)
                    raw = zlib.decompressobj(wbits=31).decompress(f.read(MAX_REPLAY_BYTES + 1), MAX_REPLAY_BYTES + 1)
                    ends_early = True
    except (OSError, zlib.error) as exc:
        if isinstance(exc, OSError) and exc.errno is not None:
            raise UserError(f"replay file {path}: {exc.strerror}") from None
        raise UserError(f"replay file {path}: broken gzip data ({exc})") from None
    if len(raw) > MAX_REPLAY_BYTES:
        raise UserError(f"replay file {path}: more than {MAX_REPLAY_BYTES // 2**20} MiB of data (uncompressed): "
                        "not a recording of a tuning space")
    try:
        return raw.decode(), ends_early
    except UnicodeDecodeError:
        if ends_early:  # the cut may fall inside a character
            return raw.decode(errors="ignore"), ends_early
        raise UserError(f"replay file {path}: not text (expected CSV or Kernel Tuner JSON)") from None


def _time(value: Any, where: str) -> float:
    """A recorded time in milliseconds: a finite, positive number, else a one-line error."""
    if isinstance(value, bool) or not isinstance(value, (int, float, str)):
        raise UserError(f"{where}: time {value!r} is not a number")
    try:
        number = float(value)
    except ValueError:
        raise UserError(f"{where}: time {value!r} is not a number") from None
    if not math.isfinite(number) or number <= 0:
        raise UserError(f"{where}: time {value!r} must be finite and positive (milliseconds)")
    return number


def _value(value: Any, where: str) -> Value:
    """A recorded define value: an integer or an identifier, as the study file's (a number
    written as text is that number: ``"1"`` and 1 are one value)."""
    if isinstance(value, bool) or not isinstance(value, (int, float, str)) or (
            isinstance(value, float) and not value.is_integer()):
        raise UserError(f"{where}: value {_short(value)} must be an integer or a name")
    return as_define_value(value, where)


def _axis_values(values: list, where: str) -> list[Value]:
    """An axis's recorded values, normalised; one listed twice (``1`` and ``"1"``) is an error."""
    out: list[Value] = []
    for raw in values:
        value = _value(raw, where)
        if value in out:
            raise UserError(f"{where} lists a value twice: {value!r}" + (f" ({raw!r} is {value!r})" if raw != value else ""))
        out.append(value)
    return out


def load_recording(path: str | Path) -> Recording:
    path = Path(path)
    if not path.is_file():
        raise UserError(f"replay file {path} not found")
    text, ends_early = _open_text(path)
    is_json = text.lstrip().startswith(("{", "["))
    data = None
    if is_json:
        cut_short = ends_early
        try:
            data = json.loads(text)
        except json.JSONDecodeError as exc:
            data = _closed_kernel_tuner_cache(text)
            if data is None and not ends_early:
                raise UserError(f"replay file {path}: invalid JSON ({exc.msg} at line {exc.lineno})") from None
            cut_short = True
        if isinstance(data, dict) and "cache" in data and "tune_params" in data:
            recording = _from_kernel_tuner(path, data)
            if cut_short:
                note = GZIP_CUT_SHORT if ends_early else CUT_SHORT
                recording.notes.insert(0, note.format(n=len(recording.records)))
            return recording
    if ends_early:  # only a Kernel Tuner cache reads up to a cut: elsewhere the rows lost would give no sign
        raise UserError(GZIP_ENDS_EARLY.format(path=path))
    if not is_json:
        return _from_csv(path, text)
    if isinstance(data, dict) and "results" in data and "schema_version" in data:
        return _from_t4(path, data)
    if isinstance(data, dict) and "Results" in data and "Metadata" in data:
        return _from_ktt(path, data)
    if isinstance(data, list) and data and all(isinstance(e, dict) for e in data) and any("time" in e for e in data):
        return _from_kernel_tuner_results(path, data)
    raise UserError(
        f"replay file {path}: JSON but not a Kernel Tuner cache (cache + tune_params) or results list (objects with "
        "'time'), T4 (results + schema_version) or KTT output (Metadata + Results)"
    )


def _closed_kernel_tuner_cache(text: str) -> dict | None:
    """A Kernel Tuner cache whose run was cut short, closed as Kernel Tuner closes it to resume: the
    file ends after its last config's comma (or inside a config being written, which is left out).
    None where the text is not such a cache."""
    if '"cache"' not in text or '"tune_params"' not in text:
        return None
    body = text.rstrip()
    for cut in (body, body[: body.rfind("},") + 1]):  # as written; then without a config cut in half
        try:
            data = json.loads(cut.rstrip(",") + "}}")
        except json.JSONDecodeError:
            continue
        if isinstance(data, dict) and isinstance(data.get("cache"), dict):
            return data
    return None


def _from_csv(path: Path, text: str) -> Recording:
    import csv

    import pandas as pd  # (here: a GPU run's start imports this module without reading a table)

    try:
        rows = list(csv.reader(io.StringIO(text)))
    except csv.Error as exc:
        raise UserError(f"replay file {path}: not a CSV table ({exc})") from None
    header = rows[0] if rows else []
    twice = sorted({c for c in header if header.count(c) > 1})
    if twice:  # pandas would rename the second to "NAME.1" and take it for another define
        raise UserError(f"replay file {path}: column {', '.join(map(repr, twice))} appears twice in the header")
    for line, row in enumerate(rows[1:], start=2):  # pandas would take surplus fields for an index
        if row and len(row) != len(header):
            raise UserError(f"replay file {path}, line {line}: {len(row)} fields, the header has {len(header)}")
    try:
        frame, axis_names = normalise(pd.read_csv(io.StringIO(text), dtype=str, keep_default_na=False))
    except (TableError, pd.errors.ParserError, pd.errors.EmptyDataError, ValueError) as exc:
        raise UserError(f"replay file {path}: {' '.join(str(exc).split())[:200]}") from None
    if frame.empty:
        raise UserError(f"replay file {path}: a results table needs a header with the define columns and 'ms', and rows")
    scale = _ratio_scale(frame)
    records: dict[tuple, Record] = {}
    for line, row in enumerate(frame.to_dict("records"), start=2):
        where = f"replay file {path}, line {line}"
        if any(row.get(a) in (None, "") for a in axis_names):  # a short (ragged) row
            raise UserError(f"{where}: no value for {', '.join(a for a in axis_names if row.get(a) in (None, ''))}")
        key = tuple(_coerce(row[a], f"{where}: {a}") for a in axis_names)
        status = row["status"] or "ok"
        if status not in RECORDED_STATUSES:
            raise UserError(f"{where}: status {status!r} is unknown; expected one of {', '.join(RECORDED_STATUSES)}")
        ms = _time(row["ms"], where) if row.get("ms") not in (None, "", "-") and status in ("ok", "duplicate") else None
        if status == "ok" and ms is None:
            raise UserError(f"{where}: status ok needs its time in 'ms'")
        if ms is not None and scale is not None:
            ms = _time(row["value"], f"{where}: value") * scale
        if status == "duplicate" and ms is not None:  # a repeat: its stored result is the config's
            status = "ok"
        attrs = {}
        for column in ("regs", "spills", "smem_bytes"):
            if row.get(column) not in (None, "", "-"):
                try:
                    attrs[column] = int(float(row[column]))
                except (ValueError, OverflowError):
                    raise UserError(f"{where}: {column} {row[column]!r} is not a number") from None
        record = Record(status, ms, [], attrs)
        if key not in records or _rank(record) < _rank(records[key]):
            records[key] = record
    device = str(frame["device"].iloc[0]) if "device" in frame.columns else ""
    notes = [PAIRED_TABLE.format(scale=scale)] if scale is not None else []
    return Recording(path, "csv", _recorded_axes(list(axis_names), records), records, device=device, notes=notes)


def _ratio_scale(frame: Any) -> float | None:
    """Where a table's 'value' is a paired ratio rather than its 'ms' (the objective of a study timed
    against a reference), the time per unit ratio that puts the ratios on the scale of milliseconds
    (the median of ms / value); None where 'value' is the time itself or absent."""
    import pandas as pd

    if "value" not in frame.columns:
        return None
    ok = frame["status"].isin(("ok", "duplicate", "")) if "status" in frame.columns else True
    value = pd.to_numeric(frame["value"], errors="coerce")[ok]
    ms = pd.to_numeric(frame["ms"], errors="coerce")[ok]
    both = (value > 0) & (ms > 0)
    if not both.any() or (value[both] - ms[both]).abs().le(1e-9 * ms[both]).all():
        return None
    return float((ms[both] / value[both]).median())


#: the statuses a results table holds: a trial record's, and those of trials without one
#: (:func:`tuner.store.results.status_of`)
RECORDED_STATUSES = (*STATUSES, *EXTRA_STATUSES, "pruned", "failed", "running", "waiting")


def _rank(record: Record) -> tuple[int, float]:
    """A config recorded several times (a study's repeats): a measured result wins, the fastest."""
    return (record.status != "ok" or record.ms is None, record.ms if record.ms is not None else 0.0)


def _config_key(entry: dict, keys: list[str], at: str) -> tuple:
    """The recorded config's values in ``keys`` order; a one-line error names what is missing."""
    missing = [k for k in keys if k not in entry]
    if missing:
        raise UserError(f"{at} has no {', '.join(missing)}")
    return tuple(_value(entry[k], f"{at}: {k!r}") for k in keys)


def _field(data: dict, key: str, kind: type | tuple[type, ...], where: str, default: Any = None) -> Any:
    """``data[key]`` if it is of ``kind`` (``default`` when absent); else one line naming the field."""
    if key not in data:
        return default
    value = data[key]
    kinds = kind if isinstance(kind, tuple) else (kind,)
    if not isinstance(value, kinds) or (isinstance(value, bool) and bool not in kinds):
        names = " or ".join(dict.fromkeys(_KIND_NAMES.get(k, k.__name__) for k in kinds))
        raise UserError(f"{where}: field {key!r} must be {names}, got {type(value).__name__} {_short(value)}")
    return value


_KIND_NAMES = {str: "a string", int: "a number", float: "a number", bool: "true or false", list: "a list",
               dict: "an object"}


def _short(value: Any) -> str:
    text = json.dumps(value) if isinstance(value, (list, dict)) else repr(value)
    return text if len(text) <= 40 else text[:37] + "..."


#: what a replay of a cache tuned for another objective says (the tuner's objective is time)
KT_OTHER_OBJECTIVE = "the cache was tuned for {objective}: the replay minimises its recorded time, as the tuner does"


def _kt_objective(data: dict, where: str) -> str:
    """The cache's objective as Kernel Tuner names it (the replay minimises the recorded ``time``
    whatever it is: the tuner's objective, and every Kernel Tuner cache records it)."""
    _field(data, "objective_higher_is_better", bool, where)
    return _field(data, "objective", str, where, "time")


def _from_kernel_tuner(path: Path, data: dict) -> Recording:
    where = f"replay file {path}"
    params = _field(data, "tune_params", dict, where)
    cache = _field(data, "cache", dict, where)
    if not params:
        raise UserError(f"{where}: 'tune_params' must not be empty")
    keys = _field(data, "tune_params_keys", list, where) or list(params)
    if any(not isinstance(k, str) or k not in params for k in keys):
        raise UserError(f"{where}: 'tune_params_keys' must name keys of 'tune_params'")
    axes: dict[str, list[Value]] = {}
    for k in keys:
        if not isinstance(params[k], list) or not params[k]:
            raise UserError(f"{where}: tune_params {k!r} must be a non-empty list of values")
        axes[k] = _axis_values(params[k], f"{where}: tune_params {k!r}")
    declared = _kt_objective(data, where)
    objective = "time"  # Kernel Tuner names a config's failure under the cache's own objective (GFLOP/s) too
    device = _field(data, "device_name", str, where, "")
    kernel = _field(data, "kernel_name", str, where, "")
    records: dict[tuple, Record] = {}
    quirks: list[str] = []
    for name, entry in cache.items():
        at = f"{where}: cache entry {name!r}"
        if not isinstance(entry, dict):
            raise UserError(f"{at} is not an object")
        records[_config_key(entry, keys, at)], quirk = _kt_result(entry, objective, declared, at)
        quirks.append(quirk)
    notes = [KT_OTHER_OBJECTIVE.format(objective=declared)] if declared != "time" else []
    return Recording(path, "kernel_tuner", axes, records, device, kernel, data.get("problem_size"),
                     [*notes, *_kt_notes(quirks)])


def _from_kernel_tuner_results(path: Path, results: list[dict]) -> Recording:
    """``tune_kernel``'s first return value, as scripts save it (``json.dump(results, f)``): a list of the
    configs measured, each its tunable parameters and what was measured, with no list of the parameters.
    The defines are the fields every entry has whose values are integers or names, less Kernel Tuner's
    own (``KT_RESULT_FIELDS``); measurements are floats or lists. The run names the defines it read."""
    where = f"replay file {path}"
    first = results[0]
    keys = [k for k in first if k not in KT_RESULT_FIELDS and all(k in e and _define_like(e[k]) for e in results)]
    if not keys:
        raise UserError(f"{where}: a Kernel Tuner results list, but no field holds integers or names in every entry "
                        "(the tunable parameters)")
    records: dict[tuple, Record] = {}
    quirks: list[str] = []
    for i, entry in enumerate(results):
        at = f"{where}: result {i}"
        record, quirk = _kt_result(entry, "time", "time", at)
        key = _config_key(entry, keys, at)
        if key not in records or _rank(record) < _rank(records[key]):
            records[key] = record
        quirks.append(quirk)
    notes = [KT_RESULTS_LIST.format(n=len(records), defines=", ".join(keys)), *_kt_notes(quirks)]
    return Recording(path, "kernel_tuner", _recorded_axes(keys, records), records, kernel=path.name.split(".")[0],
                     notes=notes)


def _define_like(value: Any) -> bool:
    return isinstance(value, str) or (isinstance(value, int) and not isinstance(value, bool))


def _kt_result(entry: dict, objective: str, declared: str, at: str) -> tuple[Record, str]:
    """One config Kernel Tuner measured (a cache entry, or an entry of ``tune_kernel``'s results), and the
    quirk of an older Kernel Tuner it shows, if any (``HIP_PAIRS``, ``KT_FAILED_TIMES``, else "").
    Kernel Tuner 1.4 names a failure in ``__error__`` and records no time; earlier ones in the objective."""
    failure = next((entry[k] for k in ("__error__", objective, declared) if isinstance(entry.get(k), str)), None)
    if failure is not None:
        # our export keeps the status a failure string cannot say (a config stopped as slower: pruned_slow)
        ours = entry.get("status")
        status = ours if ours in RECORDED_STATUSES and ours != "ok" else KT_FAILURES.get(failure, "launch_error")
        return Record(status, attrs={"reason": failure}), ""
    if objective not in entry:
        raise UserError(f"{at} has no {objective!r}")
    recorded = entry[objective]
    if entry.get("status") == "pruned_slow":  # our export: stopped as slower, at this time
        return Record("pruned_slow", _time(recorded, f"{at}: {objective!r}"), attrs={"reason": "stopped as slower"}), ""
    if objective == "time" and recorded == KT_FAILED_TIME:
        return Record("launch_error", attrs={"reason": "time 1e20: failed to compile or run"}), KT_FAILED_TIMES
    times, hip = _launch_times(_field(entry, "times", list, at, []), f"{at}: 'times'")
    if hip and objective == "time":  # the mean of the pairs, zeros and all, is half the time
        recorded = statistics.fmean(times)
    return Record("ok", _time(recorded, f"{at}: {objective!r}"), times), HIP_PAIRS if hip else ""


def _kt_notes(quirks: list[str]) -> list[str]:
    """What the run should say of the older Kernel Tuner quirks a file showed (:func:`_kt_result`)."""
    notes = [HIP_PAIRS] if HIP_PAIRS in quirks else []
    if KT_FAILED_TIMES in quirks:
        notes.append(KT_FAILED_TIMES.format(n=quirks.count(KT_FAILED_TIMES)))
    return notes


def _launch_times(times: list, where: str) -> tuple[list[float], bool]:
    """A config's per-launch times in ms, and whether Kernel Tuner 1.1-1.3 stored them on HIP as
    ``[0, ms]`` pairs (hipSuccess, the time; read as their ms)."""
    hip = bool(times) and all(_hip_pair(t) for t in times)
    return [_time(t[1] if hip else t, where) for t in times], hip


def _hip_pair(time: Any) -> bool:
    return (isinstance(time, list) and len(time) == 2 and time[0] == 0 and not isinstance(time[0], bool)
            and isinstance(time[1], (int, float)) and not isinstance(time[1], bool))


def _from_t4(path: Path, data: dict) -> Recording:
    where = f"replay file {path}"
    results = _field(data, "results", list, where)
    if not results:
        raise UserError(f"{where}: T4 file with no results")
    keys: list[str] = []
    records: dict[tuple, Record] = {}
    hip_pairs = False
    for at, entry, config in _results(results, where, "configuration", dict):
        keys = keys or list(config)
        key = _config_key(config, keys, f"{at}: configuration")
        invalidity = _field(entry, "invalidity", str, at, "correct")
        measurements = _field(entry, "measurements", list, at, [])
        for m in measurements:
            if not isinstance(m, dict):
                raise UserError(f"{at}: 'measurements' must hold objects, got {_short(m)}")
            _field(m, "name", str, f"{at}: measurement")
        value = next((m.get("value") for m in measurements if m.get("name") == "time"), None)
        if invalidity != "correct":
            records[key] = Record(T4_INVALIDITY.get(invalidity, "launch_error"), attrs={"reason": str(value)})
        elif value is None:
            named = ", ".join(str(m.get("name")) for m in measurements) or "none"
            raise UserError(f"{at}: a correct result with no 'time' measurement (it measures: {named}); "
                            "the tuner replays times")
        else:
            runtimes = _field(_field(entry, "times", dict, at, {}), "runtimes", list, f"{at}: 'times'", [])
            times, hip = _launch_times(runtimes, f"{at}: 'times.runtimes'")
            if hip:  # "time" is the mean of the pairs, zeros and all, as in a Kernel Tuner cache
                hip_pairs = True
                value = statistics.fmean(times)
            records[key] = Record("ok", _time(value, at), times)
    return Recording(path, "t4", _recorded_axes(keys, records), records, notes=[HIP_PAIRS] if hip_pairs else [])


def _from_ktt(path: Path, data: dict) -> Recording:
    """KTT's JSON output: each result a configuration (a list of name / value pairs), a status and
    the kernel's duration in the file's time unit. The space is the configurations it holds."""
    where = f"replay file {path}"
    metadata = _field(data, "Metadata", dict, where)
    results = _field(data, "Results", list, where)
    unit = _field(metadata, "TimeUnit", str, f"{where}: Metadata")
    if unit not in KTT_TIME_UNITS:
        raise UserError(f"{where}: Metadata 'TimeUnit' must be one of {', '.join(KTT_TIME_UNITS)}, got {_short(unit)}")
    if not results:
        raise UserError(f"{where}: KTT output with no results")
    keys: list[str] = []
    records: dict[tuple, Record] = {}
    for at, entry, pairs in _results(results, where, "Configuration", list):
        config = {}
        for pair in pairs:
            if not isinstance(pair, dict):
                raise UserError(f"{at}: 'Configuration' must hold objects, got {_short(pair)}")
            name = _field(pair, "Name", str, f"{at}: Configuration")
            if name is None or "Value" not in pair:
                raise UserError(f"{at}: a Configuration entry needs a 'Name' and a 'Value', got {_short(pair)}")
            config[name] = pair["Value"]
        keys = keys or list(config)
        key = _config_key(config, keys, f"{at}: Configuration")
        status = _field(entry, "Status", str, at)
        if status is None:
            raise UserError(f"{at} has no 'Status'")
        if status == "Ok":
            duration = _field(entry, "TotalDuration", (int, float), at)
            if duration is None:
                raise UserError(f"{at}: status Ok with no 'TotalDuration'")
            record = Record("ok", _time(duration * KTT_TIME_UNITS[unit], f"{at}: 'TotalDuration'"))
        else:
            record = Record(KTT_STATUSES.get(status, "launch_error"), attrs={"reason": status})
        if key not in records or _rank(record) < _rank(records[key]):
            records[key] = record
    kernel = _field(results[0], "KernelName", str, f"{where}: result 0", "")
    device = _field(metadata, "Device", str, f"{where}: Metadata", "")
    return Recording(path, "ktt", _recorded_axes(keys, records), records, device, kernel)


def _results(results: list, where: str, config_field: str, kind: type) -> Iterator[tuple[str, dict, Any]]:
    """Each result of a T4 or KTT file as (where it is, the result, its configuration): one line for a
    result that is not an object or has no configuration."""
    for i, entry in enumerate(results):
        at = f"{where}: result {i}"
        if not isinstance(entry, dict):
            raise UserError(f"{at} is not an object")
        config = _field(entry, config_field, kind, at)
        if not config:
            raise UserError(f"{at} has no {config_field!r}")
        yield at, entry, config


def _recorded_axes(keys: list[str], records: dict[tuple, Record]) -> dict[str, list[Value]]:
    """Each define's values as the recorded configs hold them, in order (numbers, then names)."""
    return {k: sorted({key[i] for key in records}, key=lambda v: (isinstance(v, str), v)) for i, k in enumerate(keys)}


#: why a config of the recording's product is not in its valid set (the replay spec's check)
NOT_RECORDED = "not in the recording (restricted)"
RECORDED_INVALID = "recorded as invalid"


def make_replay_spec(recording: Recording) -> KernelSpec:
    """A kernel spec whose space is the recording's and whose model is 'was it recorded'."""

    class ReplaySpec(KernelSpec):
        name = recording.kernel or recording.path.name.split(".")[0]
        params = {a: v[0] for a, v in recording.axes.items()}

        def check(self, config, problem):
            record = recording.lookup(config)
            if record is None:
                return NOT_RECORDED
            if record.status == "invalid":
                return RECORDED_INVALID
            return None

        def source_hash(self) -> str:
            return recording.digest()

    spec = ReplaySpec(recording.path)
    return spec


def recording_space(recording: Recording) -> Space:
    """The space a recording carries: its axes, every recorded config that ran valid.

    The valid set is read off the records, in the order of the axes' product (as checking the
    product finds it), so a cache whose product runs to millions (Kernel Tuner's hotspot: 4.4
    million, 83 thousand valid) costs what it holds."""
    return Space(make_replay_spec(recording), {}, recording.axes, list(recording.axes), [], known=recorded_valid(recording))


def recorded_valid(recording: Recording) -> Enumeration:
    """What the replay spec's check would find over the recording's product, from its records."""
    position = [{value: i for i, value in enumerate(values)} for values in recording.axes.values()]
    in_product = {}
    for key, record in recording.records.items():
        try:
            in_product[tuple(index[v] for index, v in zip(position, key, strict=True))] = (key, record.status)
        except KeyError:  # a value the header does not list: outside the product
            continue
    names = list(recording.axes)
    found = Enumeration(valid=[dict(zip(names, key, strict=True)) for _, (key, status) in sorted(in_product.items())
                               if status != "invalid"])
    recorded_invalid = len(in_product) - len(found.valid)
    not_recorded = math.prod(len(v) for v in recording.axes.values()) - len(in_product)
    for reason, count in ((NOT_RECORDED, not_recorded), (RECORDED_INVALID, recorded_invalid)):
        if count:
            found.invalid[reason] = count
            found.invalid_examples[reason] = reason
    return found


class ReplayEvaluator(Evaluator):
    """Looks a config up instead of running it; replays recorded times block by block."""

    kind = "replay"

    def __init__(self, recording: Recording, block: int = 10, ahead: int = 0):
        self.recording = recording
        self.block = block
        #: trials asked beyond the one measured, as a GPU run with that many compile processes asks them
        #: (a benchmark of what a GPU run's search sees; a replay alone asks each as it is measured)
        self._ahead = ahead

    @property
    def ahead(self) -> int:
        return self._ahead

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


def recording_source(path: str | Path) -> Source:
    """A recording of another GPU or shape as a warm start's source (:mod:`tuner.search.warm_start`):
    a config that ran, as a complete trial with its time; one that failed or was stopped, as a pruned
    trial with its status (and the time it was stopped at, if recorded). A config recorded as invalid
    says nothing of another space and is left out."""
    try:
        recording = load_recording(path)
    except UserError as exc:
        raise UserError(f"--warm-start: {exc}") from None
    distributions = space_distributions(recording.axes)
    trials: list[FrozenTrial] = []
    for key, record in recording.records.items():
        if record.status == "invalid":
            continue
        complete = record.status in COMPLETE_STATUSES and record.ms is not None
        trials.append(finished_trial(TrialState.COMPLETE if complete else TrialState.PRUNED, record.ms,
                                     dict(zip(recording.axes, key, strict=True)), distributions,
                                     {"status": record.status}, number=len(trials)))
    return Source(recording.path.name, trials, "; ".join(recording.notes), kernel=recording.kernel)
