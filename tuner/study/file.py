"""Study files (``studies/*.toml``): parse and validate into a :class:`StudyConfig`.

Every error is one line that names the file and the key, and says what to fix.
"""

from __future__ import annotations

import re
import tomllib
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from tuner.contract.arch import NATIVE, limits
from tuner.contract.kernel_spec import Value, as_define_value, validate_define
from tuner.contract.precision import parse_precision
from tuner.errors import UserError
from tuner.study import options
from tuner.study.options import MeasureSettings, SearchSettings

_SECTIONS = {
    "study": {"name", "kernel", "arch", "shape", "description", "precision"},
    "problem": None,  # free-form: the kernel's problem keys
    "space": {"tier1", "tier2"},
    "fixed": None,
    "search": None,  # keys and their rules: tuner.study.options
    "measure": None,
    "baseline": None,  # e.g. cublas = 1.04 (ms), shown in reports
}


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
    #: "fast", "precise" or an error budget (tuner.contract.precision): the full-output check's tolerance
    precision: str | float = "fast"
    #: the [search] and [measure] keys the file sets (the others take defaults, which a kernel may change)
    given: frozenset[str] = frozenset()

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
        if path.suffix in (".py", ".cu", ".cuh", ".h"):
            raise UserError(f"{path}: a {path.suffix} file, not a study file: give the study's .toml") from None
        raise UserError(f"{path}: not valid TOML: {exc}") from None
    except UnicodeDecodeError:
        raise UserError(f"{path}: not a text file (expected TOML)") from None
    return parse_study(data, path)


def parse_study(data: dict[str, Any], path: Path | None = None) -> StudyConfig:
    where = str(path) if path else "<study>"

    def fail(key: str, message: str) -> UserError:
        return UserError(f"{where}: [{key}] {message}")

    _check_sections(data, fail)
    study = data.get("study")
    if not study:
        raise fail("study", "missing: give name, kernel and arch")
    name, kernel, arch, shape = _study_section(study, path, where, fail)
    problem = _defines(data.get("problem", {}), f"{where}: [problem")

    space = data.get("space", {})
    tier1 = _axes(space.get("tier1", {}), f"{where}: [space.tier1", fail)
    tier2 = _axes(space.get("tier2", {}), f"{where}: [space.tier2", fail)
    if not tier1 and not tier2:
        raise fail("space.tier1", "no axes: give at least one define with a list of values")
    for key in tier1.keys() & tier2.keys():
        raise fail(f"space.tier2.{key}", "already an axis in tier1; list it once")
    axes = {**tier1, **tier2}
    fixed = _defines(data.get("fixed", {}), f"{where}: [fixed")
    for key in fixed.keys() & axes.keys():
        raise fail(f"fixed.{key}", "is also a search axis; keep it in one place")

    search = _search_section(data.get("search", {}), axes, where, fail)
    if search.mode == "tiered" and not (tier1 and tier2):
        raise fail("search.mode", "'tiered' needs axes in both [space.tier1] and [space.tier2]; use mode = \"joint\" for one tier")
    measure = _measure_section(data.get("measure", {}), axes, where, fail)

    baseline = {}
    for key, value in data.get("baseline", {}).items():
        if isinstance(value, bool) or not isinstance(value, (int, float)) or value <= 0:
            raise fail(f"baseline.{key}", "must be a positive time in ms")
        baseline[key] = float(value)

    precision = parse_precision(study.get("precision", "fast"), f"{where}: [study.precision]")
    given = frozenset(k for k in [*data.get("search", {}), *data.get("measure", {})])
    return StudyConfig(path, name, kernel, arch, problem, tier1, tier2, fixed, search, measure, shape, baseline, precision,
                       given)


def _check_sections(data: dict[str, Any], fail) -> None:
    """Known sections, each a table, holding known keys (``[problem]``, ``[space.*]``: any)."""
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


def _study_section(study: dict[str, Any], path: Path | None, where: str, fail) -> tuple[str, Path, str, str]:
    """``[study]``: its name, the kernel spec's path, the arch and the shape."""
    from tuner.store.storage import check_study_name  # the rule every storage and file name needs

    name = _get(study, "name", str, f"{where}: [study.name]", required=True)
    check_study_name(name, f"{where}: [study.name]")
    kernel_rel = _get(study, "kernel", str, f"{where}: [study.kernel]", required=True)
    base = path.parent if path else Path.cwd()
    try:
        kernel = (base / kernel_rel).resolve()
    except (RuntimeError, OSError) as exc:  # a symlink loop (RuntimeError before Python 3.13)
        raise fail("study.kernel", f"{kernel_rel!r}: cannot be resolved ({exc}): fix the symbolic link") from None
    if kernel.suffix != ".py" or not kernel.is_file():
        hint = ": name the spec (.py) that describes it, not the source" if kernel.suffix == ".cu" and kernel.is_file() else ""
        raise fail("study.kernel", f"{kernel_rel!r}: no kernel spec (.py) at {kernel}{hint}")
    arch = _get(study, "arch", str, f"{where}: [study.arch]") or NATIVE  # the GPU found at run time
    if arch != NATIVE:
        try:
            limits(arch)
        except UserError as exc:
            raise fail("study.arch", str(exc).replace("arch ", "", 1)) from None
    # default shape: the name without its arch suffix ("patch_embed_sm90a" -> "patch_embed")
    shape = _get(study, "shape", str, f"{where}: [study.shape]") or re.sub(r"_sm\d+a?(_.*)?$", "", name)
    return name, kernel, arch, shape


def _defines(table: dict[str, Any], prefix: str) -> dict[str, Value]:
    """``[problem]`` or ``[fixed]``: define = value, each a value a ``-D`` flag can carry."""
    out: dict[str, Value] = {}
    for key, value in table.items():
        value = as_define_value(value, f"{prefix}.{key}]")
        validate_define(key, value, f"{prefix}.{key}]")
        out[key] = value
    return out


def _search_section(table: dict[str, Any], axes: dict[str, list[Value]], where: str, fail) -> SearchSettings:
    values = options.from_toml("search", table, where)
    values["start"] = _start_configs(values.get("start", []), axes, fail)
    if "objectives" in values:
        from tuner.measurement.pareto import check_objectives

        values["objectives"] = check_objectives(values["objectives"], f"{where}: [search.objectives]")
    return options.apply(SearchSettings(), values)


def _measure_section(table: dict[str, Any], axes: dict[str, list[Value]], where: str, fail) -> MeasureSettings:
    values = options.from_toml("measure", table, where)
    values["reference"] = _reference(values.get("reference"), axes, fail)
    measure = options.apply(MeasureSettings(), values)
    # A short study (repeats = 10, say) keeps working with the defaults: they shrink to fit.
    for key in ("block", "min_pairs"):
        if key not in values and getattr(measure, key) > measure.repeats:
            setattr(measure, key, measure.repeats)
    if measure.block > measure.repeats:
        raise fail("measure.block", f"{measure.block} > repeats={measure.repeats}; a block is a slice of the repeats")
    if measure.min_pairs > measure.repeats:
        raise fail("measure.min_pairs", f"{measure.min_pairs} > repeats={measure.repeats} (the most pairs measured)")
    return measure


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
        converted = [as_define_value(v, where) for v in values]
        for v in converted:
            validate_define(key, v, where)
        for i, v in enumerate(converted):
            if v in converted[:i]:
                first = values[converted.index(v)]
                same = f" ({values[i]!r} is {v})" if values[i] != v or first != v else ""
                raise UserError(f"{where} lists a value twice: {v!r}{same}; give each value once")
        axes[key] = converted
    return axes


def check_given_configs(given: dict[str, Any], axes: dict[str, list[Value]]) -> dict[str, Any]:
    """``start`` and ``reference`` given by name (keywords of :func:`tuner.tune`) checked against the
    study's axes as the study file's are: ``given`` with them checked."""
    def fail(key: str, message: str) -> UserError:
        return UserError(f"{key.replace('search.start', 'start').replace('measure.reference', 'reference')}: {message}")

    out = dict(given)
    if "start" in given:
        out["start"] = _start_configs(list(given["start"]), axes, fail)
    if "reference" in given:
        out["reference"] = _reference(given["reference"], axes, fail)
    return out


def _reference(value, axes: dict[str, list[Value]], fail) -> dict[str, Value] | str | None:
    """[measure] reference = {BLOCK_N = 192, ...} (axes not named: defaults) or "baseline"."""
    if value is None or value == "baseline":
        return value
    if isinstance(value, dict):
        return _start_configs([value], axes, lambda key, msg: fail(key.replace("search.start #1", "measure.reference"), msg))[0]
    raise fail("measure.reference", f"{value!r}: give an inline table of axis = value, or \"baseline\"")


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
            value = as_define_value(value, f"[search.start #{i + 1}.{key}]")
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
