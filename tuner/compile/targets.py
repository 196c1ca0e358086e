"""Which compile target a study builds for: its ``arch``, checked against the kernel's own
``archs`` and this NVRTC, or ``native`` resolved once the device is known.

``native`` is resolved by the GPU worker's device report (:meth:`tuner.evaluate.gpu.GpuEvaluator.start`):
nothing is compiled for a GPU study before that report arrives. Without a GPU (``tuner check``)
a native study is checked for every target the kernel lists, unless ``--arch`` names one.
"""

from __future__ import annotations

from functools import cache

from tuner.contract.arch import ARCHS, NATIVE, limits, native_target
from tuner.contract.kernel_spec import KernelSpec
from tuner.errors import UserError


def check_supported(arch: str, spec: KernelSpec, where: str) -> None:
    """A one-line error unless ``spec`` lists ``arch`` (a spec that lists none takes any), or
    the spec lists a target the table does not know."""
    for listed in spec.archs:
        if listed not in ARCHS:
            raise UserError(f"kernel spec {spec.path.name}: archs lists {listed!r}, an unknown target; "
                            f"known: {', '.join(ARCHS)}")
    if arch != NATIVE and spec.archs and arch not in spec.archs:
        raise UserError(f"{where}: [study.arch] {arch} is not a target of {spec.path.name} "
                        f"({', '.join(spec.archs)}): use one of them, or \"native\"")


def check_targets(arch: str, spec: KernelSpec, where: str, override: str | None = None) -> list[str]:
    """The targets ``tuner check`` compiles for: ``override`` (``--arch``), else the study's
    arch, else (``native``) every target the spec lists that this NVRTC can build."""
    check_supported(arch, spec, where)
    if override is not None:
        if override == NATIVE:
            raise UserError(f"--arch {NATIVE}: --arch names one target to build, e.g. --arch sm_90a (a study whose arch "
                            f"is \"{NATIVE}\" builds every target of its spec without --arch)")
        limits(override)
        if spec.archs and override not in spec.archs:
            raise UserError(f"--arch {override} is not a target of {spec.path.name} ({', '.join(spec.archs)})")
        if arch not in (NATIVE, override):
            raise UserError(f"--arch {override}: {where} builds for {arch}; leave --arch out, or set arch = \"native\"")
        return [require_nvrtc(override)]
    if arch != NATIVE:
        return [require_nvrtc(arch)]
    if not spec.archs:
        raise UserError(f"{spec.path.name} lists no archs (it takes any GPU's target): give --arch, e.g. --arch sm_90")
    buildable = [a for a in spec.archs if nvrtc_builds(a)]
    if not buildable:
        raise UserError(f"this NVRTC builds none of {spec.path.name}'s targets ({', '.join(spec.archs)})")
    return buildable


def run_target(arch: str, spec: KernelSpec, cc: tuple[int, int] | list[int], device_name: str = "") -> str:
    """The target a study runs with on a device of compute capability ``cc`` (``native``:
    the best of the spec's targets for it); a one-line error when the device cannot run it."""
    if arch == NATIVE:
        return require_nvrtc(native_target(cc, spec.archs))
    if not limits(arch).runs_on(cc):
        gpu = f"{device_name}, sm_{cc[0]}{cc[1]}" if device_name else f"sm_{cc[0]}{cc[1]}"
        if spec.archs and not any(limits(a).runs_on(cc) for a in spec.archs):  # native would not help
            raise UserError(f"this GPU ({gpu}) cannot run {arch} code, and {spec.path.name} builds for no target it runs "
                            f"({', '.join(spec.archs)}): run the study on a matching GPU, or verify it here without "
                            "launching: tuner check --compile STUDY")
        raise UserError(f"this GPU ({gpu}) cannot run {arch} code: run the study on a matching GPU, "
                        f"set arch = \"native\", or verify it here without launching: tuner check --compile STUDY")
    return arch


def nvrtc_builds(arch: str) -> bool:
    """Whether the installed NVRTC can compile for ``arch`` (CUDA 13 dropped sm_70 / sm_72)."""
    return limits(arch).cc[0] * 10 + limits(arch).cc[1] in _nvrtc_archs()


def require_nvrtc(arch: str) -> str:
    if not nvrtc_builds(arch):
        from tuner.compile.nvrtc import nvrtc_version

        raise UserError(f"NVRTC {nvrtc_version()} cannot compile for {arch}: install an NVRTC that does "
                        f"(CUDA 12.x for sm_70 / sm_72)")
    return arch


@cache
def _nvrtc_archs() -> frozenset[int]:
    try:
        from cuda.bindings import nvrtc

        err, archs = nvrtc.nvrtcGetSupportedArchs()
        if err == nvrtc.nvrtcResult.NVRTC_SUCCESS:
            return frozenset(int(a) for a in archs)
    except Exception:  # no NVRTC here (a replay host): let the compile itself say so
        pass
    return frozenset(a.cc[0] * 10 + a.cc[1] for a in ARCHS.values())
