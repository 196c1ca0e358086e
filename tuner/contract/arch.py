"""What each NVIDIA target can do: one table from sm_70 to sm_121a, used by everything that asks.

A target is a compile target name (``sm_90a``). The figures are the per-block and per-SM limits of
the CUDA Programming Guide's compute-capability table; the preflight checks a launch against them
on a machine with no GPU, and the worker checks the device it finds.

Targets with an ``a`` suffix use arch-specific instructions (``wgmma``, ``tcgen05``): a CUBIN for one
runs on exactly that chip. A plain target's CUBIN runs on the same major revision, same or later
minor.
"""

from __future__ import annotations

from dataclasses import dataclass

from tuner.errors import UserError

_KB = 1024


@dataclass(frozen=True)
class ArchLimits:
    """One compile target and the launch limits of the chips it runs on."""

    name: str  # sm_90a
    cc: tuple[int, int]  # compute capability (9, 0)
    max_threads_per_block: int = 1024
    max_regs_per_thread: int = 255
    regs_per_block: int = 64 * _KB
    regs_per_sm: int = 64 * _KB
    static_smem_per_block: int = 48 * _KB
    max_smem_per_block: int = 48 * _KB  # static + dynamic, with the opt-in attribute
    smem_per_sm: int = 64 * _KB
    max_cluster_size: int = 1  # CTAs per cluster, with the non-portable opt-in; 1 = no clusters
    portable_cluster_size: int = 1

    @property
    def arch_specific(self) -> bool:
        return self.name.endswith("a")

    def runs_on(self, cc: tuple[int, int] | list[int]) -> bool:
        """Can a CUBIN for this target run on a device of compute capability ``cc``?"""
        major, minor = int(cc[0]), int(cc[1])
        if self.arch_specific:
            return self.cc == (major, minor)
        return self.cc[0] == major and self.cc[1] <= minor


def _arch(name: str, cc: tuple[int, int], **limits: int) -> ArchLimits:
    return ArchLimits(name, cc, **limits)


_VOLTA = dict(max_smem_per_block=96 * _KB, smem_per_sm=96 * _KB)
_TURING = dict(max_smem_per_block=64 * _KB, smem_per_sm=64 * _KB)
_A100 = dict(max_smem_per_block=163 * _KB, smem_per_sm=164 * _KB)
_GA10X = dict(max_smem_per_block=99 * _KB, smem_per_sm=100 * _KB)
_HOPPER = dict(max_smem_per_block=227 * _KB, smem_per_sm=228 * _KB, max_cluster_size=16, portable_cluster_size=8)
_BLACKWELL = dict(_HOPPER)
_BLACKWELL_GEFORCE = dict(max_smem_per_block=99 * _KB, smem_per_sm=100 * _KB, max_cluster_size=8,
                          portable_cluster_size=8)
#: Thor (11.0): the B200's shared memory (CCCL's arch_traits); its non-portable cluster size is unpublished
_THOR = dict(_BLACKWELL, max_cluster_size=8)

#: every target the tuner compiles for, oldest first
ARCHS: dict[str, ArchLimits] = {
    a.name: a
    for a in (
        _arch("sm_70", (7, 0), **_VOLTA),
        _arch("sm_72", (7, 2), **_VOLTA),
        _arch("sm_75", (7, 5), **_TURING),
        _arch("sm_80", (8, 0), **_A100),
        _arch("sm_86", (8, 6), **_GA10X),
        _arch("sm_87", (8, 7), **_A100),
        _arch("sm_88", (8, 8), **_GA10X),
        _arch("sm_89", (8, 9), **_GA10X),
        _arch("sm_90", (9, 0), **_HOPPER),
        _arch("sm_90a", (9, 0), **_HOPPER),
        _arch("sm_100", (10, 0), **_BLACKWELL),
        _arch("sm_100a", (10, 0), **_BLACKWELL),
        _arch("sm_103", (10, 3), **_BLACKWELL),
        _arch("sm_103a", (10, 3), **_BLACKWELL),
        _arch("sm_110", (11, 0), **_THOR),
        _arch("sm_110a", (11, 0), **_THOR),
        _arch("sm_120", (12, 0), **_BLACKWELL_GEFORCE),
        _arch("sm_120a", (12, 0), **_BLACKWELL_GEFORCE),
        _arch("sm_121", (12, 1), **_BLACKWELL_GEFORCE),
        _arch("sm_121a", (12, 1), **_BLACKWELL_GEFORCE),
    )
}

#: a study's ``arch`` may say this: the GPU found at run time
NATIVE = "native"


def limits(name: str) -> ArchLimits:
    """The table's row for ``name``; a one-line error naming the known targets otherwise."""
    try:
        return ARCHS[name]
    except KeyError:
        raise UserError(f"arch {name!r} unknown; expected {NATIVE!r} or one of {', '.join(ARCHS)}") from None


def plain_target(cc: tuple[int, int] | list[int]) -> str:
    """The target without arch-specific features for a device (reference and helper kernels): its
    own, else the newest older one of its major revision the table knows (a CUBIN for sm_120 runs on
    12.1), else its own name (which :func:`limits` does not know)."""
    major, minor = int(cc[0]), int(cc[1])
    plain = [a for a in ARCHS.values() if not a.arch_specific and a.runs_on((major, minor))]
    return max(plain, key=lambda a: a.cc).name if plain else f"sm_{major}{minor}"


def native_target(cc: tuple[int, int] | list[int], supported: tuple[str, ...] = ()) -> str:
    """The target to build for on a device of compute capability ``cc``.

    With ``supported`` (a spec's ``archs``), the best of them that runs there: the device's own
    arch-specific target first, then its plain target, then the newest older plain target of the
    same major revision. Without, the device's plain target. A one-line error when none runs.
    """
    cc = (int(cc[0]), int(cc[1]))
    plain = plain_target(cc)
    known = plain in ARCHS
    if not supported:  # any target: the device's own, else an older one of its major revision
        if not known:
            raise UserError(f"the GPU here (compute capability {cc[0]}.{cc[1]}) is newer than every target this "
                            f"tuner knows (newest {list(ARCHS)[-1]}): pass the kernel's target as arch")
        return plain
    runnable = [limits(name) for name in supported if limits(name).runs_on(cc)]
    if not runnable:
        hint = (f"add {plain!r} to the spec's archs if the kernel builds for it" if known else
                f"this tuner knows no target for it (newest {list(ARCHS)[-1]})")
        raise UserError(f"the GPU here (compute capability {cc[0]}.{cc[1]}) runs none of the kernel's targets "
                        f"({', '.join(supported)}); {hint}")
    runnable.sort(key=lambda a: (a.cc, a.arch_specific))
    return runnable[-1].name
