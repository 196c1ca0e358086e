"""What the engine stores for viewers: a study's Markdown note and trials' compile logs.

- :func:`write_study_note` stores the study's note (problem, device, best flags, how to
  reproduce) where optuna-dashboard shows it: through ``optuna_dashboard.save_note`` when
  installed, else in the same study system attributes that function writes.
- :func:`attach_trial_artifacts` uploads text files (compile log, ptxas output) as Optuna
  artifacts of a running trial, in a file-system artifact store.

Every text is redacted: no storage password reaches a note or an artifact.
"""

from __future__ import annotations

import os
import re
import tempfile
from pathlib import Path

import optuna
from optuna.trial import FrozenTrial

from tuner.store import optuna_private
from tuner.store.results import metric_of, status_of, time_of, value_text, winner
from tuner.store.url import redact

#: optuna-dashboard's note format: a version counter and the body in chunks of this many characters
NOTE_VERSION_KEY = "dashboard:note_ver"
NOTE_CHUNK_PREFIX = "dashboard:note_str:"
NOTE_CHUNK = 2045


def study_note(study: optuna.Study, storage_label: str | None = None) -> str:
    """The Markdown note for ``study``: problem, device, best flags, how to reproduce."""
    attrs = study.user_attrs
    trials = study.get_trials(deepcopy=False)
    best = winner(attrs, trials, study.directions[0])
    problem, device = attrs.get("problem"), attrs.get("device")
    problem = problem if isinstance(problem, dict) else {}
    device = device if isinstance(device, dict) else {}
    lines = [f"## {study.study_name}", ""]
    lines.append(f"**Problem**: shape `{attrs.get('shape', '?')}`, "
                 + (", ".join(f"{k}={v}" for k, v in problem.items()) or "not recorded"))
    lines.append("")
    gpu = ", ".join(text for text, known in ((f"{device.get('sm_count')} SMs", device.get("sm_count")),
                                              (f"driver {device.get('driver')}", device.get("driver"))) if known)
    lines.append(f"**Device**: {device.get('name', attrs.get('device', '?'))}" + (f" ({gpu})" if gpu else "")
                 + f", arch `{attrs.get('arch') or '?'}`, NVRTC {attrs.get('nvrtc_version') or '?'}")
    lines.append("")
    lines.append(f"**Kernel**: `{attrs.get('kernel', '?')}` (`{attrs.get('kernel_path', '?')}`), "
                 f"source hash `{str(attrs.get('source_hash', '?'))[:16]}`, tool {attrs.get('tool_version', '?')}")
    lines.append("")
    states: dict[str, int] = {}
    for t in trials:
        key = status_of(t)
        states[key] = states.get(key, 0) + 1
    lines.append(f"**Trials**: {len(trials)} (" + ", ".join(f"{k} {v}" for k, v in sorted(states.items())) + ")")
    lines.append("")
    if best is None or not best.values:
        lines += ["**Best**: no trial has finished with a valid time yet.", ""]
    else:
        ua = best.user_attrs
        flags = ua.get("flags") or " ".join(f"-D{k}={v}" for k, v in best.params.items())
        extra = ", ".join(f"{k} {ua[k]}" for k in ("regs", "spills", "smem_bytes") if k in ua)
        metric = metric_of(study)
        best_ms = time_of(best, trials)
        shown = value_text(best.values[0], metric)
        if metric == "ratio" and best_ms is not None:
            shown += f", {best_ms:.4g} ms"
        lines.append(f"**Best**: trial {best.number}, **{shown}**"
                     + (f", {ua['tflops']:.1f} TFLOPS" if isinstance(ua.get("tflops"), (int, float)) else "")
                     + (f" ({extra})" if extra else ""))
        base = attrs.get("baseline_ms")
        if isinstance(base, dict) and best_ms:
            for name, ms in base.items():
                if isinstance(ms, (int, float)) and ms > 0:
                    lines.append(f"- {ms / best_ms:.2f}x over {name} ({ms} ms)")
        lines += ["", "```", flags, "```", ""]
    lines += ["**Reproduce**", "", "```sh"]
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
    """Store :func:`study_note` as the study's optuna-dashboard note; return the Markdown."""
    body = study_note(study, storage_label)
    try:
        from optuna_dashboard import save_note
    except ImportError:
        _save_note(study, body)
    else:
        save_note(study, body)
    return body


def _save_note(study: optuna.Study, body: str) -> None:
    """optuna-dashboard's note format without optuna-dashboard installed (it reads it when it is)."""
    attrs = optuna_private.study_system_attrs(study)
    chunks = [body[i:i + NOTE_CHUNK] for i in range(0, len(body), NOTE_CHUNK)] or [""]
    stale = sum(1 for key in attrs if key.startswith(NOTE_CHUNK_PREFIX))
    values: dict[str, object] = {NOTE_VERSION_KEY: int(attrs.get(NOTE_VERSION_KEY, 0)) + 1}
    values.update({f"{NOTE_CHUNK_PREFIX}{i}": chunk for i, chunk in enumerate(chunks)})
    values.update({f"{NOTE_CHUNK_PREFIX}{i}": "" for i in range(len(chunks), stale)})  # a longer old note
    for key, value in values.items():
        optuna_private.set_study_system_attr(study, key, value)


def artifact_store(artifact_dir: str | os.PathLike[str]) -> optuna.artifacts.FileSystemArtifactStore:
    """The file-system artifact store in ``artifact_dir`` (created if missing)."""
    path = Path(artifact_dir)
    path.mkdir(parents=True, exist_ok=True)
    return optuna.artifacts.FileSystemArtifactStore(str(path))


_SAFE_NAME = re.compile(r"[^A-Za-z0-9_.-]+")


def attach_trial_artifacts(trial: optuna.Trial | FrozenTrial, files: dict[str, str],
                           artifact_dir: str | os.PathLike[str],
                           storage: optuna.storages.BaseStorage | None = None) -> dict[str, str]:
    """Upload text ``files`` ({name: text}) as artifacts of a RUNNING ``trial``; return {name: artifact id}.

    Optuna keeps artifact metadata in trial system attributes, which are frozen once the
    trial is finished: attach before telling Optuna the result. A FrozenTrial needs its
    ``storage``.
    """
    if isinstance(trial, FrozenTrial) and trial.state.is_finished():
        raise ValueError(f"trial {trial.number} is already {trial.state.name}: attach its artifacts "
                         "before telling Optuna the result")
    store = artifact_store(artifact_dir)
    ids: dict[str, str] = {}
    with tempfile.TemporaryDirectory(prefix="tuner-artifacts-") as tmp:
        for name, text in files.items():
            safe = _SAFE_NAME.sub("_", os.path.basename(str(name))) or "artifact.txt"
            path = Path(tmp) / safe
            path.write_text(redact(str(text)), encoding="utf-8")
            try:
                ids[name] = optuna.artifacts.upload_artifact(
                    artifact_store=store, file_path=str(path), study_or_trial=trial, storage=storage,
                    mimetype="text/plain")
            except optuna.exceptions.UpdateFinishedTrialError:
                raise ValueError(f"trial {trial.number} is already finished: attach its artifacts "
                                 "before telling Optuna the result") from None
    return ids
