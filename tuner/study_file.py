"""Study files (``studies/*.toml``): parse and validate into a :class:`StudyConfig`.

Every error is one line that names the file and the key, and says what to fix.
"""

from __future__ import annotations

import re
import tomllib
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from tuner.compile import SUPPORTED_ARCHS
from tuner.errors import UserError
from tuner.spec import Value, as_define_value, validate_define

SAMPLERS = ("tpe", "gp", "random", "grid")
MODES = ("joint", "tiered")

_SECTIONS = {
    "study": {"name", "kernel", "arch", "shape", "description"},
    "problem": None,  # free-form: the kernel's problem keys
    "space": {"tier1", "tier2"},
    "fixed": None,
    "search": {"sampler", "mode", "trials", "timeout_min", "seed", "pruner", "pruner_margin", "pruner_min_blocks", "start"},
    "measure": {"warmup", "warmup_ms", "repeats", "block", "timeout_s", "check_rows", "max_regs", "reject_spills"},
    "baseline": None,  # e.g. cublas = 1.04 (ms), shown in reports
}


@dataclass
class SearchSettings:
    sampler: str = "tpe"
    mode: str = "joint"
    trials: int | None = 100
    timeout_min: float | None = None
    seed: int | None = None
    pruner: bool = True
    pruner_margin: float = 0.10
    pruner_min_blocks: int = 2
    start: list[dict[str, Value]] = field(default_factory=list)  # known configs tried first (axes not named: defaults)


@dataclass
class MeasureSettings:
    warmup: int = 5
    warmup_ms: float = 100.0  # and at least this long: clocks ramp up under load
    repeats: int = 50
    block: int = 10
    timeout_s: float = 30.0
    check_rows: int = 64
    max_regs: int = 255
    reject_spills: bool = True


@dataclass
class StudyConfig:
    """A study as its file describes it."""

    path: Path | None
    name: str
    kernel: Path
    arch: str
    problem: dict[str, Value]
    tier1: dict[str, list[Value]]
    tier2: dict[str, list[Value]] = field(default_factory=dict)
    fixed: dict[str, Value] = field(default_factory=dict)
    search: SearchSettings = field(default_factory=SearchSettings)
    measure: MeasureSettings = field(default_factory=MeasureSettings)
    shape: str = ""
    baseline: dict[str, float] = field(default_factory=dict)

    @property
    def axes(self) -> dict[str, list[Value]]:
        return {**self.tier1, **self.tier2}


def load_study(path: str | Path) -> StudyConfig:
    path = Path(path)
    if not path.is_file():
        raise UserError(f"{path}: study file not found")
    try:
        data = tomllib.loads(path.read_text())
    except tomllib.TOMLDecodeError as exc:
        raise UserError(f"{path}: not valid TOML: {exc}") from None
    except UnicodeDecodeError:
        raise UserError(f"{path}: not a text file (expected TOML)") from None
    return parse_study(data, path)


def parse_study(data: dict[str, Any], path: Path | None = None) -> StudyConfig:
    where = str(path) if path else "<study>"

    def fail(key: str, message: str) -> UserError:
        return UserError(f"{where}: [{key}] {message}")

    for section, value in data.items():
        if section not in _SECTIONS:
            raise fail(section, f"unknown section; expected one of {', '.join(_SECTIONS)}")
        if not isinstance(value, dict):
            raise fail(section, "must be a table")
        allowed = _SECTIONS[section]
        if allowed is not None:
            for key in value:
                if key not in allowed:
                    raise fail(f"{section}.{key}", f"unknown key; expected one of {', '.join(sorted(allowed))}")

    study = data.get("study")
    if not study:
        raise fail("study", "missing: give name, kernel and arch")
    name = _get(study, "name", str, f"{where}: [study.name]", required=True)
    if not name.strip() or any(c in name for c in "/\\\n"):
        raise fail("study.name", f"{name!r} must be non-empty without slashes or newlines")
    kernel_rel = _get(study, "kernel", str, f"{where}: [study.kernel]", required=True)
    base = path.parent if path else Path.cwd()
    kernel = (base / kernel_rel).resolve()
    if kernel.suffix != ".py" or not kernel.is_file():
        raise fail("study.kernel", f"{kernel_rel!r}: no kernel spec (.py) at {kernel}")
    arch = _get(study, "arch", str, f"{where}: [study.arch]", required=True)
    if arch not in SUPPORTED_ARCHS:
        raise fail("study.arch", f"{arch!r} unknown; expected one of {', '.join(SUPPORTED_ARCHS)}")
    # default shape: the name without its arch suffix ("patch_embed_sm90a" -> "patch_embed")
    shape = _get(study, "shape", str, f"{where}: [study.shape]") or re.sub(r"_sm\d+a?(_.*)?$", "", name)

    problem: dict[str, Value] = {}
    for key, value in data.get("problem", {}).items():
        value = as_define_value(value)
        validate_define(key, value, f"{where}: [problem.{key}]")
        problem[key] = value

    space = data.get("space", {})
    tier1 = _axes(space.get("tier1", {}), f"{where}: [space.tier1", fail)
    tier2 = _axes(space.get("tier2", {}), f"{where}: [space.tier2", fail)
    if not tier1 and not tier2:
        raise fail("space.tier1", "no axes: give at least one define with a list of values")
    for key in tier1.keys() & tier2.keys():
        raise fail(f"space.tier2.{key}", "already an axis in tier1; list it once")

    fixed: dict[str, Value] = {}
    for key, value in data.get("fixed", {}).items():
        value = as_define_value(value)
        validate_define(key, value, f"{where}: [fixed.{key}]")
        if key in tier1 or key in tier2:
            raise fail(f"fixed.{key}", "is also a search axis; keep it in one place")
        fixed[key] = value

    s = data.get("search", {})
    search = SearchSettings(
        sampler=_choice(s, "sampler", SAMPLERS, "tpe", where, "search"),
        mode=_choice(s, "mode", MODES, "joint", where, "search"),
        trials=_positive(s, "trials", int, 100, where, "search"),
        timeout_min=_positive(s, "timeout_min", (int, float), None, where, "search"),
        seed=_get(s, "seed", int, f"{where}: [search.seed]"),
        pruner=_get(s, "pruner", bool, f"{where}: [search.pruner]", default=True),
        pruner_margin=_positive(s, "pruner_margin", (int, float), 0.10, where, "search"),
        pruner_min_blocks=_positive(s, "pruner_min_blocks", int, 2, where, "search"),
        start=_start_configs(s.get("start", []), {**tier1, **tier2}, fail),
    )
    if search.mode == "tiered" and not (tier1 and tier2):
        raise fail("search.mode", "'tiered' needs axes in both [space.tier1] and [space.tier2]; use mode = \"joint\" for one tier")

    m = data.get("measure", {})
    measure = MeasureSettings(
        warmup=_positive(m, "warmup", int, 5, where, "measure", allow_zero=True),
        warmup_ms=_positive(m, "warmup_ms", (int, float), 100.0, where, "measure", allow_zero=True),
        repeats=_positive(m, "repeats", int, 50, where, "measure"),
        block=_positive(m, "block", int, 10, where, "measure"),
        timeout_s=_positive(m, "timeout_s", (int, float), 30.0, where, "measure"),
        check_rows=_positive(m, "check_rows", int, 64, where, "measure"),
        max_regs=_positive(m, "max_regs", int, 255, where, "measure"),
        reject_spills=_get(m, "reject_spills", bool, f"{where}: [measure.reject_spills]", default=True),
    )
    if measure.block > measure.repeats:
        raise fail("measure.block", f"{measure.block} > repeats={measure.repeats}; a block is a slice of the repeats")

    baseline = {}
    for key, value in data.get("baseline", {}).items():
        if isinstance(value, bool) or not isinstance(value, (int, float)) or value <= 0:
            raise fail(f"baseline.{key}", "must be a positive time in ms")
        baseline[key] = float(value)

    return StudyConfig(path, name, kernel, arch, problem, tier1, tier2, fixed, search, measure, shape, baseline)


def _axes(table: Any, prefix: str, fail) -> dict[str, list[Value]]:
    if not isinstance(table, dict):
        raise UserError(f"{prefix}] must be a table of NAME = [values]")
    axes: dict[str, list[Value]] = {}
    for key, values in table.items():
        where = f"{prefix}.{key}]"
        if not isinstance(values, list):
            raise UserError(f"{where} must be a list of values, e.g. {key} = [1, 2]")
        if not values:
            raise UserError(f"{where} is empty; give at least one value")
        converted = [as_define_value(v) for v in values]
        for v in converted:
            validate_define(key, v, where)
        if len(set(converted)) != len(converted):
            raise UserError(f"{where} lists a value twice")
        axes[key] = converted
    return axes


def _start_configs(entries, axes: dict[str, list[Value]], fail) -> list[dict[str, Value]]:
    """[search] start = [{BLOCK_N = 192, ...}, ...]: each entry names search axes and values they take."""
    if not isinstance(entries, list):
        raise fail("search.start", "must be a list of inline tables, e.g. start = [{BLOCK_N = 192}]")
    configs = []
    for i, entry in enumerate(entries):
        if not isinstance(entry, dict) or not entry:
            raise fail(f"search.start #{i + 1}", "must be a non-empty inline table of axis = value")
        config = {}
        for key, value in entry.items():
            value = as_define_value(value)
            if key not in axes:
                raise fail(f"search.start #{i + 1}.{key}", "is not a search axis of [space.tier1] / [space.tier2]")
            if value not in axes[key]:
                raise fail(f"search.start #{i + 1}.{key}", f"{value!r} is not one of the axis values {axes[key]}")
            config[key] = value
        configs.append(config)
    return configs


def _get(table: dict, key: str, kind, where: str, required: bool = False, default=None):
    if key not in table:
        if required:
            raise UserError(f"{where} missing")
        return default
    value = table[key]
    if kind is int and isinstance(value, bool) or not isinstance(value, kind):
        name = kind.__name__ if isinstance(kind, type) else "number"
        raise UserError(f"{where} must be a {name}, got {value!r}")
    return value


def _choice(table, key, choices, default, where, section):
    value = _get(table, key, str, f"{where}: [{section}.{key}]", default=default)
    if value not in choices:
        raise UserError(f"{where}: [{section}.{key}] {value!r} unknown; expected one of {', '.join(choices)}")
    return value


def _positive(table, key, kind, default, where, section, allow_zero=False):
    value = _get(table, key, kind, f"{where}: [{section}.{key}]", default=default)
    if value is None:
        return None
    if isinstance(value, bool) or value < 0 or (value == 0 and not allow_zero):
        raise UserError(f"{where}: [{section}.{key}] must be {'>= 0' if allow_zero else '> 0'}, got {value!r}")
    return value
