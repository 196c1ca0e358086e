"""Spec of ``example_sgemm.cu``: a light spec (tuner/contract/light.py). The tunables and their
defaults are the ``#ifndef`` guards of the ``.cu`` file; the rest is data."""

import numpy as np

from tuner.spec import In, LightSpec, Out


class Spec(LightSpec):
    source = "example_sgemm.cu"
    archs = ("sm_70", "sm_75", "sm_80", "sm_86", "sm_89", "sm_90", "sm_90a", "sm_100", "sm_100a", "sm_110", "sm_120", "sm_120a")  # plain CUDA C: any GPU
    problem_keys = ("M_DIM", "N_DIM", "K_DIM")
    rtol = atol = 1e-3
    args = [In("A", ("M_DIM", "K_DIM")), In("B", ("K_DIM", "N_DIM")), Out("C", ("M_DIM", "N_DIM"))]
    derived = {"threads": "(BLOCK // THREAD_TILE) ** 2", "smem_bytes": "4 * BLOCK_K * (2 * BLOCK + 1)",
               "accumulators": "THREAD_TILE * THREAD_TILE"}
    restrictions = [
        ("BLOCK % THREAD_TILE == 0", "BLOCK={BLOCK} not a multiple of THREAD_TILE={THREAD_TILE}"),
        ("threads >= 32", "{threads} threads per block < one warp"),
        ("threads <= 1024", "{threads} threads per block > 1024"),
        ("M_DIM % BLOCK == 0", "M_DIM={M_DIM} not a multiple of {BLOCK}"),
        ("N_DIM % BLOCK == 0", "N_DIM={N_DIM} not a multiple of {BLOCK}"),
        ("K_DIM % BLOCK_K == 0", "K_DIM={K_DIM} not a multiple of {BLOCK_K}"),
        ("smem_bytes <= 48 * 1024", "static SMEM {smem_bytes} B > 48 KB"),
        ("accumulators <= 64", "THREAD_TILE={THREAD_TILE}: {accumulators} accumulators per thread, over 64"),
    ]

    def grid(self, p):
        return (p["N_DIM"] // p["BLOCK"], p["M_DIM"] // p["BLOCK"], 1)

    def block(self, p):
        return (p["threads"], 1, 1)

    def reference(self, inputs, problem, rows):
        return (inputs["A"][rows].astype(np.float64) @ inputs["B"].astype(np.float64)).astype(np.float32)

    def flops(self, problem):
        return 2.0 * problem["M_DIM"] * problem["N_DIM"] * problem["K_DIM"]
