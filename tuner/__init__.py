"""tuner: Bayesian autotuning of CUDA kernels' compile-time defines with Optuna.

The Python API (:mod:`tuner.api`): ``tune``, ``load``, ``tune_kernel``, ``kernel_study``,
``Result``, ``In`` / ``Out`` / ``Scalar`` for a kernel's arguments, and ``UserError`` (bad input). They are imported on
first use: the GPU worker imports this package too and needs none of them.
"""

__version__ = "0.1.0"

_API = {"tune": "tuner.api", "load": "tuner.api", "tune_kernel": "tuner.api", "kernel_study": "tuner.api",
        "Result": "tuner.api", "In": "tuner.contract.light", "Out": "tuner.contract.light", "Scalar": "tuner.contract.kernel_spec",
        "UserError": "tuner.errors"}
__all__ = ["__version__", *_API]


def __getattr__(name: str):
    import importlib

    if name in _API:
        return getattr(importlib.import_module(_API[name]), name)
    if name == "errors":  # where the README says UserError is
        return importlib.import_module("tuner.errors")
    raise AttributeError(f"module 'tuner' has no attribute {name!r}")


def __dir__() -> list[str]:
    return sorted({*globals(), *__all__, "errors"})  # what a notebook's completion offers
