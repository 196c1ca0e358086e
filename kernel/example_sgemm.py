"""Spec of ``example_sgemm.cu``: the smallest complete example of a kernel family.

Copy this pair of files to tune a kernel of your own: name the defines in ``params``,
say in ``check`` why a config cannot work (before any compile), and describe the
launch, the inputs and the reference.
"""

from __future__ import annotations

import numpy as np

from tuner.spec import Buffer, DeviceInfo, KernelSpec, Launch, OutputSpec


class Spec(KernelSpec):
    name = "example_sgemm"
    source = "example_sgemm.cu"
    kernel_name = "example_sgemm"
    archs = ("sm_80", "sm_86", "sm_89", "sm_90", "sm_90a", "sm_100a", "sm_120a")
    params = {"BLOCK": 64, "BLOCK_K": 16, "THREAD_TILE": 4, "UNROLL_K": 1, "PLANT_HANG": 0, "PLANT_BUG": 0}
    problem_keys = ("M_DIM", "N_DIM", "K_DIM")
    compile_options = ("-std=c++17",)
    rtol = 1e-3
    atol = 1e-3

    def derive(self, config, problem):
        edge = config["BLOCK"] // config["THREAD_TILE"]
        smem = 4 * config["BLOCK_K"] * (2 * config["BLOCK"] + 1)
        return {"threads": edge * edge, "smem_bytes": smem, "blocks": self._blocks(config, problem)}

    def check(self, config, problem):
        block, tile, bk = config["BLOCK"], config["THREAD_TILE"], config["BLOCK_K"]
        if block % tile:
            return f"BLOCK={block} not a multiple of THREAD_TILE={tile}"
        threads = (block // tile) ** 2
        if threads < 32:
            return f"{threads} threads per block < one warp"
        if threads > 1024:
            return f"{threads} threads per block > 1024"
        for key, edge in (("M_DIM", block), ("N_DIM", block), ("K_DIM", bk)):
            if problem[key] % edge:
                return f"{key}={problem[key]} not a multiple of {edge}"
        smem = self.derive(config, problem)["smem_bytes"]
        if smem > 48 * 1024:
            return f"static SMEM {smem} B > 48 KB"
        if tile * tile > 64:
            return f"THREAD_TILE={tile}: {tile * tile} accumulators per thread, over 64"
        return None

    def _blocks(self, config, problem):
        return (problem["N_DIM"] // config["BLOCK"]) * (problem["M_DIM"] // config["BLOCK"])

    def launch(self, config, problem, device: DeviceInfo) -> Launch:
        block = config["BLOCK"]
        return Launch(
            grid=(problem["N_DIM"] // block, problem["M_DIM"] // block, 1),
            block=(self.derive(config, problem)["threads"], 1, 1),
            args=[Buffer("A"), Buffer("B"), Buffer("C")],
        )

    def inputs(self, problem, rng):
        m, n, k = problem["M_DIM"], problem["N_DIM"], problem["K_DIM"]
        a = rng.uniform(-1, 1, size=(m, k)).astype(np.float32)
        b = rng.uniform(-1, 1, size=(k, n)).astype(np.float32)
        return {"A": a, "B": b}

    def outputs(self, problem):
        return {"C": OutputSpec((problem["M_DIM"], problem["N_DIM"]), "float32", decode="float32")}

    def reference(self, inputs, problem, rows):
        a = inputs["A"][rows].astype(np.float64)
        return (a @ inputs["B"].astype(np.float64)).astype(np.float32)

    def flops(self, problem):
        return 2.0 * problem["M_DIM"] * problem["N_DIM"] * problem["K_DIM"]

    def bytes_moved(self, problem):
        m, n, k = problem["M_DIM"], problem["N_DIM"], problem["K_DIM"]
        return 4.0 * (m * k + k * n + m * n)
