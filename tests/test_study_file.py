"""Study files: valid files load; every kind of bad input is one line naming file and key."""

import re
import textwrap

import pytest

from tests.conftest import PNPOLY, ROOT, tuner
from tuner.errors import UserError
from tuner.study.file import load_study
from tuner.study.options import OPTIONS

GOOD = textwrap.dedent(
    f"""
    [study]
    name = "s"
    kernel = "{ROOT}/kernel/example_sgemm.py"
    arch = "sm_90a"
    [problem]
    M_DIM = 256
    N_DIM = 256
    K_DIM = 256
    [space.tier1]
    BLOCK = [32, 64]
    THREAD_TILE = [2, 4]
    [space.tier2]
    UNROLL_K = [0, 1]
    [search]
    sampler = "random"
    mode = "tiered"
    trials = 5
    seed = 3
    [measure]
    repeats = 20
    block = 5
    """
)


def write(tmp_path, text):
    path = tmp_path / "study.toml"
    path.write_text(text)
    return path


def test_good_file_loads(tmp_path):
    cfg = load_study(write(tmp_path, GOOD))
    assert cfg.name == "s" and cfg.arch == "sm_90a"
    assert cfg.tier1 == {"BLOCK": [32, 64], "THREAD_TILE": [2, 4]}
    assert cfg.tier2 == {"UNROLL_K": [0, 1]}
    assert cfg.search.sampler == "random" and cfg.search.mode == "tiered" and cfg.search.seed == 3
    assert cfg.measure.block == 5 and cfg.measure.repeats == 20
    assert cfg.kernel.name == "example_sgemm.py"


@pytest.mark.parametrize(
    "old, new, message",
    [
        ('sampler = "random"', 'sampler = "annealing"', "[search.sampler] 'annealing' unknown"),
        ('arch = "sm_90a"', 'arch = "sm_91"', "[study.arch] 'sm_91' unknown"),
        ("trials = 5", 'trials = "five"', "[search.trials] must be an integer, got 'five'"),
        ("trials = 5", "trials = -1", "[search.trials] must be >= 1, got -1"),
        ("BLOCK = [32, 64]", "BLOCK = []", "[space.tier1.BLOCK] is empty"),
        ("BLOCK = [32, 64]", "BLOCK = 32", "[space.tier1.BLOCK] must be a list"),
        ("BLOCK = [32, 64]", 'BLOCK = ["1 -Xptxas"]', "must be an integer or a C identifier"),
        ("BLOCK = [32, 64]", 'BLOCK = ["1;rm"]', "must be an integer or a C identifier"),
        ("BLOCK = [32, 64]", "BLOCK = [32, 32]", "lists a value twice"),
        ("BLOCK = [32, 64]", 'BLOCK = ["x\\"y"]', "must be an integer or a C identifier"),
        ("M_DIM = 256", '"M DIM" = 256', "define name 'M DIM' must be a C identifier"),
        ("seed = 3", "seeed = 3", "[search.seeed] unknown key"),
        ("[measure]", "[measurement]", "[measurement] unknown section"),
        ("block = 5", "block = 50", "[measure.block] 50 > repeats=20"),
        ('kernel = "', 'kernel = "nowhere/', "[study.kernel]"),
        ('mode = "tiered"', 'mode = "sideways"', "[search.mode] 'sideways' unknown"),
    ],
)
def test_bad_input_is_one_line_naming_file_and_key(tmp_path, old, new, message):
    assert old in GOOD
    path = write(tmp_path, GOOD.replace(old, new, 1))
    with pytest.raises(UserError) as err:
        load_study(path)
    text = str(err.value)
    assert message in text
    assert str(path) in text and "\n" not in text


def test_malformed_toml(tmp_path):
    path = write(tmp_path, GOOD + "\n[[[broken")
    with pytest.raises(UserError, match="not valid TOML"):
        load_study(path)


def test_cli_exits_2_with_one_line(tmp_path):
    path = write(tmp_path, GOOD.replace('arch = "sm_90a"', 'arch = "sm_42"'))
    result = tuner("check", path)
    assert result.returncode == 2
    lines = result.stderr.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith("tuner: error:") and "[study.arch]" in lines[0]


def test_unknown_define_for_kernel(tmp_path):
    path = write(tmp_path, GOOD.replace("UNROLL_K = [0, 1]", "UNROLL_Q = [0, 1]"))
    result = tuner("check", path)
    assert result.returncode == 2 and "UNROLL_Q is not a parameter of kernel spec example_sgemm.py" in result.stderr


def test_space_without_valid_config_is_refused(tmp_path):
    path = write(tmp_path, GOOD.replace("THREAD_TILE = [2, 4]", "THREAD_TILE = [64]"))
    csv = tmp_path / "rec.csv"
    csv.write_text("BLOCK,THREAD_TILE,UNROLL_K,ms,status\n32,64,0,1.0,ok\n")
    result = tuner("run", path, "--storage", f"sqlite:///{tmp_path / 'x.db'}", "--replay", csv)
    assert result.returncode == 2
    assert "no valid configuration in the space" in result.stderr


@pytest.mark.parametrize("opt", [o for o in OPTIONS if o.toml and o.kind in (int, float)], ids=lambda o: o.name)
def test_study_file_key_and_flag_share_one_rule(tmp_path, opt):
    """Every numeric setting refuses the same values in a study file and on the command line."""
    bound = opt.above if opt.above is not None else opt.minimum
    bad = opt.kind(bound - 1 if opt.above is None else bound)
    with pytest.raises(UserError) as err:
        text = re.sub(rf"(?m)^{opt.name} = .*$", "", GOOD)
        load_study(write(tmp_path, text.replace(f"[{opt.section}]", f"[{opt.section}]\n{opt.name} = {bad}", 1)))
    rule = str(err.value).split(f"[{opt.section}.{opt.name}] ", 1)[1]
    assert rule.startswith("must be")
    if "run" in opt.commands:
        result = tuner("run", "--replay", PNPOLY, "--storage", tmp_path / "s.log", opt.flags[0], bad)
        assert result.returncode == 2 and result.stderr == f"tuner: error: {opt.flags[0]} {rule}\n"


def test_seed_out_of_range_in_a_study_file(tmp_path):
    for seed, rule in ((-1, "must be >= 0, got -1"), (2**32, f"must be <= {2**32 - 1}, got {2**32}")):
        with pytest.raises(UserError, match=rf"\[search.seed\] {rule}$"):
            load_study(write(tmp_path, GOOD.replace("seed = 3", f"seed = {seed}")))
