"""tuner: Bayesian autotuning of CUDA kernels' compile-time defines with Optuna."""

__version__ = "0.1.0"
