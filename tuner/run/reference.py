"""The config every trial of a run is paired with (its reference), named from the study file alone."""

from __future__ import annotations

from typing import cast

from tuner.evaluate.gpu import BASELINE, ReferenceOrigin
from tuner.search.space import Space
from tuner.search.start import start_params
from tuner.study.file import StudyConfig


def reference_config(cfg: StudyConfig, space: Space) -> dict | str:
    """The config every trial is paired with: [measure] reference, else the first [search] start, else the
    defaults (until the study's first configs choose one: :mod:`tuner.run.probe`)."""
    chosen = cfg.measure.reference
    if chosen == BASELINE:
        return BASELINE
    if chosen is not None:  # (start_params refuses any other string)
        return space.full_config(start_params(space, [cast(dict, chosen)], what="[measure] reference")[0])
    if cfg.search.start:
        return space.full_config(start_params(space, cfg.search.start[:1])[0])
    # the spec's defaults where the model accepts them, else the first valid config: never an invalid one
    defaults = space.defaults()
    if space.check(defaults) is None:
        return space.full_config(defaults)  # no enumeration needed: the worker's start overlaps it
    space.require_valid()
    return space.full_config(space.valid[0])


def reference_origin(cfg: StudyConfig, space: Space) -> ReferenceOrigin:
    """Where :func:`reference_config` took the reference from, and how to choose another: what an
    error about a reference that cannot run says."""
    name = "name one that runs as [measure] reference = {...}"
    if cfg.measure.reference is not None:
        return ReferenceOrigin()
    if cfg.search.start:
        return ReferenceOrigin("the reference, the first [search] start config,", f"put another first, or {name}")
    if space.check(space.defaults()) is None:
        return ReferenceOrigin("the reference, the kernel's defaults (its source's guards' values),",
                               f"fix the kernel or its build, or {name}")
    return ReferenceOrigin("the reference, the first valid config (the kernel's defaults are not valid),", name)
