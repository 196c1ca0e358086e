"""Spec of ``example_sgemm_program.cu``: the example GEMM tuned through its own program.

The tuner builds each config with the command below and runs the program, which prints its own
time and a checksum (:mod:`tuner.contract.program`). The space's rules are the kernel's
(``example_sgemm.py``), so both ways of tuning it search the same configs.
"""

from pathlib import Path

from tuner.spec import ProgramSpec, load_spec

kernel = type(load_spec(Path(__file__).with_name("example_sgemm.py")))


class Spec(ProgramSpec):
    source = "example_sgemm_program.cu"  # its defines, with their defaults, come from its #ifndef guards and its includes'
    archs = ("sm_80", "sm_90", "sm_100", "sm_120")  # plain CUDA C: each runs on its whole family (nvcc builds are slow
    # to multiply by every target `tuner check --compile` builds for)
    problem_keys = kernel.problem_keys
    derived = kernel.derived
    restrictions = kernel.restrictions
    build = "nvcc -O3 -arch={arch} -Xptxas -v {flags} {source} -o {binary}"
    checksum_rtol = 1e-6  # every config sums each C element in the same order

    def flops(self, problem):
        return kernel.flops(self, problem)
