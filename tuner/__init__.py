"""tuner: Bayesian autotuning of CUDA kernels' compile-time defines with Optuna.

The Python API (:mod:`tuner.api`): ``tune``, ``load``, ``tune_kernel``, ``kernel_study``,
``Result``, and ``In`` / ``Out`` / ``Scalar`` for a kernel's arguments. They are imported on
first use: the GPU worker imports this package too and needs none of them.
"""

__version__ = "0.1.0"

_API = {"tune": "tuner.api", "load": "tuner.api", "tune_kernel": "tuner.api", "kernel_study": "tuner.api",
        "Result": "tuner.api", "In": "tuner.contract.light", "Out": "tuner.contract.light", "Scalar": "tuner.contract.kernel_spec"}
__all__ = ["__version__", *_API]


def __getattr__(name: str):
    if name in _API:
        import importlib

        return getattr(importlib.import_module(_API[name]), name)
    raise AttributeError(f"module 'tuner' has no attribute {name!r}")
