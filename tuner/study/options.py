"""Every setting of a run, in one table: study-file keys, command-line flags, worker hand-over.

A setting is one field of :class:`SearchSettings` ([search] in a study file),
:class:`MeasureSettings` ([measure]) or :class:`RunOptions` (command line only). The field's
metadata says its help, its allowed values and which commands take it as a flag. From
that table come:

* the validation of a study file's [search] and [measure] keys (:func:`from_toml`);
* the flags of ``tuner run``, ``worker``, ``grid`` and ``check`` (:func:`add_flags`,
  :func:`from_flags`), checked by the same rules as the study-file key;
* what ``tuner run --workers N`` hands each worker process (:func:`encode`,
  :func:`decode`): the settings as JSON in an environment variable, not re-spelled flags.

Adding a setting is one field here; adding a sampler is its name in :data:`SAMPLERS` and its
maker in :data:`tuner.search.sampler.PROPOSERS` (a test holds the two together).
"""

from __future__ import annotations

import argparse
import dataclasses
import json
import math
import re
import types
import typing
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from tuner.contract.kernel_spec import Value, plain_int
from tuner.errors import UserError
from tuner.measurement.paired import FEWEST_FOR_INTERVAL

#: the environment variable that carries a worker's settings (:func:`encode`)
ENV = "TUNER_OPTIONS"
#: commands that run a search and take the search settings as flags
SEARCH_COMMANDS = ("run", "worker")
SEED_MAX = 2**32 - 1  # numpy's and Optuna's samplers take seeds below 2**32
#: the base samplers ``[search] sampler`` names (made by :data:`tuner.search.sampler.PROPOSERS`)
SAMPLERS = ("tpe", "gp", "random", "grid")
MODES = ("joint", "tiered")
PRUNE_BY = ("sign", "margin")
REGIMES = ("sustained", "burst")
#: the shortest energy window: NVML's counter steps every 100 ms on an H200, and a window needs 3 steps or more
ENERGY_S_MIN = 0.5
VALUES = ("ratio", "ms")


@dataclass(frozen=True)
class Option:
    """One setting: a row of the table."""

    name: str  # the study-file key and, with dashes, the flag: timeout_min -> --timeout-min
    section: str  # "search" or "measure" (study-file tables) or "run" (command line only)
    kind: type  # int, float, bool, str, Path or list (a repeatable flag of strings)
    optional: bool  # None is allowed and means "not set"
    default: Any
    help: str
    choices: tuple[str, ...] | None = None
    minimum: float | None = None  # inclusive
    above: float | None = None  # exclusive lower bound
    maximum: float | None = None  # inclusive
    off: float | None = None  # a value outside the bounds that turns the option off (energy_s 0)
    #: ``off`` is the study file's alone: the flag must be within the bounds (the file's confirm_top 0 turns
    #: the confirmation after a run off; ``tuner confirm --top 0`` would confirm nothing)
    off_in_file_only: bool = False
    commands: tuple[str, ...] = ()  # commands that take it as a flag
    flag: str | None = None  # the flag's spelling when it is not --NAME (e.g. --no-pruner)
    metavar: str | None = None
    toml: bool = True  # a study-file key (sections search and measure)
    to_workers: bool = True  # handed to the worker processes of ``tuner run --workers N``

    @property
    def flags(self) -> list[str]:
        return [self.flag or "--" + self.name.replace("_", "-")]

    def check(self, value: Any, where: str, flag: bool = False) -> Any:
        """``value`` as this option's type, or a :class:`UserError` that starts with ``where``
        (``flag``: the value of the command-line flag, not of the study-file key)."""
        if value is None:
            if self.optional:
                return None
            raise UserError(f"{where} must be set")
        kind = self.kind
        if kind is list:  # of names (a path names a file: a warm start's recording)
            if not isinstance(value, list) or not all(isinstance(v, (str, Path)) for v in value):
                raise UserError(f"{where} must be a list of names, got {value!r}")
            return [str(v) for v in value]
        if kind is Path:
            if not isinstance(value, (str, Path)):
                raise UserError(f"{where} must be a path, got {value!r}")
            return Path(value)
        value = plain_int(value)  # a notebook's np.int64(20)
        if kind is float and isinstance(value, int) and not isinstance(value, bool):
            value = float(value)
        if not isinstance(value, kind) or (kind is not bool and isinstance(value, bool)):
            raise UserError(f"{where} must be {_NOUN[kind]}, got {value!r}")
        if self.choices is not None and value not in self.choices:
            raise UserError(f"{where} {value!r} unknown; expected one of {', '.join(self.choices)}")
        if isinstance(value, int | float):  # the kinds that have bounds
            self._check_bounds(value, where, flag)
        return value

    def _check_bounds(self, value: float, where: str, flag: bool) -> None:
        if not math.isfinite(value):
            raise UserError(f"{where} must be a finite number, got {value!r}")
        off_value = None if flag and self.off_in_file_only else self.off
        if off_value is not None and value == off_value:
            return
        off = "" if off_value is None else f" (or {_num(off_value)}: off)"
        if self.above is not None and value <= self.above:
            raise UserError(f"{where} must be > {_num(self.above)}{off}, got {value!r}")
        if self.minimum is not None and value < self.minimum:
            raise UserError(f"{where} must be >= {_num(self.minimum)}{off}, got {value!r}")
        if self.maximum is not None and value > self.maximum:
            raise UserError(f"{where} must be <= {_num(self.maximum)}, got {value!r}")

    def parse_flag(self, text: str) -> Any:
        """A flag's text as this option's type (bools and lists come parsed from argparse)."""
        where = self.flags[0]
        if self.kind in (int, float):
            try:
                return self.kind(text)
            except ValueError:
                raise UserError(f"{where} must be {_NOUN[self.kind]}, got {text!r}") from None
        return text


_NOUN = {int: "an integer", float: "a number", bool: "true or false", str: "a string"}


def _num(x: float) -> str:
    return str(int(x)) if float(x).is_integer() else str(x)


def option(default: Any, help: str, **meta: Any) -> Any:
    """A settings field whose metadata is its row of the option table."""
    if isinstance(default, list):
        return field(default_factory=lambda: list(default), metadata={"option": meta, "help": help})
    return field(default=default, metadata={"option": meta, "help": help})


@dataclass
class SearchSettings:
    """[search] of a study file; the flags of ``tuner run`` / ``tuner worker``."""

    sampler: str = option("tpe", "the base sampler; every proposal is moved onto a valid, untried config",
                          choices=SAMPLERS, commands=SEARCH_COMMANDS)
    mode: str = option("joint", "joint = all axes at once, tiered = tier 1, then tier 2 on the tier-1 winner",
                       choices=MODES, commands=(*SEARCH_COMMANDS, "grid"))
    trials: int | None = option(100, "trials the study should reach, all workers together (resume counts what is stored)",
                                minimum=1, commands=SEARCH_COMMANDS)
    timeout_min: float | None = option(None, "stop after this many minutes", above=0, commands=SEARCH_COMMANDS)
    seed: int | None = option(None, "sampler seed (worker i of --workers N uses SEED + i)", minimum=0,
                              maximum=SEED_MAX, commands=SEARCH_COMMANDS)
    pruner: bool = option(True, "measure every config to the end", commands=SEARCH_COMMANDS, flag="--no-pruner")
    prune_by: str = option("sign", "sign = stop when a sign test on the pair ratios says slower than the best; "
                           "margin = when the running median is pruner_margin over the best", choices=PRUNE_BY,
                           commands=SEARCH_COMMANDS)
    pruner_margin: float = option(0.10, "prune a config whose running median is this much slower than the best", above=0)
    pruner_min_blocks: int = option(2, "blocks measured before a config can be pruned", minimum=1)
    objectives: list[str] = option(["time"], 'what to minimise: ["time"], or ["time", "energy"] for the Pareto '
                                   "front of time and energy per launch (needs [measure] energy_s; default then 1 s)")
    start: list[dict[str, Value]] = option([], "known configs tried first (axes not named take their defaults)")
    compile_ahead: int | None = option(None, "at most this many configs proposed and compiled ahead of the one "
                                       "measured, in as many processes; as many as keep the GPU fed are, up to one per "
                                       "CPU core where unset (0: compile each when it is measured)",
                                       minimum=0, commands=SEARCH_COMMANDS)
    confirm_top: int = option(5, "re-measure this many best configs against each other (at least 2; the study "
                                 "file's key: after each GPU run, 0 never)",
                              minimum=2, off=0, off_in_file_only=True, commands=("confirm",), flag="--top")
    confirm_rounds: int = option(100, "round-robin rounds of a confirmation (at least 6: fewer give the winner no "
                                      "95 % interval)", minimum=FEWEST_FOR_INTERVAL, commands=("confirm",),
                                 flag="--rounds")


@dataclass
class MeasureSettings:
    """[measure] of a study file: how one config is timed."""

    warmup: int = option(5, "untimed rounds (reference + candidate) before timing", minimum=0)
    warmup_ms: float = option(100.0, "and at least this long: clocks ramp up under load", minimum=0)
    repeats: int = option(200, "at most this many pairs (a candidate launch, a reference launch)", minimum=1)
    min_pairs: int = option(20, "at least this many pairs", minimum=1)
    block: int = option(10, "pairs per block; after each block the pruner may stop the trial", minimum=1)
    ci_target: float = option(0.0025, "stop once the ratio's 95 % interval is within +-this (relative)", minimum=0)
    reference: dict[str, Value] | str | None = option(
        None, 'the config every trial is paired with (axes not named: defaults), or "baseline" (the spec\'s); '
        "default: the first [search] start config, else the fastest of the first reference_probe configs")
    reference_probe: int = option(8, "a study with neither reference nor start: its first run measures this many "
                                  "configs against the spec's defaults, takes the fastest that measured ok as the "
                                  "study's reference and stores every value relative to it (0: keep the defaults)",
                                  minimum=0, commands=("run",))
    value: str = option("ratio", "ratio = candidate / reference; ms = that ratio x the reference's time in the "
                        "study's first session", choices=VALUES)
    regime: str = option("sustained", "sustained = warm GPU at its steady clocks; burst = rest idle_s, then few pairs",
                         choices=REGIMES)
    idle_s: float = option(2.0, "burst regime: seconds the GPU rests before each trial", minimum=0)
    energy_s: float = option(0.0, "after timing, run the candidate and then the reference alone this long each and "
                             "store energy per launch and power with their uncertainty (0: none; the energy counter "
                             "steps every few tens of ms: 0.5 s or more, 1 s advised)", minimum=ENERGY_S_MIN, off=0)
    timeout_s: float = option(30.0, "a launch that takes longer is a hang: the worker is restarted", above=0)
    check_rows: int | None = option(None, "output rows of the sampled CPU check (default: the kernel spec's)", minimum=1)
    max_regs: int = option(255, "reject configs that need more registers per thread", minimum=1)
    reject_spills: bool = option(True, "reject configs that spill registers to local memory")
    reject_serialized_wgmma: bool = option(True, "reject builds whose wgmma instructions ptxas serializes (its "
                                           "'Potential Performance Loss' note: each wgmma waits for the last)")


@dataclass
class RunOptions:
    """Command-line settings of one run (no study-file key)."""

    study_name: str | None = option(None, "the study's name in the storage (default: the study file's)",
                                    commands=(*SEARCH_COMMANDS, "grid", "confirm"))
    replay: Path | None = option(None, "evaluate against a recorded table (our CSV, a Kernel Tuner cache or T4 file, KTT output) instead of a GPU",
                                 commands=(*SEARCH_COMMANDS, "grid"), metavar="FILE")
    workers: int = option(1, "worker processes, one per GPU (needs a journal or Postgres storage)",
                          minimum=1, commands=("run",), to_workers=False)
    warm_start: list[str] = option([], "start from an earlier study in the same storage, or a recording of another GPU "
                                       "(Kernel Tuner cache, KTT output, our CSV export): its best configs first, its whole history "
                                       "as the prior (repeatable)", commands=SEARCH_COMMANDS, metavar="STUDY|FILE")
    warm_start_top: int = option(5, "configs a warm start queues, shared among its sources", minimum=1, commands=SEARCH_COMMANDS,
                                 metavar="N")
    accept_mismatch: bool = option(False, "use a study recorded under another GPU, kernel source, NVRTC or problem "
                                   "all the same", commands=(*SEARCH_COMMANDS, "grid", "confirm", "profile"))
    cache_dir: Path | None = option(None, "compile cache (default ~/.cache/tuner/cubin or $TUNER_CACHE_DIR)",
                                    commands=(*SEARCH_COMMANDS, "grid", "check", "confirm", "profile"))
    artifacts: Path | None = option(None, "keep each trial's compile log as an Optuna artifact in this folder",
                                    commands=(*SEARCH_COMMANDS, "grid"))
    jobs: int | None = option(None, "compile processes (default: CPU count)", minimum=1, commands=("check",),
                              to_workers=False)


_SECTIONS: dict[str, type] = {"search": SearchSettings, "measure": MeasureSettings, "run": RunOptions}


def _rows() -> tuple[Option, ...]:
    rows = []
    for section, cls in _SECTIONS.items():
        hints = typing.get_type_hints(cls, globalns={**globals(), "Value": Value})
        for f in dataclasses.fields(cls):
            hint = hints[f.name]
            args = typing.get_args(hint) if isinstance(hint, types.UnionType) else ()
            optional = type(None) in args
            kind = next(a for a in args if a is not type(None)) if args else hint
            kind = typing.get_origin(kind) or kind
            default = f.default_factory() if f.default_factory is not dataclasses.MISSING else f.default
            meta = dict(f.metadata["option"])
            meta.setdefault("toml", section != "run")
            rows.append(Option(f.name, section, kind, optional, default, f.metadata["help"], **meta))
    return tuple(rows)


#: the option table: one row per setting
OPTIONS: tuple[Option, ...] = _rows()
BY_NAME: dict[str, Option] = {o.name: o for o in OPTIONS}


#: flags of the commands that are no option of the table, by the Python API's keyword
_API_KEYWORDS = {"--storage": "storage", "--study": "study"}
_FLAG = re.compile(r"--[a-z][a-z0-9-]*(?: (?:[A-Z][A-Z_.]*|\d+)\b)?")


def in_api_terms(message: str) -> str:
    """A message that names command-line flags, as a Python caller writes them: ``--study-name NEW``
    -> ``study_name=NEW``, ``--accept-mismatch`` -> ``accept_mismatch=True``, ``--replay:`` -> ``replay:``."""
    by_flag = {o.flags[0]: o for o in OPTIONS}

    def keyword(match: re.Match[str]) -> str:
        flag, _, placeholder = match.group(0).partition(" ")
        opt = by_flag.get(flag)
        name = opt.name if opt is not None else _API_KEYWORDS.get(flag)
        if name is None:
            return match.group(0)
        if placeholder:
            return f"{name}={placeholder}"
        if opt is not None and opt.kind is bool:
            return f"{name}={not flag.startswith('--no-')}"
        return name

    return _FLAG.sub(keyword, message)


def section(name: str) -> tuple[Option, ...]:
    return tuple(o for o in OPTIONS if o.section == name)


# -- study files ---------------------------------------------------------------------------


def from_toml(section_name: str, table: dict[str, Any], where: str) -> dict[str, Any]:
    """A study file's [search] or [measure] table, checked: ``{key: value}`` of the keys given.

    Keys with their own structure (``start``) are returned as given, for the caller to check.
    """
    rows = {o.name: o for o in section(section_name) if o.toml}
    values = {}
    for key, value in table.items():
        opt = rows.get(key)
        if opt is None:
            raise UserError(f"{where}: [{section_name}.{key}] unknown key; expected one of {', '.join(sorted(rows))}")
        structured = opt.kind in (list, dict)  # checked by the caller against the study's axes
        values[key] = value if structured else opt.check(value, f"{where}: [{section_name}.{key}]")
    return values


# -- command line --------------------------------------------------------------------------


def add_flags(parser: argparse.ArgumentParser, command: str) -> None:
    """The flags of ``command``, from the table. Values stay text here: :func:`from_flags`
    converts and checks them, so a bad number gets the same one-line error as a bad study-file key."""
    for opt in OPTIONS:
        if command not in opt.commands:
            continue
        kwargs: dict[str, Any] = {"dest": opt.name, "default": argparse.SUPPRESS, "help": opt.help}
        if opt.kind is bool:
            kwargs["action"] = "store_const"
            kwargs["const"] = not opt.default
        elif opt.kind is list:
            kwargs["action"] = "append"
            kwargs["metavar"] = opt.metavar
        else:
            kwargs["metavar"] = opt.metavar or (f"{{{','.join(opt.choices)}}}" if opt.choices else opt.name.upper())
            if opt.toml:
                # (an option without a fixed default says in its own help what it does unset)
                kwargs["help"] += " (default: the study file's" + (f", else {opt.default})" if opt.default is not None else ")")
            elif opt.default is not None:
                kwargs["help"] += f" (default {opt.default})"
        kwargs["help"] = kwargs["help"].replace("%", "%%")  # argparse formats help with %: "95 % interval" is text
        parser.add_argument(*opt.flags, **kwargs)


def from_flags(args: argparse.Namespace, command: str) -> dict[str, Any]:
    """The table's flags of ``command`` given on the command line, converted and checked: ``{name: value}``."""
    values = {}
    for name, raw in vars(args).items():
        opt = BY_NAME.get(name)
        if opt is None or command not in opt.commands:
            continue
        value = opt.parse_flag(raw) if isinstance(raw, str) else raw
        values[name] = opt.check(value, opt.flags[0], flag=True)
    return values


# -- worker hand-over ----------------------------------------------------------------------


def encode(values: dict[str, Any]) -> str:
    """The settings a worker process gets (those marked ``to_workers``), as JSON."""
    out = {}
    for name, value in values.items():
        opt = BY_NAME[name]
        if opt.to_workers:
            out[name] = str(value) if isinstance(value, Path) else value
    return json.dumps(out)


def decode(text: str) -> dict[str, Any]:
    """:func:`encode`'s JSON, checked by the table's rules."""
    try:
        data = json.loads(text)
    except ValueError:
        raise UserError(f"${ENV} is not JSON: unset it, or start workers with `tuner run --workers N`") from None
    if not isinstance(data, dict):
        raise UserError(f"${ENV} must be a JSON object of settings")
    values = {}
    for name, value in data.items():
        opt = BY_NAME.get(name)
        if opt is None:
            raise UserError(f"${ENV}: unknown setting {name!r}")
        values[name] = opt.check(value, f"${ENV} {name}")
    return values


# -- merging -------------------------------------------------------------------------------


def apply(base: Any, values: dict[str, Any]) -> Any:
    """``base`` (a settings dataclass) with the ``values`` that belong to its section."""
    names = {f.name for f in dataclasses.fields(base)}
    return dataclasses.replace(base, **{k: v for k, v in values.items() if k in names})


def run_options(values: dict[str, Any]) -> RunOptions:
    return apply(RunOptions(), values)
