"""The GEMM specs' rule tables against the chains of ``if ...: return reason`` they replaced.

    python docs/experiments/rules_equivalence.py [REV] [N]   (REV: a commit with the old check(); N random configs)

For each of kernel/gemm_sm90a.py and kernel/gemm_sm100a.py, the spec at REV (read with
``git show``) and the one in the working tree judge the same configs; any config on which
their reasons differ is printed. Two sets: the full product of every study of the kernel,
and N random configs over wide value sets (all defines, out-of-range values, wrong types,
unknown names, other problems and devices). Prints the per-config check cost of both.

Result against d308aa8 (2 shared CPU cores, 2026-11-23), 100,000 random configs each:

    gemm_sm90a studies: 981120 configs, 0 judged differently; check 11.2 us (old) vs 16.0 us (new)
    gemm_sm90a random: 100000 configs, 0 judged differently; check 4.7 us (old) vs 11.5 us (new)
    gemm_sm100a studies: 10368 configs, 0 judged differently; check 6.5 us (old) vs 12.4 us (new)
    gemm_sm100a random: 100000 configs, 0 judged differently; check 3.1 us (old) vs 8.8 us (new)

The table gathers every name (derived sizes included) before its first rule, where the old
chains returned at the first failing ``if``: a check costs about 1.4x on the studies' spaces.
"""

import itertools
import random
import subprocess
import sys
import tempfile
import time
import tomllib
from pathlib import Path

from tuner.contract.kernel_spec import DeviceInfo, KernelSpec, load_spec

ROOT = Path(__file__).resolve().parents[2]

SM90A_VALUES = {
    "BLOCK_M": [0, 64, 128, 192, 256, 320], "BLOCK_N": [32, 64, 96, 128, 160, 192, 224, 256],
    "N_STAGES": [1, 2, 3, 4, 5, 6, 8], "NUM_CONSUMERS": [0, 1, 2, 3], "CLUSTER_M": [0, 1, 2, 3, 4],
    "GROUP_M": [0, 1, 8], "MMA_INFLIGHT": [0, 1, 2, 3], "SPLIT_K32": [0, 1, 2, 3, 4],
    "CONSUMER_REGS": [16, 160, 200, 232, 240, 256, 264], "PRODUCER_REGS": [24, 40, 41, 56],
    "L2_PROMO": [0, 64, 100, 256], "EPI_SLOTS": [0, 1, 2, 3, 4, 5], "EPI_BATCH": [0, 4, 8, 12, 16, 32],
    "DIAG": [0, 1, 2, 3],
    **{flag: [0, 1, 2] for flag in ("PINGPONG", "STORE_TMA", "EXTRA_TMA", "SNAKE_ORDER", "GELU_F16X2", "CLUSTER_RELEASE",
                                    "BIAS_ACC", "GELU_H2", "EPI_DIRECT", "SHARED_STAGING", "PREFETCH_A",
                                    "BUG_POS_OFF_BY_ONE")},
}
SM90A_PROBLEMS = [dict(M=m, N=n, K=k, EPILOGUE=e, SEQ_LEN=s) for m in (928256, 4096, 192) for n in (768, 3072, 800, 804)
                  for k in (768, 256, 100) for e in ("BIAS_POS", "BIAS_GELU", "BIAS_RESIDUAL", "RELU") for s in (196, 50)]
SM100A_VALUES = {
    "TN": [0, 64, 128, 256, 512, "256", True], "N_STAGES": [1, 2, 3, 4, 5, 8], "NUM_EPI_WARPS": [3, 4, 5, 6, 30],
    "PHASE2_UNROLL": [0, 1, 8, 32, 33], "STAGING_ROW_PAD": [-16, 0, 8, 16, 32, 64], "SNAKE_ORDER": [0, 1, 2],
    "TMA_L2_PROMOTION": [0, 1, 2], "ADD_SOURCE": ["BF16", "FP32", "FP16"], "TMEM_LOAD_WIDTH": [8, 16, 32],
    "COMBINED_LOAD_VEC": [1, 2, 4],
}
SM100A_PROBLEMS = [dict(M=m, N=n, K=k, EPILOGUE=e, SEQ_LEN=s) for m in (928256, 4096, 0, 100) for n in (768, 800, 784)
                   for k in (768, 0, 100) for e in ("BIAS_POS", "BIAS_GELU", "RELU") for s in (196, 0)]
SM100A_PROBLEMS += [dict(N=768, K=768), dict(M="x", N=768, K=768)]


def old_spec(rev: str, kernel: str, folder: Path) -> KernelSpec:
    """The spec of ``kernel`` as it was at ``rev``, beside the current ``.cu`` (only check() is used)."""
    text = subprocess.run(["git", "show", f"{rev}:kernel/{kernel}.py"], cwd=ROOT, check=True,
                          capture_output=True, text=True).stdout
    path = folder / f"{kernel}.py"
    path.write_text(text.replace(f'source = "{kernel}.cu"', f'source = "{ROOT / "kernel" / kernel}.cu"'))
    return load_spec(path)


def reason(spec: KernelSpec, *args) -> str | None:
    try:
        return spec.check(*args)
    except Exception as exc:  # both must fail the same way
        return f"raises {type(exc).__name__}"


def study_cases(kernel: str):
    for toml in sorted((ROOT / "studies").glob("*.toml")):
        study = tomllib.loads(toml.read_text())
        if Path(study["study"]["kernel"]).stem != kernel:
            continue
        axes = {**study["space"].get("tier1", {}), **study["space"].get("tier2", {})}
        for values in itertools.product(*axes.values()):
            yield ({**dict(zip(axes, values, strict=True)), **study.get("fixed", {})}, study["problem"])


def random_cases(values: dict, problems: list, n: int, rng: random.Random):
    for _ in range(n):
        config = {k: rng.choice(v) for k, v in values.items() if rng.random() < 0.6}
        if rng.random() < 0.01:
            config["NOT_A_DEFINE"] = 1
        yield config, rng.choice(problems)


def compare(kernel: str, old: KernelSpec, new: KernelSpec, cases, devices=(None,)) -> None:
    rng = random.Random(0)
    seen, differ, cost = 0, 0, {"old": 0.0, "new": 0.0}
    for config, problem in cases:
        extra = (rng.choice(devices),) if devices != (None,) else ()
        started = time.perf_counter()
        a = reason(old, config, problem, *extra)
        cost["old"] += time.perf_counter() - started
        started = time.perf_counter()
        b = reason(new, config, problem, *extra)
        cost["new"] += time.perf_counter() - started
        seen += 1
        if a != b:
            differ += 1
            if differ <= 5:
                print(f"  DIFFERS {config} {problem}:\n    old: {a}\n    new: {b}")
    print(f"{kernel}: {seen} configs, {differ} judged differently; check {1e6 * cost['old'] / seen:.1f} us (old) "
          f"vs {1e6 * cost['new'] / seen:.1f} us (new)")


def main(rev: str, n: int) -> None:
    rng = random.Random(1)
    with tempfile.TemporaryDirectory() as folder:
        devices = (DeviceInfo(), DeviceInfo(max_smem_per_block=101376))
        for kernel, values, problems in (("gemm_sm90a", SM90A_VALUES, SM90A_PROBLEMS),
                                         ("gemm_sm100a", SM100A_VALUES, SM100A_PROBLEMS)):
            old, new = old_spec(rev, kernel, Path(folder)), load_spec(ROOT / "kernel" / f"{kernel}.py")
            compare(f"{kernel} studies", old, new, study_cases(kernel))
            compare(f"{kernel} random", old, new, random_cases(values, problems, n, rng),
                    devices if kernel == "gemm_sm90a" else (None,))


if __name__ == "__main__":
    main(sys.argv[1] if len(sys.argv) > 1 else "d308aa8", int(sys.argv[2]) if len(sys.argv) > 2 else 200_000)
