"""Build one config of a :class:`~tuner.contract.program.ProgramSpec` with the user's own command.

The command runs in a shell, in an empty scratch folder of its own (builds run in parallel:
what one writes by a relative name no other sees), and writes the program there; the program
is then kept in the compile cache like a CUBIN, keyed by the source with
its local includes, the command as run and the arch. ``nvcc -Xptxas -v`` (or any build that
prints ptxas's verbose lines) gives the trial its registers and spills, and the study's
compile limits apply to them as to an NVRTC build.
"""

from __future__ import annotations

import contextlib
import fcntl
import hashlib
import os
import shlex
import shutil
import subprocess
import tempfile
import threading
import time
from collections.abc import Iterator
from pathlib import Path

from tuner.compile.build import BuildCache, CompileLimits, CompileResult, apply_limits, default_cache_dir, parse_ptxas
from tuner.contract.kernel_spec import Config, Problem
from tuner.contract.program import ProgramSpec
from tuner.contract.source import SourceBundle
from tuner.lifetime import kill_group

#: the compile cache keeps programs under this suffix
SUFFIX = ".program"
#: the placeholder path a command is keyed with (the scratch folder differs from build to build)
_KEYED_BINARY = Path("BINARY")


def build_program(spec: ProgramSpec, config: Config, problem: Problem, arch: str,
                  cache_dir: Path | str | None = None, limits: CompileLimits | None = None) -> CompileResult:
    """Build ``config`` with ``spec.build``; the program's path is the result's ``cubin_path``."""
    limits = limits or CompileLimits()
    flags = spec.flags(config, problem)
    keyed = spec.build_command(config, problem, arch, _KEYED_BINARY)
    parts = [SourceBundle.load(spec.source_path).digest(), keyed, _tool(keyed), *_inputs(spec)]
    key = "program-" + hashlib.sha256("\0".join(parts).encode()).hexdigest()[:32]
    cache = BuildCache(Path(cache_dir) if cache_dir else default_cache_dir(), suffix=SUFFIX, executable=True)
    hit = cache.get(key)
    if hit is not None:
        hit.cached, hit.flags = True, flags
        return apply_limits(hit, limits)
    with tempfile.TemporaryDirectory(prefix="tuner-build-") as scratch, _one_at_a_time(spec, cache.root):
        binary = Path(scratch) / "program"
        command = spec.build_command(config, problem, arch, binary)
        start = time.perf_counter()
        code, log = _run_build(command, Path(scratch), spec.build_timeout_s)
        elapsed = time.perf_counter() - start
        log = f"$ {command}\n{log}"
        if code is None:
            result = CompileResult("compile_error", f"build did not finish in {spec.build_timeout_s:g} s",
                                   compile_s=elapsed, log=log, flags=flags)
        elif code != 0:
            result = CompileResult("compile_error", _first_error(log, code), compile_s=elapsed, log=log, flags=flags)
        elif not binary.is_file():
            result = CompileResult("compile_error", "the build command exited 0 but wrote no program to {binary}",
                                   compile_s=elapsed, log=log, flags=flags)
        else:
            result = CompileResult("ok", compile_s=elapsed, log=log, flags=flags, **parse_ptxas(log))
            cache.put(key, result, binary.read_bytes())
            return apply_limits(result, limits)
    return result  # not cached: a build fails for reasons outside its key too (a missing compiler, a busy host)


def _tool(command: str) -> str:
    """The build's first program as this host has it (path, size, time): another compiler is another build."""
    try:
        first = shlex.split(command)[0]
    except (ValueError, IndexError):
        return ""
    found = shutil.which(first)
    if found is None:
        return first
    stat = os.stat(found)
    return f"{os.path.realpath(found)}:{stat.st_size}:{stat.st_mtime_ns}"


def _inputs(spec: ProgramSpec) -> list[str]:
    """``name:digest`` of each file the spec's ``build_inputs`` globs match (none: the source alone counts)."""
    found = sorted({p for pattern in spec.build_inputs for p in spec.path.parent.glob(pattern) if p.is_file()})
    return [f"{p.relative_to(spec.path.parent)}:{hashlib.sha256(p.read_bytes()).hexdigest()}" for p in found]


#: the builds running in this process (each the leader of its own process group), for :func:`stop_builds`
_running: set[subprocess.Popen] = set()
_running_lock = threading.Lock()


@contextlib.contextmanager
def _one_at_a_time(spec: ProgramSpec, cache_root: Path) -> Iterator[None]:
    """Hold the host's build lock while a spec that builds in a shared folder builds."""
    if spec.parallel_builds:
        yield
        return
    cache_root.mkdir(parents=True, exist_ok=True)
    with open(cache_root / "program-build.lock", "a") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)
        yield


def _run_build(command: str, cwd: Path, timeout_s: float) -> tuple[int | None, str]:
    """(exit code, output) of a build; None when it ran past ``timeout_s`` (its process group is killed)."""
    proc = subprocess.Popen(command, shell=True, cwd=cwd, stdout=subprocess.PIPE, stderr=subprocess.STDOUT,
                            stdin=subprocess.DEVNULL, start_new_session=True, text=True, errors="replace")
    with _running_lock:
        _running.add(proc)
    try:
        output, _ = proc.communicate(timeout=timeout_s)
        return proc.returncode, output
    except subprocess.TimeoutExpired:
        kill_group(proc.pid)
        output, _ = proc.communicate()
        return None, output
    except BaseException:  # Ctrl-C: no build left behind
        kill_group(proc.pid)
        proc.wait()
        raise
    finally:
        with _running_lock:
            _running.discard(proc)


def stop_builds() -> None:
    """Kill every build this process runs, with whatever it started (a run that stops waits for none)."""
    with _running_lock:
        running = list(_running)
    for proc in running:
        kill_group(proc.pid)


#: lines that say only that an earlier line failed (the linker's, make's)
_ONLY_THAT_IT_FAILED = ("collect2:", "ld returned", "make: ***", "ninja: build stopped")


def _first_error(log: str, code: int) -> str:
    """The compiler's or linker's first error line, else the build's last line of output (``nvcc: not found``)."""
    output = [line.strip() for line in log.splitlines()[1:] if line.strip()]
    errors = [line for line in output if "error" in line.lower() or "undefined reference" in line]
    telling = [line for line in errors if not any(mark in line for mark in _ONLY_THAT_IT_FAILED)]
    first = (telling or errors or output[-1:] or [""])[0]
    return (f"{first} (the build command exited {code})" if first else f"the build command exited {code}")[:300]
