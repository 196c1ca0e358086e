"""Build one config of a :class:`~tuner.contract.program.ProgramSpec` with the user's own command.

The command runs in a shell, in the spec's folder, and writes the program into a scratch
folder; the program is then kept in the compile cache like a CUBIN, keyed by the source with
its local includes, the command as run and the arch. ``nvcc -Xptxas -v`` (or any build that
prints ptxas's verbose lines) gives the trial its registers and spills, and the study's
compile limits apply to them as to an NVRTC build.
"""

from __future__ import annotations

import hashlib
import os
import signal
import subprocess
import tempfile
import time
from pathlib import Path

from tuner.compile.nvrtc import BuildCache, CompileLimits, CompileResult, apply_limits, default_cache_dir, parse_ptxas
from tuner.contract.kernel_spec import Config, Problem
from tuner.contract.program import ProgramSpec
from tuner.contract.source import SourceBundle

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
    key = "program-" + hashlib.sha256("\0".join([SourceBundle.load(spec.source_path).digest(), keyed]).encode()).hexdigest()[:32]
    cache = BuildCache(Path(cache_dir) if cache_dir else default_cache_dir(), suffix=SUFFIX, executable=True)
    hit = cache.get(key)
    if hit is not None:
        hit.cached, hit.flags = True, flags
        return apply_limits(hit, limits)
    with tempfile.TemporaryDirectory(prefix="tuner-build-") as scratch:
        binary = Path(scratch) / "program"
        command = spec.build_command(config, problem, arch, binary)
        start = time.perf_counter()
        code, log = _run_build(command, spec.path.parent, spec.build_timeout_s)
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
    cache.put(key, result, None)
    return result


def _run_build(command: str, cwd: Path, timeout_s: float) -> tuple[int | None, str]:
    """(exit code, output) of a build; None when it ran past ``timeout_s`` (its process group is killed)."""
    proc = subprocess.Popen(command, shell=True, cwd=cwd, stdout=subprocess.PIPE, stderr=subprocess.STDOUT,
                            stdin=subprocess.DEVNULL, start_new_session=True, text=True, errors="replace")
    try:
        output, _ = proc.communicate(timeout=timeout_s)
        return proc.returncode, output
    except subprocess.TimeoutExpired:
        os.killpg(proc.pid, signal.SIGKILL)
        output, _ = proc.communicate()
        return None, output
    except BaseException:  # Ctrl-C: no build left behind
        os.killpg(proc.pid, signal.SIGKILL)
        proc.wait()
        raise


def _first_error(log: str, code: int) -> str:
    """The compiler's first error line, else the build's last line of output (``nvcc: not found``)."""
    output = [line.strip() for line in log.splitlines()[1:] if line.strip()]
    first = next((line for line in output if "error" in line.lower()), output[-1] if output else "")
    return (f"{first} (the build command exited {code})" if first else f"the build command exited {code}")[:300]
