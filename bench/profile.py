"""ncu target: one launch of each given config (ours) and of cuBLAS FP8 GEMM-only (torch._scaled_mm) on
random inputs, between cudaProfilerStart/Stop (run ncu with --profile-from-start off).

  ncu --profile-from-start off ... python3 bench/profile.py bench/plan_<name>.json
Uses the plan's problems and jobs with "profile": true.
"""
from __future__ import annotations

import json
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
from harness import SPEC, Kernel, build, cublas_gemm, gpu_inputs  # noqa: E402
from tuner.spec import DeviceInfo  # noqa: E402


def main():
    import torch

    plan = json.loads(Path(sys.argv[1]).read_text())
    torch.zeros(1, device="cuda")
    dev = DeviceInfo(name=torch.cuda.get_device_name(), sm_count=torch.cuda.get_device_properties(0).multi_processor_count)
    for pname, p in plan["problems"].items():
        problem = p["problem"]
        d_in, _ = gpu_inputs(torch, dict(problem, INPUT_KIND="random"), "random")
        for k, o in SPEC.outputs(problem).items():
            d_in[k] = torch.empty(o.shape, dtype=torch.int16, device="cuda")
        gemm = cublas_gemm(torch, d_in)
        kerns = []
        for job in p["jobs"]:
            if job.get("profile"):
                cubin, _ = build(job["config"], problem)
                kerns.append(Kernel(cubin, SPEC.launch(job["config"], problem, dev), d_in))
                print(f"[{pname}] profile #{len(kerns)}: {job['config']}", flush=True)
        for _ in range(3):  # warm
            gemm()
            for k in kerns:
                k()
        torch.cuda.synchronize()
        torch.cuda.profiler.start()
        gemm()
        for k in kerns:
            k()
        torch.cuda.synchronize()
        torch.cuda.profiler.stop()
        for k in kerns:
            k.close()
        del d_in
        torch.cuda.empty_cache()


if __name__ == "__main__":
    main()
