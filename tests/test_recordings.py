"""Recorded tables as inputs: the objective's direction, every field's type, one spelling per
value, and recordings that do not belong to the study (issue 33, items 4, 6 and 10)."""

import json

import pytest

from tests.conftest import PNPOLY, ROOT
from tests.test_bad_input import GOOD, assert_one_line_exit_2, tuner_here
from tuner.errors import UserError
from tuner.evaluate.replay import load_recording, make_replay_spec, recorded_valid, recording_space
from tuner.study.file import parse_study

# -- a Kernel Tuner cache's objective and its direction ----------------------------------------------------------

#: three configs: the fastest does the most GFLOP/s
TIMES = {1: 4.0, 2: 1.0, 3: 2.0}


def _cache(objective, higher=None, with_time=True):
    flops = 2e9
    cache = {}
    for x, ms in TIMES.items():
        entry = {"x": x, "GFLOP/s": flops / (ms * 1e-3) / 1e9, "score": 10 - ms}
        if with_time:
            entry.update(time=ms, times=[ms, ms])
        cache[str(x)] = entry
    data = {"device_name": "GPU", "kernel_name": "k", "tune_params_keys": ["x"], "tune_params": {"x": [1, 2, 3]},
            "objective": objective, "cache": cache}
    if higher is not None:
        data["objective_higher_is_better"] = higher
    return data


def _replay(tmp_path, capsys, monkeypatch, data, *flags):
    path = tmp_path / "cache.json"
    path.write_text(json.dumps(data))
    return path, tuner_here(capsys, monkeypatch, "run", "--replay", path, "--storage", "memory", "--trials", 3,
                            "--sampler", "grid", "--json", *flags)


@pytest.mark.parametrize("objective,higher", [("GFLOP/s", None), ("GFLOP/s", True), ("score", True), ("score", None),
                                             ("energy", None), ("GFLOPS/W", None), ("time", None)])
def test_a_cache_tuned_for_any_objective_replays_its_time(objective, higher, tmp_path, capsys, monkeypatch):
    """GFLOP/s, energy, a custom score: the replay minimises the recorded time, as the tuner does, and
    says so; the fastest config wins and its blocks are times (the pruner compares like with like)."""
    data = _cache(objective, higher)
    for entry in data["cache"].values():
        entry["energy"] = entry["time"] / 1000 * (4 - entry["x"])  # another ranking than time's
    path, result = _replay(tmp_path, capsys, monkeypatch, data)
    assert result.returncode == 0, result.stderr
    best = json.loads(result.stdout.strip().splitlines()[-1])["best"]
    assert best["params"] == {"x": 2} and best["ms"] == pytest.approx(min(TIMES.values()))
    said = [f"the cache was tuned for {objective}: the replay minimises its recorded time, as the tuner does"]
    assert load_recording(path).notes == (said if objective != "time" else [])


@pytest.mark.parametrize("data,fragment", [
    (_cache("GFLOP/s", with_time=False), "has no 'time'"),  # no time to minimise
    (_cache("time", higher="yes"), "'objective_higher_is_better' must be true or false"),
], ids=["without time", "direction not a bool"])
def test_an_objective_the_replay_cannot_minimise_is_one_line(data, fragment, tmp_path, capsys, monkeypatch):
    path, result = _replay(tmp_path, capsys, monkeypatch, data)
    assert str(path) in assert_one_line_exit_2(result, fragment)


# -- every field's type: a list (or an object) where a scalar belongs, and the reverse -----------------------------


def _kt_edit(edit):
    data = _cache("time")
    edit(data, data["cache"]["1"])
    return data


def _t4(**changes):
    entry = {"configuration": {"A": 1, "B": 2}, "invalidity": "correct", "measurements": [{"name": "time", "value": 1.0}],
             "times": {"runtimes": [1.0, 1.1]}, "objectives": ["time"]}
    entry.update(changes)
    return {"schema_version": "1.0.0", "results": [entry]}


def _ktt(*results, unit="Microseconds"):
    """A KTT output file: ``results`` as (a, b, status, duration in ``unit``)."""
    return {"Metadata": {"Device": "GPU", "TimeUnit": unit, "KttVersion": "2.1.0"},
            "Results": [{"KernelName": "k", "Status": status, "TotalDuration": duration,
                         "Configuration": [{"Name": "A", "Value": a, "ValueType": "UnsignedInt"},
                                           {"Name": "B", "Value": b, "ValueType": "UnsignedInt"}]}
                        for a, b, status, duration in (results or [(1, 2, "Ok", 1500.0)])]}


def _ktt_edit(edit):
    data = _ktt()
    edit(data, data["Results"][0])
    return data


WRONG_TYPES = [
    ("kt objective", _kt_edit(lambda d, e: d.update(objective=["time"])), "'objective'"),
    ("kt device_name", _kt_edit(lambda d, e: d.update(device_name=["GPU"])), "'device_name'"),
    ("kt kernel_name", _kt_edit(lambda d, e: d.update(kernel_name={"a": 1})), "'kernel_name'"),
    ("kt tune_params_keys", _kt_edit(lambda d, e: d.update(tune_params_keys=[["x"]])), "tune_params_keys"),
    ("kt tune_params_keys a string", _kt_edit(lambda d, e: d.update(tune_params_keys="x")), "'tune_params_keys'"),
    ("kt tune_params a list", _kt_edit(lambda d, e: d.update(tune_params=[["x", [1]]])), "'tune_params'"),
    ("kt tune_params value of lists", _kt_edit(lambda d, e: d.update(tune_params={"x": [[1], [2]]})), "tune_params 'x'"),
    ("kt entry value a list", _kt_edit(lambda d, e: e.update(x=[1])), "'x'"),
    ("kt entry time a list", _kt_edit(lambda d, e: e.update(time=[1.0])), "'time'"),
    ("kt entry times of lists", _kt_edit(lambda d, e: e.update(times=[[1.0]])), "'times'"),
    ("t4 results an object", {"schema_version": "1.0.0", "results": {"a": 1}}, "'results'"),
    ("t4 entry a list", {"schema_version": "1.0.0", "results": [_t4()["results"][0], [1]]}, "result 1"),
    ("t4 configuration a list", _t4(configuration=[1, 2]), "configuration"),
    ("t4 configuration value a list", _t4(configuration={"A": [1], "B": 2}), "'A'"),
    ("t4 invalidity a list", _t4(invalidity=["correct"]), "'invalidity'"),
    ("t4 measurement a list", _t4(measurements=[["time", 1.0]]), "'measurements'"),
    ("t4 measurement name a list", _t4(measurements=[{"name": ["time"], "value": 1.0}]), "'name'"),
    ("t4 measurement value a list", _t4(measurements=[{"name": "time", "value": [1.0]}]), "time"),
    ("t4 times a list", _t4(times=[1.0]), "'times'"),
    ("t4 runtimes an object", _t4(times={"runtimes": {"a": 1.0}}), "'runtimes'"),
    ("t4 runtimes of lists", _t4(times={"runtimes": [[1.0]]}), "runtimes"),
    ("ktt Metadata a list", _ktt_edit(lambda d, e: d.update(Metadata=[1])), "'Metadata'"),
    ("ktt Results an object", _ktt_edit(lambda d, e: d.update(Results={"a": 1})), "'Results'"),
    ("ktt no results", _ktt_edit(lambda d, e: d.update(Results=[])), "no results"),
    ("ktt TimeUnit unknown", _ktt_edit(lambda d, e: d["Metadata"].update(TimeUnit="Ticks")), "'TimeUnit' must be one of"),
    ("ktt TimeUnit missing", _ktt_edit(lambda d, e: d["Metadata"].pop("TimeUnit")), "'TimeUnit' must be one of"),
    ("ktt result a list", _ktt_edit(lambda d, e: d["Results"].append([1])), "result 1"),
    ("ktt Configuration an object", _ktt_edit(lambda d, e: e.update(Configuration={"A": 1})), "'Configuration'"),
    ("ktt Configuration entry a list", _ktt_edit(lambda d, e: e["Configuration"].append(["C", 1])), "'Configuration'"),
    ("ktt Configuration entry without a value", _ktt_edit(lambda d, e: e["Configuration"][0].pop("Value")), "'Value'"),
    ("ktt Name a list", _ktt_edit(lambda d, e: e["Configuration"][0].update(Name=["A"])), "'Name'"),
    ("ktt Value a list", _ktt_edit(lambda d, e: e["Configuration"][0].update(Value=[1])), "'A'"),
    ("ktt Status a list", _ktt_edit(lambda d, e: e.update(Status=["Ok"])), "'Status'"),
    ("ktt Status missing", _ktt_edit(lambda d, e: e.pop("Status")), "'Status'"),
    ("ktt TotalDuration text", _ktt_edit(lambda d, e: e.update(TotalDuration="fast")), "'TotalDuration'"),
    ("ktt TotalDuration zero", _ktt_edit(lambda d, e: e.update(TotalDuration=0.0)), "finite and positive"),
    ("ktt later result missing a name", _ktt_edit(lambda d, e: d["Results"].append(
        {"Status": "Ok", "TotalDuration": 1.0, "Configuration": [{"Name": "A", "Value": 2}]})), "result 1: Configuration has no B"),
]


@pytest.mark.parametrize("data,fragment", [c[1:] for c in WRONG_TYPES], ids=[c[0] for c in WRONG_TYPES])
def test_a_field_of_the_wrong_type_is_one_line_naming_file_and_field(data, fragment, tmp_path, capsys, monkeypatch):
    path, result = _replay(tmp_path, capsys, monkeypatch, data)
    line = assert_one_line_exit_2(result, fragment)
    assert str(path) in line and len(line) < 400


# -- one spelling per value --------------------------------------------------------------------------------------


@pytest.mark.parametrize("values,fragment", [
    ('[1, "1"]', "lists a value twice: 1"),
    ('[8, "010"]', "'010' is 8"),
    ('["0x8", 8]', "must be an integer or a C identifier"),  # hex: not a define value
    ('["09"]', "not a C integer"),
], ids=["1 and '1'", "8 and '010' (octal)", "hex", "invalid octal"])
def test_an_axis_value_has_one_spelling(values, fragment):
    text = GOOD.replace("UNROLL_K = [0, 1]", f"UNROLL_K = {values}")
    import tomllib

    with pytest.raises(UserError, match=fragment.replace("(", r"\(")):
        parse_study(tomllib.loads(text))


def test_numbers_written_as_text_are_the_numbers_the_compiler_reads():
    import tomllib

    cfg = parse_study(tomllib.loads(GOOD.replace("UNROLL_K = [0, 1]", 'UNROLL_K = ["0", "010"]')
                                    .replace("M_DIM = 1024", 'M_DIM = "1024"')))
    assert cfg.tier2["UNROLL_K"] == [0, 8] and cfg.problem["M_DIM"] == 1024


def test_a_recording_lists_one_value_once(tmp_path, capsys, monkeypatch):
    data = _cache("time")
    data["tune_params"]["x"] = [1, 2, 3, "3"]
    path, result = _replay(tmp_path, capsys, monkeypatch, data)
    assert_one_line_exit_2(result, "lists a value twice: 3")
    data["tune_params"]["x"] = ["1", "2", "3"]  # all as text: the same space as numbers
    data["cache"]["1"]["x"] = "01"
    path.write_text(json.dumps(data))
    recording = load_recording(path)
    assert recording.axes == {"x": [1, 2, 3]} and recording.lookup({"x": 1}).ms == TIMES[1]


# -- recorded CSV rows -------------------------------------------------------------------------------------------

CSV = "BLOCK,THREAD_TILE,UNROLL_K,ms,status\n"


@pytest.mark.parametrize("text,fragment", [
    (CSV + "64,4,0,,ok\n", "status ok needs its time"),
    (CSV + "64,4,0,,\n", "status ok needs its time"),  # no status is ok
    (CSV + "64,4,0,1.0,fine\n", "status 'fine' is unknown"),
    (CSV + "64,4,0,1.0,OK\n", "status 'OK' is unknown"),
    ("BLOCK,THREAD_TILE,UNROLL_K,UNROLL_K,ms,status\n64,4,0,1,1.0,ok\n", "'UNROLL_K' appears twice"),
    ("BLOCK,THREAD_TILE,UNROLL_K,ms,ms,status\n64,4,0,1.0,2.0,ok\n", "'ms' appears twice"),
    ("BLOCK,THREAD_TILE,UNROLL_K,EXTRA,ms,status\n64,4,0,1,1.0,ok\n", "EXTRA"),
], ids=["ok without time", "no status, no time", "unknown status", "status in capitals", "define column twice",
        "ms twice", "a define the study does not have"])
def test_bad_recorded_rows_and_columns(text, fragment, tmp_path, capsys, monkeypatch):
    study = tmp_path / "study.toml"
    study.write_text(GOOD)
    path = tmp_path / "rec.csv"
    path.write_text(text)
    result = tuner_here(capsys, monkeypatch, "run", study, "--replay", path, "--storage", "memory", "--trials", 2)
    assert str(path) in assert_one_line_exit_2(result, fragment)


def test_our_own_recording_against_another_study_is_one_line(capsys, monkeypatch):
    """The tpe40 recording (patch_embed_sm90a.toml's axes) against the Hopper grid study."""
    recording = ROOT / "studies" / "recorded" / "patch_embed_sm90a_tpe40_h200.csv"
    result = tuner_here(capsys, monkeypatch, "run", ROOT / "studies" / "patch_embed_sm90a_hopper_grid.toml",
                        "--replay", recording, "--storage", "memory", "--trials", 3)
    assert "EPI_SLOTS" in assert_one_line_exit_2(result, "not axes of patch_embed_sm90a_hopper_grid.toml")


@pytest.mark.parametrize("text,failed", [
    ("BLOCK,TILE,ms,status\n64,1,3.0,ok\n64,2,2.0,ok\n128,1,1.5,ok\n128,2,,compile_error\n", "compile_error=1"),
    ("BLOCK,TILE,ms\n64,1,3.0\n64,2,2.0\n128,1,1.5\n128,2,\n", "failed=1"),  # no status: a row without a time failed
    # a grid's table lists the configs the kernel's model rejected too: they are not configs of the space
    ("BLOCK,TILE,ms,status\n64,1,3.0,ok\n64,2,2.0,ok\n128,1,1.5,ok\n128,2,,compile_error\n256,1,,invalid\n", "compile_error=1"),
], ids=["with status", "times only", "with rejected rows"])
def test_a_results_table_without_its_study_file_replays_over_the_configs_it_records(text, failed, tmp_path, capsys,
                                                                                      monkeypatch):
    """A brute-force table from a grid run elsewhere (define columns and times) has no study file: its recorded
    configs are the space, as a Kernel Tuner cache's are, and the run says so."""
    path = tmp_path / "grid.csv"
    path.write_text(text)
    result = tuner_here(capsys, monkeypatch, "run", "--replay", path, "--storage", "memory", "--trials", 4)
    assert result.returncode == 0, result.stderr
    out = result.stdout + result.stderr
    assert f"replay file {path}: no study file: the space is the 4 configs it records" in out
    assert f"{failed}, ok=3" in out and "-DBLOCK=128 -DTILE=1" in out


def test_a_paired_studys_table_ranks_its_configs_by_their_ratios():
    """Our Hopper grid table: 'value' is each config's ratio to the reference launched alternately, 'ms' its own
    median, which moved with the clock (1.3-1.9 GHz). Replayed, it ranks as its Kernel Tuner cache does (whose
    'time' is the ratio on one scale), and its winner is the documented one; by 'ms' it was the 46th."""
    recorded = ROOT / "studies" / "recorded"
    table = load_recording(recorded / "patch_embed_sm90a_hopper_grid_h200.csv")
    cache = load_recording(recorded / "patch_embed_sm90a_hopper_grid_h200.json")
    assert table.notes and "paired ratios ('value')" in table.notes[0]

    def ranked(recording):
        ok = sorted((r.ms, key) for key, r in recording.records.items() if r.status == "ok")
        return [dict(zip(recording.axes, key, strict=True)) for _, key in ok]

    table_order, cache_order = ranked(table), ranked(cache)
    assert table_order[:10] == cache_order[:10]
    best = table_order[0]
    assert (best["BLOCK_N"], best["N_STAGES"], best["EPI_BATCH"], best["L2_PROMO"]) == (128, 5, 8, 256)
    # a table of an unpaired study ('value' is its 'ms') keeps its times
    unpaired = load_recording(recorded / "patch_embed_sm90a_tpe40_h200.csv")
    assert not unpaired.notes


# -- a cache whose product is far larger than what it holds ---------------------------------------------------------

def _sparse_cache(path, axes=7, values=10, stride=997):
    """A Kernel Tuner cache over ``values ** axes`` configs (10 million: Kernel Tuner's hotspot has 4.4 million)
    holding a few dozen: every ``stride``-th of the product's first 60,000, one of them recorded as failed."""
    names = [f"p{i}" for i in range(axes)]
    cache = {}
    for n in range(0, 60_000, stride):
        digits = [(n // values ** i) % values for i in reversed(range(axes))]
        entry = dict(zip(names, digits, strict=True))
        entry.update(time=1.0 + abs(n - 30_000) / 60_000, times=[1.0 + abs(n - 30_000) / 60_000] * 4)
        cache[",".join(map(str, digits))] = entry
    cache[",".join(["0"] * axes)]["time"] = "InvalidConfig"
    path.write_text(json.dumps({"tune_params_keys": names, "tune_params": {n: list(range(values)) for n in names},
                                "objective": "time", "cache": cache}))
    return path


def test_a_cache_over_a_product_of_millions_replays_what_it_holds(tmp_path, capsys, monkeypatch):
    """The valid set of a recording is its records: the size of the product is no limit (it is for a kernel's
    own model, which checks every config), and a run over every recorded config ends on the fastest."""
    from tuner.search.space import MAX_CONFIGS

    path = _sparse_cache(tmp_path / "sparse.json")
    recording = load_recording(path)
    space = recording_space(recording)
    assert space.total == 10 ** 7 > MAX_CONFIGS
    ran = [dict(zip(recording.axes, key, strict=True)) for key, record in recording.records.items() if record.status == "ok"]
    assert len(space.valid) == len(ran) == 60
    result = tuner_here(capsys, monkeypatch, "run", "--replay", path, "--storage", "memory", "--trials", len(ran),
                        "--json")
    assert result.returncode == 0, result.stderr
    best = json.loads(result.stdout.strip().splitlines()[-1])["best"]
    fastest = min(ran, key=lambda params: recording.lookup(params).ms)
    assert best["params"] == fastest and best["ms"] == pytest.approx(recording.optimum())


@pytest.mark.parametrize("name", ["convolution_RTX_Titan.json.gz", "pnpoly_RTX_3090.json.gz", "sparse"])
def test_the_recorded_valid_set_is_what_checking_the_product_finds(name, tmp_path):
    """Read off the records, the valid set, its order (the product's) and the counts of invalid configs are those
    of the replay spec's check run over every config of the product."""
    from tuner.search.enumeration import enumerate_valid

    path = _sparse_cache(tmp_path / "sparse.json", axes=5, stride=7) if name == "sparse" else ROOT / "tests/data/kernel_tuner" / name
    recording = load_recording(path)
    known = recorded_valid(recording)
    total = recording_space(recording).total
    checked = enumerate_valid(make_replay_spec(recording), {}, recording.axes, {}, total, jobs=1)
    assert known.valid == checked.valid and len(known.valid) > 0
    assert known.invalid == checked.invalid and known.invalid_examples == checked.invalid_examples
    assert len(known.valid) + sum(known.invalid.values()) == total


# -- KTT (Kernel Tuning Toolkit) output -----------------------------------------------------------------------------

KTT_PNPOLY = ROOT / "tests/data/ktt/KTPnpolyOutput_3090.json.gz"  # benchmark_hub, MIT (LICENSE there)


@pytest.mark.parametrize("unit,scale", [("Nanoseconds", 1e-6), ("Microseconds", 1e-3), ("Milliseconds", 1.0),
                                        ("Seconds", 1e3)])
def test_a_ktt_output_replays_in_milliseconds_with_its_failures_as_ours(unit, scale, tmp_path, capsys, monkeypatch):
    """Each KTT status is one of ours: a launch beyond the device's limits is no config of the space (not a
    trial), the other failures are trials that failed; the fastest config wins, its time in milliseconds."""
    data = _ktt((1, 1, "Ok", 4000.0), (1, 2, "Ok", 2500.0), (2, 1, "CompilationFailed", 0.0),
                (2, 2, "ValidationFailed", 900.0), (3, 1, "ComputationFailed", 0.0), (3, 2, "DeviceLimitsExceeded", 0.0),
                (4, 1, "Ok", 3000.0), unit=unit)
    path, result = _replay(tmp_path, capsys, monkeypatch, data)
    recording = load_recording(path)
    assert recording.format == "ktt" and recording.device == "GPU" and recording.kernel == "k"
    assert recording.axes == {"A": [1, 2, 3, 4], "B": [1, 2]}
    assert recording.optimum() == pytest.approx(2500.0 * scale)
    assert len(recording_space(recording).valid) == 6  # 8 in the product: (4, 2) not recorded, (3, 2) beyond limits
    result = tuner_here(capsys, monkeypatch, "run", "--replay", path, "--storage", "memory", "--trials", 10,
                        "--sampler", "grid", "--json")
    assert result.returncode == 0, result.stderr
    summary = json.loads(result.stdout.strip().splitlines()[-1])
    assert summary["statuses"] == {"ok": 3, "compile_error": 1, "mismatch": 1, "launch_error": 1}
    assert summary["best"]["params"] == {"A": 1, "B": 2} and summary["best"]["ms"] == pytest.approx(2500.0 * scale)


def test_ktt_and_kernel_tuner_recordings_of_one_kernel_and_gpu_hold_one_space():
    """KTT's pnpoly on an RTX 3090 is Kernel Tuner's pnpoly space (its defines in capitals, plus the fixed
    VERTICES): the same configs, and the failures of one are mostly those of the other."""
    ktt, kt = load_recording(KTT_PNPOLY), load_recording(PNPOLY)
    assert ktt.format == "ktt" and ktt.device == "NVIDIA GeForce RTX 3090"
    assert {name.lower(): values for name, values in ktt.axes.items() if name != "VERTICES"} == kt.axes
    assert ktt.axes["VERTICES"] == [600]
    order = [list(ktt.axes).index(name.upper()) for name in kt.axes]
    by_kt_key = {tuple(key[i] for i in order): record for key, record in ktt.records.items()}
    assert by_kt_key.keys() == kt.records.keys()
    failed_in_both = sum(r.status != "ok" and kt.records[k].status != "ok" for k, r in by_kt_key.items())
    failed_in_either = sum(r.status != "ok" or kt.records[k].status != "ok" for k, r in by_kt_key.items())
    assert failed_in_both > 0.75 * failed_in_either  # 262 of 330
    assert len(recording_space(ktt).valid) == len(recording_space(kt).valid) == 4092


# -- a Kernel Tuner cache whose run was cut short ----------------------------------------------------------------

def _cut_short(path, keep: int, end: str = "comma"):
    """PNPOLY's cache as Kernel Tuner leaves it when its run stops after ``keep`` configs: the header and one
    line per config, each ending in a comma, and no closing braces. ``end``: "no comma" (the last line's comma
    not written yet), "half" (stopped while writing the next config's line)."""
    import gzip

    lines = gzip.open(PNPOLY, "rt").read().splitlines()
    start = lines.index('"cache": {') + 1
    kept = lines[: start + keep]
    if end == "no comma":
        kept[-1] = kept[-1].rstrip(",")
    elif end == "half":
        kept.append(lines[start + keep][:40])
    path.write_text("\n".join(kept) + "\n")
    return path


@pytest.mark.parametrize("end", ["comma", "no comma", "half"])
def test_a_kernel_tuner_cache_cut_short_replays_the_configs_it_holds(end, tmp_path, capsys, monkeypatch):
    """Kernel Tuner appends each config to its cache as it goes and closes the file at the end, so a run that
    was stopped (a job's time ran out) leaves a file that is not JSON. It reads as Kernel Tuner reads it to
    resume: the configs written in full, the run told so."""
    full = load_recording(PNPOLY)
    path = _cut_short(tmp_path / "cut.json", 120, end)
    recording = load_recording(path)
    assert recording.notes == ["a Kernel Tuner cache cut short, 120 configs"] and not full.notes
    assert list(recording.records) == list(full.records)[:120]
    assert recording.axes == full.axes
    result = tuner_here(capsys, monkeypatch, "run", "--replay", path, "--storage", "memory", "--trials", 3)
    assert result.returncode == 0, result.stderr
    assert f"replay file {path}: a Kernel Tuner cache cut short, 120 configs\n" in result.stderr


def test_a_kernel_tuner_cache_cut_short_is_a_warm_start_source(tmp_path, capsys, monkeypatch):
    path = _cut_short(tmp_path / "cut.json", 200)
    recorded = sum(r.status != "invalid" for r in load_recording(path).records.values())
    assert recorded > 100
    result = tuner_here(capsys, monkeypatch, "run", "--replay", PNPOLY, "--storage", "memory", "--trials", 3,
                        "--warm-start", path, "--warm-start-top", 2)
    assert result.returncode == 0, result.stderr
    assert (f"warm start: 2 configs queued, prior from {recorded} trials of cut.json "
            "(a Kernel Tuner cache cut short, 200 configs)") in result.stderr


def test_a_gzipped_cache_that_ends_early_reads_as_a_cache_cut_short(tmp_path, capsys, monkeypatch):
    """A gzip copy cut short in transfer (a published benchmark file can be one) holds its text up to the cut:
    a Kernel Tuner cache in it reads as a cache cut short, and the run says which."""
    import gzip

    full = load_recording(PNPOLY)
    whole = gzip.compress(gzip.decompress(PNPOLY.read_bytes()))
    path = tmp_path / "cut.json.gz"
    path.write_bytes(whole[: len(whole) // 3])
    recording = load_recording(path)
    kept = len(recording.records)
    assert 0 < kept < len(full.records)
    assert recording.notes == [f"gzip data that ends early, read as a Kernel Tuner cache cut short, {kept} configs"]
    assert list(recording.records) == list(full.records)[:kept]
    assert all(recording.records[k] == full.records[k] for k in recording.records)
    result = tuner_here(capsys, monkeypatch, "run", "--replay", path, "--storage", "memory", "--trials", 3)
    assert result.returncode == 0, result.stderr
    assert f"replay file {path}: gzip data that ends early, read as a Kernel Tuner cache cut short, {kept} configs" in result.stderr


@pytest.mark.parametrize("text", [CSV + "64,4,0,1.5,ok\n" * 2000, '{"schema_version": "1", "results": [' + "{}, " * 2000 + "]}"],
                         ids=["csv", "t4"])
def test_gzip_data_that_ends_early_is_refused_unless_a_kernel_tuner_cache(text, tmp_path, capsys, monkeypatch):
    """A CSV or T4 file cut anywhere would lose rows without a sign: one line, exit 2."""
    import gzip

    path = tmp_path / "cut.gz"
    whole = gzip.compress(text.encode())
    path.write_bytes(whole[: len(whole) // 2])
    with pytest.raises(UserError, match="ends early"):
        load_recording(path)
    study = tmp_path / "study.toml"
    study.write_text(GOOD)
    assert_one_line_exit_2(tuner_here(capsys, monkeypatch, "run", study, "--replay", path, "--storage", "memory"),
                           "broken gzip data (it ends early")


def test_a_file_cut_inside_its_header_is_still_invalid_json(tmp_path, capsys, monkeypatch):
    path = tmp_path / "cut.json"
    text = _cut_short(tmp_path / "whole.json", 5).read_text()
    path.write_text(text[: text.index('"tune_params": {') + 30])
    assert_one_line_exit_2(tuner_here(capsys, monkeypatch, "run", "--replay", path, "--storage", "memory"), "invalid JSON")


def test_a_failure_named_under_a_maximised_objective_reads_as_failed(tmp_path, capsys, monkeypatch):
    """A cache tuned for GFLOP/s names a config's failure there and records no time (fjwillemsen/kernel_tuner_paper's
    expdist A4000 cache: 1,380 of its 2,885 configs): the replay reads the time, and the failure where Kernel Tuner
    put it."""
    data = _cache("GFLOP/s")
    data["cache"]["3"] = {"x": 3, "GFLOP/s": "CompilationFailedConfig", "compile_time": 2787.3}
    path, result = _replay(tmp_path, capsys, monkeypatch, data)
    assert result.returncode == 0, result.stderr
    run = json.loads(result.stdout.strip().splitlines()[-1])
    assert run["statuses"] == {"ok": 2, "compile_error": 1} and run["best"]["params"] == {"x": 2}
    assert load_recording(path).lookup({"x": 3}).status == "compile_error"


def test_a_failure_kernel_tuner_1_4_names_in_its_error_field_reads_as_failed(tmp_path, capsys, monkeypatch):
    """Kernel Tuner 1.4 writes a failed config as ``"__error__": "RuntimeFailedConfig"`` and no time, in a
    cache and in ``tune_kernel``'s results alike."""
    data = _cache("time")
    data["tune_params"]["x"] = [1, 2, 3, 4, 5]
    data["cache"]["4"] = {"x": 4, "__error__": "RuntimeFailedConfig", "compile_time": 812.5}
    data["cache"]["5"] = {"x": 5, "__error__": "InvalidConfig"}
    path, result = _replay(tmp_path, capsys, monkeypatch, data, "--trials", 5)
    assert result.returncode == 0, result.stderr
    run = json.loads(result.stdout.strip().splitlines()[-1])
    assert run["statuses"] == {"ok": 3, "launch_error": 1} and run["best"]["params"] == {"x": 2}
    assert load_recording(path).lookup({"x": 5}).status == "invalid"  # not a config of the space
    results = tmp_path / "results.json"
    results.write_text(json.dumps([*({"x": x, "time": ms} for x, ms in TIMES.items()),
                                   {"x": 4, "__error__": "CompilationFailedConfig"}]))
    assert load_recording(results).lookup({"x": 4}).status == "compile_error"


# -- tune_kernel's results list, as scripts save it ----------------------------------------------------------------

def _results_list():
    """``json.dump(results, f)`` after ``results, env = tune_kernel(...)``: each config's tunable parameters, its
    time, Kernel Tuner's own fields (float timings, a timestamp) and a metric; a failure named in ``time``."""
    entries = [{"x": x, "method": "a" if x < 3 else "b", "time": ms, "times": [ms, ms], "GFLOP/s": 2.0 / ms,
                "compile_time": 812.5, "benchmark_time": 3.25, "timestamp": "2024-01-19 13:16:15+00:00"}
               for x, ms in TIMES.items()]
    entries.append({"x": 4, "method": "b", "time": "CompilationFailedConfig", "compile_time": 10.0,
                    "timestamp": "2024-01-19 13:16:16+00:00"})
    return entries


def test_a_kernel_tuner_results_list_replays_with_its_integer_and_name_fields_as_the_defines(tmp_path, capsys, monkeypatch):
    """benvanwerkhoven/kernel_tuner_paper keeps its brute-force runs this way (convolution, GEMM, pnpoly): the list
    names no tunable parameters, so the defines are the fields that hold integers or names in every entry."""
    path = tmp_path / "results.json"
    path.write_text(json.dumps(_results_list()))
    recording = load_recording(path)
    assert list(recording.axes) == ["x", "method"] and recording.axes["x"] == [1, 2, 3, 4]
    assert recording.lookup({"x": 2, "method": "a"}).ms == pytest.approx(1.0)
    assert recording.lookup({"x": 4, "method": "b"}).status == "compile_error"
    assert recording.notes == ["a Kernel Tuner results list of 4 configs: its defines read as x, method"]
    result = tuner_here(capsys, monkeypatch, "run", "--replay", path, "--storage", "memory", "--trials", 4, "--json")
    assert result.returncode == 0, result.stderr
    run = json.loads(result.stdout.strip().splitlines()[-1])
    assert run["statuses"] == {"ok": 3, "compile_error": 1} and run["best"]["params"] == {"x": 2, "method": "a"}


def test_an_old_results_list_reads_its_1e20_times_as_failed(tmp_path):
    path = tmp_path / "results.json"
    path.write_text(json.dumps([{"x": x, "time": ms} for x, ms in TIMES.items()] + [{"x": 4, "time": 1e20}]))
    recording = load_recording(path)
    assert recording.lookup({"x": 4}).status == "launch_error" and recording.lookup({"x": 3}).ms == pytest.approx(2.0)
    assert recording.notes[1].startswith("configs with time 1e20") and recording.notes[1].endswith("1 configs")


@pytest.mark.parametrize("entries,fragment", [
    ([{"x": 0.5, "time": 1.0}, {"x": 1.5, "time": 2.0}], "no field holds integers or names in every entry"),
    ([{"x": 1, "time": 1.0}, {"x": 2}], "result 1 has no 'time'"),
    ([{"x": 1, "time": 1.0}, {"x": 2, "time": -3.0}], "result 1: 'time'"),
], ids=["no define field", "an entry without a time", "a negative time"])
def test_a_bad_results_list_is_one_line(entries, fragment, tmp_path, capsys, monkeypatch):
    path = tmp_path / "results.json"
    path.write_text(json.dumps(entries))
    result = tuner_here(capsys, monkeypatch, "run", "--replay", path, "--storage", "memory", "--trials", 2)
    assert str(path) in assert_one_line_exit_2(result, fragment)


# -- Kernel Tuner 0.4.1 and earlier: a failed config's time is 1e20 ------------------------------------------------

def test_a_time_of_1e20_from_kernel_tuner_before_0_4_2_reads_as_a_failed_config(tmp_path, capsys, monkeypatch):
    """Kernel Tuner wrote ``"time": 1e20`` for a config that failed to compile or run until 0.4.2 (its cache files of
    that time, e.g. GPU_benchmarking_paper's MI50 convolution, hold hundreds); read as a time, it is a config 1e20 ms
    slow that the feasibility model never learns from."""
    data = _cache("time")
    del data["objective"]  # caches of that time name no objective
    data["cache"]["3"] = {"x": 3, "time": 1e20}
    path, result = _replay(tmp_path, capsys, monkeypatch, data)
    assert result.returncode == 0, result.stderr
    run = json.loads(result.stdout.strip().splitlines()[-1])
    assert run["statuses"] == {"ok": 2, "launch_error": 1} and run["best"]["params"] == {"x": 2}
    recording = load_recording(path)
    assert recording.notes == ["configs with time 1e20, Kernel Tuner's mark (0.4.1 and earlier) of a config that failed "
                               "to compile or run: read as failed, 1 configs"]
    assert recording.lookup({"x": 3}).status == "launch_error"
    assert recording.lookup({"x": 1}).status == "ok" and recording.lookup({"x": 1}).ms == pytest.approx(TIMES[1])


# -- Kernel Tuner 1.1-1.3 on HIP: each launch's time as a (status, ms) pair ----------------------------------------

def _hip_cache(objective="time"):
    """``_cache`` as Kernel Tuner's HIP backend wrote it before its issue #332 was fixed: ``times`` as HIP
    Python's ``[hipSuccess, ms]`` pairs, ``time`` their mean with the zeros, half the true one."""
    data = _cache(objective)
    for entry in data["cache"].values():
        launches = [entry["time"] * 0.98, entry["time"] * 1.02]
        entry["times"] = [[0, ms] for ms in launches]
        entry["time"] = sum(launches) / 4
    return data


def _as_t4(data):
    """A Kernel Tuner cache's configs as Kernel Tuner's T4 output holds them (``runtimes`` as the cache's ``times``)."""
    return {"schema_version": "1.0.0", "metadata": {"timeunit": "miliseconds"}, "results": [
        {"configuration": {"x": entry["x"]}, "times": {"runtimes": entry["times"]}, "invalidity": "correct",
         "measurements": [{"name": "time", "value": entry["time"], "unit": ""}], "objectives": ["time"]}
        for entry in data["cache"].values()]}


@pytest.mark.parametrize("objective", ["time", "GFLOP/s", "T4"])
def test_times_kernel_tuner_recorded_as_status_pairs_on_hip_read_as_their_ms(objective, tmp_path, capsys, monkeypatch):
    """In a cache and in Kernel Tuner's T4 output of the same run (benchmark_hub's convolution_milo/W7800_T4.json.gz)."""
    data = _as_t4(_hip_cache()) if objective == "T4" else _hip_cache(objective)
    path, result = _replay(tmp_path, capsys, monkeypatch, data)
    assert result.returncode == 0, result.stderr
    recording = load_recording(path)
    for x, ms in TIMES.items():
        record = recording.lookup({"x": x})
        assert record.times == pytest.approx([ms * 0.98, ms * 1.02])
        assert record.ms == pytest.approx(ms)  # the launches' mean, not the cache's halved "time"
    assert any("(status, ms) pairs" in note and "#332" in note for note in recording.notes)
    best = json.loads(result.stdout.strip().splitlines()[-1])["best"]
    assert best["params"] == {"x": 2} and best["ms"] == pytest.approx(1.0)


def test_a_t4_result_without_a_time_says_what_it_measures(tmp_path, capsys, monkeypatch):
    """Kernel Tuner's T4 output of a search over a strategy's hyperparameters measures a score, not a time."""
    data = _as_t4(_cache("time"))
    for result in data["results"]:
        result["measurements"] = [{"name": "score", "value": -1.3, "unit": ""}]
    _, result = _replay(tmp_path, capsys, monkeypatch, data)
    assert_one_line_exit_2(result, "a correct result with no 'time' measurement (it measures: score)")


@pytest.mark.parametrize("pair", [[1, 2.0], [0, "fast"], [0, 2.0, 3.0]])
def test_a_time_pair_other_than_hip_success_and_ms_is_one_line(pair, tmp_path, capsys, monkeypatch):
    data = _hip_cache()
    data["cache"]["1"]["times"][0] = pair
    path, result = _replay(tmp_path, capsys, monkeypatch, data)
    line = assert_one_line_exit_2(result, "'times'")
    assert "cache entry '1'" in line


def test_a_replay_says_how_close_its_best_came_to_the_recordings_fastest(tmp_path, capsys, monkeypatch):
    """What a search comparison reports: the recording's fastest config in the space, and the fraction
    of its speed the study's best reaches."""
    data = _cache("time")
    path, result = _replay(tmp_path, capsys, monkeypatch, data, "--trials", 1)  # the grid's first config: x=1
    run = json.loads(result.stdout.strip().splitlines()[-1])
    assert run["recorded_best_ms"] == pytest.approx(min(TIMES.values()))
    assert run["fraction_of_recorded_best"] < 1
    assert run["fraction_of_recorded_best"] == pytest.approx(min(TIMES.values()) / run["best"]["ms"], abs=1e-4)
    path, result = _replay(tmp_path, capsys, monkeypatch, data)  # all three
    assert json.loads(result.stdout.strip().splitlines()[-1])["fraction_of_recorded_best"] == 1.0
