"""The SM100a host dry run (tuner/check/host_dry_run.py): the stub is the real kernel's ABI twin (checked
here with NVRTC, no GPU), and the comparison flags what differs; the launch itself is a GPU test."""

import json
import random
import struct

import pytest

from tests.conftest import ROOT, tuner
from tuner.check.host_dry_run import TARGET_DEVICES, fit
from tuner.compile.nvrtc import SourceBundle, helper_cubin, kernel_ptx, source_ptx
from tuner.compile.ptx_entry import parse_entry
from tuner.contract.arch import limits
from tuner.contract.kernel_spec import Buffer, Launch, Scalar, TensorMap, load_spec
from tuner.device.echo_stub import (
    HEADER,
    MAGIC,
    Received,
    abi_differences,
    arg_offsets,
    decode_record,
    differences,
    directive_differences,
    expected_args,
    launch_from_json,
    launch_to_json,
    record_size,
    stub_source,
)
from tuner.search.space import Space
from tuner.study.file import load_study

STUDIES = ("patch_embed_sm100a", "fc1_sm100a", "fc2_sm100a")
B200 = TARGET_DEVICES["sm_100a"]


def _study(name):
    cfg = load_study(ROOT / "studies" / f"{name}.toml")
    spec = load_spec(cfg.kernel)
    return cfg, spec, Space.from_study(cfg, spec)


def _real_entry(spec, config, problem):
    return parse_entry(kernel_ptx(spec, config, problem, "sm_100a"), spec.kernel_name)


def _fast_entry(spec, config, problem):
    return parse_entry(kernel_ptx(spec, config, problem, "sm_100a", fast=True), spec.kernel_name)


# -- the stub ------------------------------------------------------------------------------------------


@pytest.mark.parametrize("study", STUDIES)
def test_stub_has_the_real_kernels_ptx_entry_for_sampled_configs(study, tmp_path, monkeypatch):
    monkeypatch.setenv("TUNER_CACHE_DIR", str(tmp_path))
    cfg, spec, space = _study(study)
    sample = random.Random(study).sample(space.valid, 3)
    sample.append(next(p for p in space.valid if p["NUM_EPI_WARPS"] != sample[0]["NUM_EPI_WARPS"]))
    for params in sample:
        real = _real_entry(spec, space.full_config(params), space.problem)
        assert _fast_entry(spec, space.full_config(params), space.problem) == real  # the dry run's quick PTX: same entry
        assert real.signature == ((128, 64), (128, 64), (8, 8), (8, 8), (8, 8))  # two CUtensorMaps, three pointers
        source = stub_source(real)
        stub = parse_entry(source_ptx(SourceBundle("stub.cu", source), "sm_90a"), spec.kernel_name)
        assert stub.signature == real.signature
        assert stub == real  # name, parameters and launch directives (threads, cluster dims) alike
    assert helper_cubin("stub.cu", source, "sm_90a")[:4] == b"\x7fELF"  # and ptxas builds it for Hopper


def test_stub_takes_any_parameter_list_from_ptx():
    ptx = """
.visible .entry k(
	.param .align 16 .b8 k_param_0[48],
	.param .u32 k_param_1,
	.param .f32 k_param_2,
	.param .u8 k_param_3,
	.param .u64 .ptr .align 1 k_param_4,
	.param .f64 k_param_5
)
.maxntid 128
{
	ret;
}
"""
    real = parse_entry(ptx)
    assert real.signature == ((48, 16), (4, 4), (4, 4), (1, 1), (8, 8), (8, 8)) and real.maxntid == (128, 1, 1)
    assert real.reqnctapercluster is None
    stub = parse_entry(source_ptx(SourceBundle("stub.cu", stub_source(real)), "sm_90a"), "k")
    assert stub.signature == real.signature and stub.maxntid == real.maxntid
    assert arg_offsets(real) == [64, 112, 120, 128, 136, 144] and record_size(real) == 152


def test_stub_cluster_can_be_capped():
    real = parse_entry(".entry k(\n.param .u64 k_param_0\n)\n.maxntid 64\n.explicitcluster\n.reqnctapercluster 16, 1, 1\n{\n}")
    stub = parse_entry(source_ptx(SourceBundle("stub.cu", stub_source(real, cluster=(8, 1, 1))), "sm_90a"), "k")
    assert stub.reqnctapercluster == (8, 1, 1) and stub.signature == real.signature


# -- the comparison ------------------------------------------------------------------------------------

ENTRY = parse_entry(""".entry gemm_sm100a(
	.param .align 64 .b8 p0[128],
	.param .align 64 .b8 p1[128],
	.param .u64 .ptr .align 1 p2,
	.param .u64 .ptr .align 1 p3,
	.param .u64 .ptr .align 1 p4
)
.maxntid 224
.explicitcluster
.reqnctapercluster 2, 1, 1
{
}""")
ADDRESSES = {"A": 0x7F0000000000, "W": 0x7F0100000000, "C": 0x7F0200000000, "comb_bf16": 0x7F0300000000}


def _encode(tm, address):
    """A stand-in for cuTensorMapEncodeTiled: 128 bytes that depend on every field."""
    seed = struct.pack("<QQQQQQ", address, *tm.shape, *tm.box, tm.swizzle + tm.l2_promotion)
    return (seed * 3)[:128]


def _launch():
    cfg, spec, space = _study("patch_embed_sm100a")
    return spec.launch(space.full_config(space.valid[0]), space.problem, B200)


def _record(launch, sent, cluster=(2, 1, 1), **header):
    """A record as a faithful stub writes it."""
    values = {"magic": MAGIC, "grid_x": launch.grid[0], "grid_y": launch.grid[1], "grid_z": launch.grid[2],
              "block_x": launch.block[0], "block_y": launch.block[1], "block_z": launch.block[2],
              "cluster_x": cluster[0], "cluster_y": cluster[1], "cluster_z": cluster[2],
              "cluster_ctas": cluster[0] * cluster[1] * cluster[2], "dynamic_smem": launch.smem_bytes,
              "blocks_run": launch.grid[0] * launch.grid[1] * launch.grid[2], "params": len(sent), **header}
    raw = bytearray(record_size(ENTRY))
    struct.pack_into(f"<{len(HEADER)}I", raw, 0, *(values[h] for h in HEADER))
    for offset, arg in zip(arg_offsets(ENTRY), sent, strict=True):
        raw[offset:offset + len(arg)] = arg
    return bytes(raw)


def test_a_faithful_record_has_no_differences():
    launch = _launch()
    sent = expected_args(launch, ADDRESSES.__getitem__, _encode)
    assert [len(s) for s in sent] == [128, 128, 8, 8, 8]
    assert sent[2] == struct.pack("<Q", ADDRESSES["C"]) and sent[4] == bytes(8)  # residual: a null uint64
    assert differences(launch, ENTRY, sent, decode_record(_record(launch, sent), ENTRY), (2, 1, 1)) == []


def test_one_changed_byte_of_a_tensor_map_is_a_difference():
    launch = _launch()
    sent = expected_args(launch, ADDRESSES.__getitem__, _encode)
    received = decode_record(_record(launch, sent), ENTRY)
    planted = [bytearray(a) for a in received.args]
    planted[1][77] ^= 0x01
    found = differences(launch, ENTRY, sent, Received(received.header, [bytes(a) for a in planted]), (2, 1, 1))
    assert len(found) == 1 and found[0].startswith("arg 1: 1 byte(s) differ (first at 77")


def test_a_wrong_cluster_dim_and_a_missing_block_are_differences():
    launch = _launch()
    sent = expected_args(launch, ADDRESSES.__getitem__, _encode)
    wrong = decode_record(_record(launch, sent, cluster=(1, 1, 1)), ENTRY)
    found = differences(launch, ENTRY, sent, wrong, (2, 1, 1))
    assert [f.split(":")[0] for f in found] == ["cluster", "cluster_ctas"]
    assert "meant (2, 1, 1), received (1, 1, 1)" in found[0]
    short = decode_record(_record(launch, sent, blocks_run=launch.grid[0] - 1), ENTRY)
    assert [f.split(":")[0] for f in differences(launch, ENTRY, sent, short, (2, 1, 1))] == ["blocks_run"]
    smem = decode_record(_record(launch, sent, dynamic_smem=launch.smem_bytes - 1024), ENTRY)
    assert [f.split(":")[0] for f in differences(launch, ENTRY, sent, smem, (2, 1, 1))] == ["dynamic_smem"]
    unwritten = decode_record(bytes(record_size(ENTRY)), ENTRY)
    assert differences(launch, ENTRY, sent, unwritten, (2, 1, 1)) == ["record: block 0 / thread 0 never wrote it"]


def test_arguments_that_do_not_fit_the_parameters_are_flagged_before_launching():
    launch = _launch()
    assert abi_differences(launch, ENTRY) == []
    narrow = Launch(launch.grid, launch.block, [*launch.args[:4], Scalar("int32", 0)], launch.cluster, launch.smem_bytes)
    assert abi_differences(narrow, ENTRY) == ["arg 4: Scalar of 4 B (align 4) for a parameter of 8 B (align 8)"]
    short = Launch(launch.grid, launch.block, launch.args[:4], launch.cluster, launch.smem_bytes)
    assert abi_differences(short, ENTRY) == ["args: 4 arguments for 5 parameters"]


def test_a_launch_that_breaks_the_kernels_directives_is_flagged():
    launch = _launch()
    assert directive_differences(launch, ENTRY) == []  # 224 threads, a 2-CTA cluster, as compiled
    wide = Launch(launch.grid, (256, 1, 1), launch.args, launch.cluster, launch.smem_bytes)
    assert directive_differences(wide, ENTRY) == ["kernel threads: a block of 256 > the kernel's .maxntid (224, 1, 1)"]
    single = Launch(launch.grid, launch.block, launch.args, (1, 1, 1), launch.smem_bytes)
    assert directive_differences(single, ENTRY) == [
        "kernel cluster: the launch says (1, 1, 1), the kernel is compiled for (2, 1, 1)"]


def test_a_scalar_its_type_cannot_hold_is_not_silently_truncated():
    launch = Launch((1, 1, 1), (32, 1, 1), [Scalar("int32", 2**31)])
    with pytest.raises(struct.error):
        expected_args(launch, ADDRESSES.__getitem__, _encode)


def test_launch_description_survives_the_pipe():
    launch = _launch()
    assert launch_from_json(launch_to_json(launch)) == launch
    assert isinstance(launch.args[0], TensorMap) and isinstance(launch.args[2], Buffer)


# -- where this GPU's limits are below the target's ----------------------------------------------------


def test_hopper_takes_every_sm100a_launch_unchanged():
    launch = _launch()
    fitted = fit(launch, ENTRY, limits("sm_90a"), limits("sm_100a"))
    assert fitted.launch == launch and fitted.cluster == (2, 1, 1) and fitted.capped == () and fitted.target_violations == ()


def test_a_smaller_gpu_caps_smem_and_cluster_and_checks_the_target_row_instead():
    launch = _launch()
    big_cluster = parse_entry(".entry k(\n.param .u64 p\n)\n.explicitcluster\n.reqnctapercluster 16, 1, 1\n{\n}")
    small = limits("sm_89")  # 99 KB per block, no clusters
    fitted = fit(launch, big_cluster, small, limits("sm_100a"))
    assert fitted.capped == ("smem", "cluster")
    assert fitted.launch.smem_bytes == small.max_smem_per_block and fitted.cluster == (1, 1, 1)
    assert fitted.target_violations == ()  # 16 CTAs and the launch's SMEM fit the B200
    assert fitted.launch.cluster == (1, 1, 1)  # no cluster attribute either
    stub = parse_entry(source_ptx(SourceBundle("stub.cu", stub_source(big_cluster, fitted.cluster)), "sm_89"), "k")
    assert stub.reqnctapercluster is None and stub.signature == big_cluster.signature  # builds where clusters do not exist
    too_big = Launch(launch.grid, launch.block, launch.args, (32, 1, 1), 240 * 1024)
    fitted = fit(too_big, ENTRY.__class__(ENTRY.name, ENTRY.params), small, limits("sm_100a"))
    assert fitted.launch.cluster == (1, 1, 1)
    assert fitted.target_violations == ("target limit: dynamic smem 245760 > sm_100a's 232448",
                                        "target limit: cluster of 32 > sm_100a's 16")


def test_a_study_for_a_gpu_at_hand_is_told_in_one_line():
    result = tuner("check", ROOT / "studies" / "example_sgemm.toml", "--host-dry-run")
    assert result.returncode == 2 and result.stderr.count("\n") == 1
    assert "no target device known for arch" in result.stderr and "sm_100a" in result.stderr


def test_without_a_gpu_the_command_says_so_in_one_line():
    result = tuner("check", ROOT / "studies" / "patch_embed_sm100a.toml", "--host-dry-run", timeout=120)
    assert result.returncode == 2, result.stderr
    assert result.stderr.count("\n") == 1 and "no usable CUDA GPU" in result.stderr


# -- the command, end to end, with a worker that echoes without a GPU -----------------------------------


def _small_study(tmp_path, kernel=ROOT / "kernel" / "gemm_sm100a.py"):
    """patch_embed_sm100a on a smaller M and fewer values: real PTX for each config, in seconds."""
    text = (ROOT / "studies" / "patch_embed_sm100a.toml").read_text()
    text = text.replace('kernel = "../kernel/gemm_sm100a.py"', f'kernel = "{kernel}"')
    text = text.replace("M = 928256", "M = 1024").replace("PHASE2_UNROLL = [4, 8, 16]", "PHASE2_UNROLL = [8]")
    text = text.replace("STAGING_ROW_PAD = [0, 16, 32]", "STAGING_ROW_PAD = [16]").replace("N_STAGES = [3, 4, 5]", "N_STAGES = [4]")
    for axis in ("SNAKE_ORDER", "TMA_L2_PROMOTION", "TMEM_LOAD_WIDTH", "COMBINED_LOAD_VEC"):
        text = "\n".join(line for line in text.splitlines() if not line.startswith(axis))
    path = tmp_path / "small_sm100a.toml"
    path.write_text(text)
    cfg = load_study(path)
    return path, len(Space.from_study(cfg, load_spec(cfg.kernel)).valid)


ECHO = {"TUNER_WORKER_BACKEND": f"{ROOT / 'tests' / 'echo_backend.py'}:EchoBackend"}


def test_the_command_counts_configs_launches_and_differences(tmp_path):
    study, valid = _small_study(tmp_path)
    assert valid == 6  # TN x NUM_EPI_WARPS x ADD_SOURCE less TN=128 with 5 warps
    env = {**ECHO, "TUNER_CACHE_DIR": str(tmp_path / "cache")}
    ok = tuner("check", study, "--host-dry-run", "--jobs", "2", env=env)
    assert ok.returncode == 0, ok.stderr
    assert f"host dry run on Echo GPU of {valid} valid config(s) meant for sm_100a (NVIDIA B200, 148 SMs)" in ok.stdout
    assert f"{valid} distinct launch(es), 2 stub(s)" in ok.stdout  # 2 entries: 192 and 224 threads
    assert "differences: 0 config(s)" in ok.stdout and "row instead: 0 config(s)" in ok.stdout
    assert "PTX 6/6" in ok.stderr and "launched 6/6" in ok.stderr

    flipped = tuner("check", study, "--host-dry-run", "--jobs", "2", env={**env, "FAKE_ECHO_FLIP": "1:77"})
    assert flipped.returncode == 1, flipped.stderr
    assert f"differences: {valid} config(s) (arg 1={valid})" in flipped.stdout

    narrow = tuner("check", study, "--host-dry-run", "--jobs", "2", "--json", env={**env, "FAKE_ECHO_CLUSTER": "1"})
    assert narrow.returncode == 1
    summary = json.loads(narrow.stdout)
    assert summary["differences"] == {"cluster": valid, "cluster_ctas": valid} and summary["configs"] == valid


def _planted_spec(tmp_path, launch_change):
    """gemm_sm100a's spec with its launch changed by ``launch_change`` (dataclasses.replace keywords)."""
    path = tmp_path / "planted_sm100a.py"
    path.write_text(f"""import dataclasses
from tuner.contract.kernel_spec import load_spec

_base = type(load_spec({str(ROOT / "kernel" / "gemm_sm100a.py")!r}))


class Spec(_base):
    source = {str(ROOT / "kernel" / "gemm_sm100a.cu")!r}

    def launch(self, config, problem, device):
        return dataclasses.replace(super().launch(config, problem, device), {launch_change})
""")
    return path


def test_a_launch_that_disagrees_with_the_kernels_cluster_is_counted(tmp_path):
    study, valid = _small_study(tmp_path, _planted_spec(tmp_path, "cluster=(1, 1, 1)"))
    result = tuner("check", study, "--host-dry-run", "--jobs", "2", "--json",
                   env={**ECHO, "TUNER_CACHE_DIR": str(tmp_path / "cache")})
    assert result.returncode == 1, result.stderr
    summary = json.loads(result.stdout)
    assert summary["configs_with_differences"] == valid and summary["differences"]["kernel cluster"] == valid


# -- on a GPU: the real worker, driver and stub ------------------------------------------------------------


@pytest.mark.gpu
def test_gpu_every_launch_of_a_small_sm100a_study_arrives_unchanged(tmp_path):
    study, valid = _small_study(tmp_path)
    result = tuner("check", study, "--host-dry-run", "--json", env={"TUNER_CACHE_DIR": str(tmp_path / "cache")})
    assert result.returncode == 0, result.stdout + result.stderr
    summary = json.loads(result.stdout)
    assert summary["configs"] == valid and summary["configs_with_differences"] == 0 and summary["stubs"] == 2


@pytest.mark.gpu
def test_gpu_a_block_wider_than_the_kernel_allows_fails_to_launch_as_on_a_b200(tmp_path):
    study, valid = _small_study(tmp_path, _planted_spec(tmp_path, "block=(256, 1, 1)"))
    result = tuner("check", study, "--host-dry-run", "--json", env={"TUNER_CACHE_DIR": str(tmp_path / "cache")})
    assert result.returncode == 1, result.stdout + result.stderr
    summary = json.loads(result.stdout)
    differences = summary["differences"]
    assert differences.get("launch", 0) >= 1 and differences.get("kernel threads", 0) >= 1, summary
