"""What every build of a config gives, however it is built (NVRTC, or a program kernel's own command):
its result and ptxas's figures, the study's limits on them, and the compile cache that keeps it."""

from __future__ import annotations

import json
import os
import re
import tempfile
import warnings
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Protocol, TypedDict

_REGS = re.compile(r"Used (\d+) registers")
_SPILL = re.compile(r"(\d+) bytes spill stores, (\d+) bytes spill loads")
_STACK = re.compile(r"(\d+) bytes stack frame")
_SMEM = re.compile(r"(\d+) bytes smem")
#: ptxas's "Potential Performance Loss" note on Hopper: it made every wgmma wait for the one before
_SERIALIZED = re.compile(r"wgmma\.mma_async instructions are serialized due to (.+?) in the function")


@dataclass
class CompileResult:
    """What a compile produced; ``status`` uses the trial-record vocabulary."""

    status: str  # ok | compile_error | too_many_regs | spills | wgmma_serialized
    reason: str = ""
    regs: int | None = None
    spills: int | None = None  # spill store + load bytes
    stack: int | None = None
    smem_static: int | None = None
    compile_s: float = 0.0
    cached: bool = False
    log: str = ""
    cubin_path: str | None = None
    flags: str = ""

    @property
    def ok(self) -> bool:
        return self.status == "ok"

    def to_json(self) -> dict:
        return asdict(self)


class _LimitSettings(Protocol):
    max_regs: int
    reject_spills: bool
    reject_serialized_wgmma: bool


@dataclass
class CompileLimits:
    """Post-compile rules: configurable per study."""

    max_regs: int = 255
    reject_spills: bool = True
    reject_serialized_wgmma: bool = True

    @classmethod
    def of(cls, settings: _LimitSettings) -> CompileLimits:
        """The limits a study's ``[measure]`` settings set."""
        return cls(settings.max_regs, settings.reject_spills, settings.reject_serialized_wgmma)


def default_cache_dir() -> Path:
    env = os.environ.get("TUNER_CACHE_DIR")
    if env:
        return Path(env)
    return Path(os.environ.get("XDG_CACHE_HOME", Path.home() / ".cache")) / "tuner" / "cubin"


class PtxasStats(TypedDict):
    """What ptxas reports of a build (None: not in its output)."""

    regs: int | None
    spills: int | None
    stack: int | None
    smem_static: int | None


def parse_ptxas(log: str) -> PtxasStats:
    """Registers, spill bytes, stack and static SMEM from ptxas's verbose output.

    With several kernels in one file the maximum over entries is kept: the tuner
    launches one entry, and the others are usually small helpers.
    """

    def biggest(pattern: re.Pattern, groups: int = 1) -> int | None:
        found = [sum(int(g) for g in m.groups()[:groups]) for m in pattern.finditer(log)]
        return max(found) if found else None

    return PtxasStats(regs=biggest(_REGS), spills=biggest(_SPILL, groups=2), stack=biggest(_STACK),
                      smem_static=biggest(_SMEM))


def wgmma_serialized(log: str) -> str | None:
    """Why ptxas serialized the build's wgmma instructions (from its log), or None when it did not.

    Such a build is correct and runs, each wgmma waiting for the one before: typically an accumulator
    register read, or a fence, on a path ptxas cannot follow while wgmmas are in flight."""
    found = _SERIALIZED.search(log)
    return " ".join(found.group(1).split()) if found else None


def apply_limits(result: CompileResult, limits: CompileLimits) -> CompileResult:
    if result.status not in ("ok", "too_many_regs", "spills", "wgmma_serialized"):
        return result
    result.status, result.reason = "ok", ""
    if result.regs is not None and result.regs > limits.max_regs:
        result.status, result.reason = "too_many_regs", f"{result.regs} registers > {limits.max_regs}"
    elif limits.reject_spills and result.spills:
        result.status, result.reason = "spills", f"{result.spills} bytes of spill stores+loads"
    elif limits.reject_serialized_wgmma and (why := wgmma_serialized(result.log)):
        result.status, result.reason = "wgmma_serialized", f"ptxas serializes the wgmmas: {why}"
    return result


class BuildCache:
    """``<key>.json`` (the result) and ``<key><suffix>`` (the build's output: a CUBIN, or a program
    kept ``executable``) in one directory, written atomically.

    An unwritable or full cache directory is not fatal: compiles go on uncached.
    """

    def __init__(self, root: Path, suffix: str = ".cubin", executable: bool = False):
        self.root = root
        self.suffix = suffix
        self.executable = executable

    def get(self, key: str) -> CompileResult | None:
        meta = self.root / f"{key}.json"
        try:
            data = json.loads(meta.read_text())
        except (OSError, ValueError):
            return None
        result = CompileResult(**data)
        if result.cubin_path is not None:
            output = self.root / f"{key}{self.suffix}"
            if not output.is_file():
                return None
            result.cubin_path = str(output)
        return result

    def put(self, key: str, result: CompileResult, output: bytes | None) -> None:
        try:
            self.root.mkdir(parents=True, exist_ok=True)
            if output is not None:
                result.cubin_path = str(self.root / f"{key}{self.suffix}")
                self._write(f"{key}{self.suffix}", output)
            self._write(f"{key}.json", json.dumps(result.to_json()).encode())
        except OSError as exc:
            if output is not None:  # keep the binary usable for this run
                fd, tmp = tempfile.mkstemp(suffix=self.suffix)
                with os.fdopen(fd, "wb") as f:
                    f.write(output)
                if self.executable:
                    os.chmod(tmp, 0o755)
                result.cubin_path = tmp
            warn_once(f"compile cache {self.root} not writable ({exc.strerror}); compiling uncached")

    def _write(self, name: str, data: bytes) -> None:
        fd, tmp = tempfile.mkstemp(dir=self.root, prefix=".tmp-")
        try:
            with os.fdopen(fd, "wb") as f:
                f.write(data)
            if self.executable and not name.endswith(".json"):
                os.chmod(tmp, 0o755)
            os.replace(tmp, self.root / name)
        except BaseException:
            Path(tmp).unlink(missing_ok=True)
            raise


#: the compile warnings this process has shown (a build's own, or passed on by a compile process)
_warned: set[str] = set()


def warn_once(message: str) -> None:
    if message not in _warned:
        _warned.add(message)
        warnings.warn(message, stacklevel=3)
