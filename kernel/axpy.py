"""Spec of ``axpy.cu`` (out = a * x + y): a complete light spec."""

from tuner.spec import In, LightSpec, Out, Scalar

A = 2.0


class Spec(LightSpec):
    source = "axpy.cu"  # BLOCK_SIZE and ITEMS, with their defaults, come from its #ifndef guards
    archs = ("sm_80", "sm_90", "sm_100", "sm_120")  # plain CUDA: each runs on its whole family
    problem_keys = ("ROWS", "COLS")
    args = [In("x", ("ROWS", "COLS")), In("y", ("ROWS", "COLS")), Out("out", ("ROWS", "COLS")), Scalar("float32", A)]
    derived = {"per_block": "BLOCK_SIZE * ITEMS", "blocks": "ceil_div(ROWS * COLS, per_block)"}
    restrictions = [("BLOCK_SIZE % 32 == 0", "BLOCK_SIZE={BLOCK_SIZE} is not whole warps"),
                    "per_block <= ROWS * COLS"]

    def grid(self, p):
        return (p["blocks"], 1, 1)

    def block(self, p):
        return (p["BLOCK_SIZE"], 1, 1)

    def reference(self, inputs, problem, rows):
        return A * inputs["x"][rows] + inputs["y"][rows]

    def flops(self, problem):
        return 2.0 * problem["ROWS"] * problem["COLS"]
