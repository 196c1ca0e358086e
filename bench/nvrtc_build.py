"""Standalone NVRTC build of kernel/gemm_sm90a.cu (for the bench harness and quick checks).

Mirrors what tuner/compile.py does (--gpu-architecture=sm_90a, --ptxas-options=-v, -D flags)
so the harness can run before / without the engine.
"""
from __future__ import annotations

import re
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
SRC = ROOT / "kernel" / "gemm_sm90a.cu"


def nvrtc_compile(defines: dict, arch: str = "sm_90a", source: str | None = None):
    """Returns (ok, log, cubin bytes, stats dict)."""
    from cuda.bindings import nvrtc

    text = source if source is not None else SRC.read_text()
    err, prog = nvrtc.nvrtcCreateProgram(text.encode(), b"gemm_sm90a.cu", 0, [], [])
    opts = [f"--gpu-architecture={arch}", "--ptxas-options=-v", "-std=c++17"]
    opts += [f"-D{k}={v}" for k, v in defines.items()]
    (cerr,) = nvrtc.nvrtcCompileProgram(prog, len(opts), [o.encode() for o in opts])
    _, size = nvrtc.nvrtcGetProgramLogSize(prog)
    buf = b" " * size
    nvrtc.nvrtcGetProgramLog(prog, buf)
    log = buf.decode(errors="replace").rstrip("\x00")
    cubin = b""
    if cerr == nvrtc.nvrtcResult.NVRTC_SUCCESS:
        _, csize = nvrtc.nvrtcGetCUBINSize(prog)
        cubin = b" " * csize
        nvrtc.nvrtcGetCUBIN(prog, cubin)
    nvrtc.nvrtcDestroyProgram(prog)
    return cerr == nvrtc.nvrtcResult.NVRTC_SUCCESS, log, cubin, parse_ptxas(log)


def parse_ptxas(log: str) -> dict:
    def grab(pat):
        m = re.findall(pat, log)
        return max(int(x) for x in m) if m else None

    return {
        "regs": grab(r"Used (\d+) registers"),
        "spill_stores": grab(r"(\d+) bytes spill stores"),
        "spill_loads": grab(r"(\d+) bytes spill loads"),
        "stack": grab(r"(\d+) bytes stack frame"),
        "warn_setmaxnreg": "C7508" in log or "setmaxnreg" in log.lower() and "ignor" in log.lower(),
    }


if __name__ == "__main__":
    d = dict(a.split("=", 1) for a in sys.argv[1:])
    ok, log, cubin, st = nvrtc_compile(d)
    print(log)
    print(ok, len(cubin), st)
