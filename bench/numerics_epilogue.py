"""Where the fused epilogues' output differs from the FP32 reference, and why (on a GPU host).

For each shape, runs configs of kernel/gemm_sm90a.cu through the worker's CUDA backend (the
same inputs, reference kernel and full check as a study) on M = SEQ_LEN * 256 rows, copies the
output and the FP32 expected output back, and prints:

* max |got - expected| / rms(row) and the share of values with |got - expected| > 0.02 among
  near-zero outputs (|expected| < 0.25), for the fused kernel and for an emulation of the
  unfused path (cuBLAS: the FP32 accumulator rounded to BF16, then BF16 epilogue ops);
* for the fused kernel: the mean of (got - expected) * sign(acc) over those outputs, where
  ``acc`` is the GEMM part alone; a clearly negative mean says the error is a magnitude loss
  of the accumulator (the tensor core's FP8 accumulation), not a rounding of the epilogue.

    python3 bench/numerics_epilogue.py            # all three shapes
"""

from __future__ import annotations

import sys
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from tuner.compile.nvrtc import compile_kernel
from tuner.contract.kernel_spec import load_spec
from tuner.contract.numerics import bf16_to_f32, f32_to_bf16, fp8_to_f32
from tuner.contract.precision import fast
from tuner.device.worker import CudaBackend

ROOT = Path(__file__).resolve().parents[1]
WINNER = {"BLOCK_M": 128, "BLOCK_N": 192, "N_STAGES": 4, "PINGPONG": 1, "MMA_INFLIGHT": 2, "SHARED_STAGING": 1,
          "GROUP_M": 1, "CLUSTER_RELEASE": 1}
SHAPES = {
    "patch_embed": ({"N": 768, "K": 768, "EPILOGUE": "BIAS_POS"},
                    [{**WINNER, "EXTRA_TMA": 1, "EPI_BATCH": 8, "CLUSTER_M": 2}]),
    "fc1": ({"N": 3072, "K": 768, "EPILOGUE": "BIAS_GELU"},
            [{**WINNER, "N_STAGES": 3, "GELU_H2": 1, "BIAS_ACC": 1}, {**WINNER, "N_STAGES": 3, "BIAS_ACC": 1}]),
    "fc2": ({"N": 768, "K": 3072, "EPILOGUE": "BIAS_RESIDUAL"},
            [{**WINNER, "EXTRA_TMA": 1, "EPI_BATCH": 8, "BIAS_ACC": 1},
             {"BLOCK_M": 128, "BLOCK_N": 128, "N_STAGES": 4, "PINGPONG": 1, "EXTRA_TMA": 1, "BIAS_ACC": 0}]),
}


def main(names: list[str]) -> None:
    spec = load_spec(ROOT / "kernel" / "gemm_sm90a.py")
    backend = CudaBackend()
    backend.hello()
    for name in names or SHAPES:
        base, configs = SHAPES[name]
        seq = 196
        problem = {"M": seq * 256, "SEQ_LEN": seq, **base}
        backend.prepare(spec, problem, seed=0)
        out = backend.outputs["C"]
        M, N = out.shape
        expected = backend.read_expected()
        assert expected is not None, "the spec's reference kernel did not run"
        inp = backend.inputs_on_host()
        epi = problem["EPILOGUE"]
        print(f"== {name} ({epi}), M={M}: reference kernel {backend.verifier.reference_ms:.1f} ms (with its compile)")
        # host check of the reference kernel on a few rows (float64 numpy)
        rows = np.array([0, 1, M // 2, M - 1])
        host = spec.reference(inp, problem, rows)
        print(f"   reference kernel vs numpy (float64) on 4 rows: max |diff| {np.abs(host - expected[rows]).max():.3g}")
        # the GEMM part alone and the epilogue operand, in FP32 (for the unfused emulation and the sign test)
        a = fp8_to_f32(inp["A"]).astype(np.float32)
        w = fp8_to_f32(inp["W"]).astype(np.float32)
        acc = a @ w.T
        if epi == "BIAS_POS":
            unfused = bf16_to_f32(f32_to_bf16(bf16_to_f32(f32_to_bf16(acc)) + bf16_to_f32(inp["combined"])[np.arange(M) % seq]))
        elif epi == "BIAS_GELU":
            x = bf16_to_f32(f32_to_bf16(bf16_to_f32(f32_to_bf16(acc)) + bf16_to_f32(inp["bias"])[None, :]))
            unfused = bf16_to_f32(f32_to_bf16(0.5 * x * (1 + np.tanh(0.7978845608028654 * (x + 0.044715 * x ** 3)))))
        else:
            t = bf16_to_f32(f32_to_bf16(bf16_to_f32(f32_to_bf16(acc)) + bf16_to_f32(inp["bias"])[None, :]))
            unfused = bf16_to_f32(f32_to_bf16(t + bf16_to_f32(inp["residual"])))
        report("unfused (emulated)", unfused, expected, acc)
        for config in configs:
            built = compile_kernel(spec, config, problem, "sm_90a")
            assert built.ok, built.reason
            handle = backend.load(spec, {**spec.params, **config}, problem, built.cubin_path)
            backend.launch(handle)
            check = backend.verifier.compare(backend.buffers["C"], out, fast(spec))
            got = backend.read_output("C")
            backend.unload(handle)
            label = " ".join(f"{k}={v}" for k, v in config.items() if k in ("BLOCK_N", "BIAS_ACC", "GELU_H2", "EXTRA_TMA"))
            print(f"   full check: n_bad {check.n_bad}, max_err {check.max_err:.4f}")
            report(f"fused {label}", bf16_to_f32(got), expected, acc)


def report(label: str, got: np.ndarray, expected: np.ndarray, acc: np.ndarray) -> None:
    diff = (got - expected).astype(np.float64)
    rms = np.sqrt(np.mean(expected.astype(np.float64) ** 2, axis=1, keepdims=True))
    near = np.abs(expected) < 0.25
    big = np.abs(diff) > 0.02
    signed = diff[near] * np.sign(acc[near])
    print(f"   {label:40s} max|d|/rms {np.max(np.abs(diff) / rms):.4f}  near-zero {near.sum()} values, "
          f"|d|>0.02: {big[near].sum()} ({100 * big[near].mean():.3f} %)  all values |d|>0.02: {100 * big.mean():.3f} %  "
          f"max |d| near zero {np.abs(diff[near]).max():.4f}  "
          f"mean d*sign(acc) near zero {signed.mean():+.2e} (|acc| mean {np.abs(acc[near]).mean():.2f})")


if __name__ == "__main__":
    main(sys.argv[1:])
