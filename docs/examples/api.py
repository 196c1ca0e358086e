"""The Python API in a notebook's order: run it as it is (a replay, no GPU), cell by cell.

    python3 docs/examples/api.py            # from the repository root; writes ./api_example.db (and its .propose.lock), ./best.h

``# %%`` marks cells (VS Code and Jupytext open it as a notebook). On a GPU host, drop the
``replay=`` arguments: the same calls measure for real.
"""

# %% A study file, tuned against the recorded H200 grid (stored as patch_embed_sm90a_hopper_grid.replay)
import tuner

STORAGE = "sqlite:///api_example.db"
result = tuner.tune("studies/patch_embed_sm90a_hopper_grid.toml", trials=40, seed=0, storage=STORAGE,
                    replay="studies/recorded/patch_embed_sm90a_hopper_grid_h200.json")
print(result.best_value, result.metric)  # the winner's value: ms in a replay, a ratio to the reference on a GPU
print(result.best_params)                # the tuned defines
print(result.best_flags)                 # every -D flag, problem keys included, as `tuner best` prints them
print(result.tied)                       # the other configs tied with the winner in its confirmation (GPU runs; [] here)

# %% Every trial as a pandas DataFrame (the results schema of `tuner export`)
trials = result.trials
print(trials[trials.status == "ok"].sort_values("value").head(5)[["BLOCK_N", "N_STAGES", "value", "tflops"]])

# %% A later session: the stored result, and the winner as a header of #defines
again = tuner.load("studies/patch_embed_sm90a_hopper_grid.toml", storage=STORAGE)
assert again.best_params == result.best_params
print(again.to_header("best.h").read_text().splitlines()[0])

# %% A kernel given as data, in the manner of Kernel Tuner's tune_kernel (no files of your own)
SOURCE = r"""
extern "C" __global__ void axpy(const float* x, const float* y, float* out, float a)
{
    const long base = (long)blockIdx.x * BLOCK_SIZE * ITEMS + threadIdx.x;
    for (int i = 0; i < ITEMS; ++i) {
        const long idx = base + (long)i * BLOCK_SIZE;
        if (idx < (long)ROWS * COLS) out[idx] = a * x[idx] + y[idx];
    }
}
"""
kernel = dict(
    kernel_name="axpy", kernel_source=SOURCE, problem={"ROWS": 4096, "COLS": 4096},
    arguments=[tuner.In("x", ("ROWS", "COLS")), tuner.In("y", ("ROWS", "COLS")), tuner.Out("out", ("ROWS", "COLS")),
               tuner.Scalar("float32", 2.0)],
    tune_params={"BLOCK_SIZE": [64, 128, 256, 512], "ITEMS": [1, 2, 4, 8]},
    grid=("ceil_div(ROWS * COLS, BLOCK_SIZE * ITEMS)", 1, 1), block=("BLOCK_SIZE", 1, 1),
    reference="2.0 * x[rows] + y[rows]",  # the expected first output for the sampled rows
    restrictions=[("BLOCK_SIZE * ITEMS <= ROWS * COLS", "more threads than elements")],
    flops="2 * ROWS * COLS", arch="sm_90a",
)
study = tuner.kernel_study(**kernel)  # the study tune_kernel runs: `tuner check --compile STUDY` compiles it here
print(study)
# on a GPU host: result = tuner.tune_kernel(**kernel, trials=12, storage=STORAGE); print(result.best_flags)
