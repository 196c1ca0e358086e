"""A study's winner as a C header of ``#define``s (``tuner best --header``, ``Result.to_header``)."""

from __future__ import annotations

from pathlib import Path

import optuna
from optuna.trial import FrozenTrial

from tuner.contract.kernel_spec import parse_flags
from tuner.store.results import metric_of, value_text
from tuner.table import printable

#: how every header this module writes begins (one written before may be replaced, whatever its suffix)
HEADER_MARK = "// Best configuration of study"


def header_text(study: optuna.Study, trial: FrozenTrial) -> str:
    """``#ifndef`` / ``#define`` guards of the trial's flags (the kernel's own guards take them)."""
    value = value_text(trial.values[0], metric_of(study)) if trial.values else "no value"
    lines = [f"{HEADER_MARK} {printable(study.study_name)}: {value} (trial {trial.number})",
             f"// device: {printable(study.user_attrs.get('device_name', ''))}; kernel source {study.user_attrs.get('source_hash', '')}",
             "#pragma once"]
    for name, define in parse_flags(trial.user_attrs.get("flags", "")).items():
        lines += [f"#ifndef {name}", f"#define {name} {define}", "#endif"]
    return "\n".join(lines) + "\n"


def write_header(path: Path, study: optuna.Study, trial: FrozenTrial) -> Path:
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(header_text(study, trial))
    return path
