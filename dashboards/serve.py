"""optuna-dashboard on a tuner storage, study notes, and per-trial artifacts.

- :func:`run_dashboard` serves optuna-dashboard on the same storage the tuner writes
  (SQLite or Postgres URL, or a journal ``.log`` file), optionally with an artifact store.
- :func:`write_study_note` writes the study's Markdown note (problem, device, best flags,
  how to reproduce) through ``optuna_dashboard.save_note``.
- :func:`attach_trial_artifacts` uploads a trial's compile log / ptxas output into an
  :class:`optuna.artifacts.FileSystemArtifactStore`, where optuna-dashboard shows them.

How "best" is chosen: optuna-dashboard asks the storage for its best trial
(``storage.get_best_trial``), which looks at COMPLETE trials only and does *not* read
Optuna's ``constraints`` system attribute (constraints only change the colour of a
trial in some plots). The tuner therefore never stores an invalid configuration as
COMPLETE: every failure status is a PRUNED trial without a value (or FAIL for a killed
process), so it can never be "best" in either view.
"""

from __future__ import annotations

import os
import re
import tempfile
from pathlib import Path
from typing import Any

import optuna
from optuna.trial import FrozenTrial, TrialState

from dashboards._storage import describe_storage, open_storage, redact

DEFAULT_HOST = "127.0.0.1"
DEFAULT_PORT = 8080


def artifact_store(artifact_dir: str | os.PathLike) -> optuna.artifacts.FileSystemArtifactStore:
    """The file-system artifact store in ``artifact_dir`` (created if missing)."""
    path = Path(artifact_dir)
    path.mkdir(parents=True, exist_ok=True)
    return optuna.artifacts.FileSystemArtifactStore(str(path))


def run_dashboard(storage_url: str, host: str = DEFAULT_HOST, port: int = DEFAULT_PORT,
                  artifact_dir: str | os.PathLike | None = None, quiet: bool = False) -> None:
    """Serve optuna-dashboard on ``storage_url`` until interrupted (blocks).

    ``storage_url`` is a SQLAlchemy URL (``sqlite:///tuner.db``,
    ``postgresql+psycopg://user@host/db``), a journal ``.log`` file path, or an Optuna
    storage object. With ``artifact_dir`` the trials' artifacts can be viewed.
    """
    import optuna_dashboard

    storage = open_storage(storage_url)
    store = artifact_store(artifact_dir) if artifact_dir else None
    label = describe_storage(storage) if not isinstance(storage_url, str) else redact(storage_url)
    if not quiet:
        shown = "localhost" if host in ("127.0.0.1", "::1") else host
        print(f"optuna-dashboard on http://{shown}:{port}/dashboard  (storage: {label}"
              + (f", artifacts: {artifact_dir}" if artifact_dir else "") + "); Ctrl-C stops it", flush=True)
    try:
        optuna_dashboard.run_server(storage, host=host, port=port, artifact_store=store)
    except KeyboardInterrupt:
        pass


# --------------------------------------------------------------------------- notes


def _best(trials: list[FrozenTrial], direction) -> FrozenTrial | None:
    done = [t for t in trials if t.state == TrialState.COMPLETE and t.value is not None]
    if not done:
        return None
    pick = max if direction == optuna.study.StudyDirection.MAXIMIZE else min
    return pick(done, key=lambda t: t.value)


def study_note(study: optuna.Study, storage_label: str | None = None) -> str:
    """The Markdown note for ``study``: problem, device, best flags, how to reproduce."""
    attrs = study.user_attrs
    trials = study.get_trials(deepcopy=False)
    best = _best(trials, study.direction)
    problem = attrs.get("problem") if isinstance(attrs.get("problem"), dict) else {}
    device = attrs.get("device") if isinstance(attrs.get("device"), dict) else {}
    lines = [f"## {study.study_name}", ""]
    lines.append(f"**Problem**: shape `{attrs.get('shape', '?')}`, "
                 + (", ".join(f"{k}={v}" for k, v in problem.items()) or "not recorded"))
    lines.append("")
    lines.append(f"**Device**: {device.get('name', attrs.get('device', '?'))}"
                 + (f" ({device.get('sm_count')} SMs, driver {device.get('driver')})" if device else "")
                 + f", arch `{attrs.get('arch', '?')}`, NVRTC {attrs.get('nvrtc_version', '?')}")
    lines.append("")
    lines.append(f"**Kernel**: `{attrs.get('kernel', '?')}` (`{attrs.get('kernel_path', '?')}`), "
                 f"source hash `{str(attrs.get('source_hash', '?'))[:16]}`, tool {attrs.get('tool_version', '?')}")
    lines.append("")
    states: dict[str, int] = {}
    for t in trials:
        key = str(t.user_attrs.get("status") or t.state.name.lower())
        states[key] = states.get(key, 0) + 1
    lines.append(f"**Trials**: {len(trials)} (" + ", ".join(f"{k} {v}" for k, v in sorted(states.items())) + ")")
    lines.append("")
    if best is None:
        lines += ["**Best**: no trial has finished with a valid time yet.", ""]
    else:
        ua = best.user_attrs
        flags = ua.get("flags") or " ".join(f"-D{k}={v}" for k, v in best.params.items())
        extra = ", ".join(f"{k} {ua[k]}" for k in ("regs", "spills", "smem_bytes") if k in ua)
        lines.append(f"**Best**: trial {best.number}, **{best.value:.4f} ms**"
                     + (f", {ua['tflops']:.1f} TFLOPS" if isinstance(ua.get("tflops"), (int, float)) else "")
                     + (f" ({extra})" if extra else ""))
        base = attrs.get("baseline_ms")
        if isinstance(base, dict):
            for name, ms in base.items():
                if isinstance(ms, (int, float)) and ms > 0:
                    lines.append(f"- {ms / best.value:.2f}x over {name} ({ms} ms)")
        lines += ["", "```", flags, "```", ""]
    lines.append("**Reproduce**")
    lines.append("")
    lines.append("```sh")
    where = f" --storage '{redact(storage_label)}'" if storage_label else ""
    lines.append(f"tuner report{where} --study '{study.study_name}' -o report/   # the Plotly report")
    if attrs.get("kind") == "replay" and attrs.get("replay_file"):
        lines.append(f"# replayed from {attrs['replay_file']} (no GPU needed)")
    if best is not None:
        path = attrs.get("kernel_path", "KERNEL.cu")
        lines.append(f"# build the winner: NVRTC/nvcc with -arch={attrs.get('arch', 'sm_90a')} and")
        lines.append(f"#   {best.user_attrs.get('flags', '')}  {path}")
    lines.append("```")
    return redact("\n".join(lines))


def write_study_note(study: optuna.Study, storage_label: str | None = None) -> str:
    """Write :func:`study_note` as the study's optuna-dashboard note; return the Markdown."""
    from optuna_dashboard import save_note

    body = study_note(study, storage_label)
    save_note(study, body)
    return body


# ----------------------------------------------------------------------- artifacts

_SAFE_NAME = re.compile(r"[^A-Za-z0-9_.-]+")


def attach_trial_artifacts(study: optuna.Study, trial_id: int | optuna.Trial, files: dict[str, str],
                           artifact_dir: str | os.PathLike) -> dict[str, str]:
    """Upload text ``files`` ({name: text}, e.g. ``compile.log``, ``ptxas.txt``) as artifacts of a trial.

    Call it while the trial is still RUNNING (between ``ask`` and ``tell``, or inside the
    objective): Optuna stores artifact metadata as trial system attributes, which are
    frozen once the trial is finished. Returns {name: artifact id}.
    """
    if isinstance(trial_id, optuna.Trial):
        trial_id = trial_id._trial_id
    storage = study._storage
    frozen = storage.get_trial(int(trial_id))
    if frozen.state.is_finished():
        raise ValueError(
            f"trial {frozen.number} of {study.study_name} is already {frozen.state.name}: attach its "
            "artifacts before telling Optuna the result")
    store = artifact_store(artifact_dir)
    ids: dict[str, str] = {}
    with tempfile.TemporaryDirectory(prefix="tuner-artifacts-") as tmp:
        for name, text in files.items():
            safe = _SAFE_NAME.sub("_", os.path.basename(str(name))) or "artifact.txt"
            path = Path(tmp) / safe
            path.write_text(redact(text if isinstance(text, str) else str(text)), encoding="utf-8")
            ids[name] = optuna.artifacts.upload_artifact(
                artifact_store=store, file_path=str(path), study_or_trial=frozen, storage=storage,
                mimetype="text/plain")
    return ids


def trial_artifacts(study: optuna.Study, trial_id: int) -> list[dict[str, Any]]:
    """The artifact metadata of a trial (what optuna-dashboard lists)."""
    frozen = study._storage.get_trial(int(trial_id))
    return [m.__dict__ for m in optuna.artifacts.get_all_artifact_meta(frozen, storage=study._storage)]
