"""The CUDA driver's start, begun the moment a GPU worker process starts.

``cuInit`` and the primary context take ~0.25 s on an H100, and the worker's own imports (NumPy,
the measurement code) about as long again. The driver's calls release the GIL, so the two overlap
when the driver starts in a thread first. The worker's backend then makes the same calls: they
find the driver started and the primary context alive (the driver counts its retains), and any
error is raised there, where it says which call failed.

Importing this module loads nothing beyond the standard library.
"""

from __future__ import annotations

import threading

_starting: threading.Thread | None = None


def begin() -> None:
    """Start the driver and retain device 0's primary context, in a thread."""
    global _starting

    def start() -> None:
        try:
            from cuda.bindings import driver as cu

            if cu.cuInit(0)[0] != cu.CUresult.CUDA_SUCCESS:
                return
            status, device = cu.cuDeviceGet(0)
            if status == cu.CUresult.CUDA_SUCCESS:
                cu.cuDevicePrimaryCtxRetain(device)
        except Exception:  # (no driver, no device) the backend's own calls say what failed
            pass

    _starting = threading.Thread(target=start, name="cuda-start", daemon=True)
    _starting.start()


def wait() -> None:
    """Return once :func:`begin`'s start has ended (at once if none was begun)."""
    if _starting is not None:
        _starting.join()
