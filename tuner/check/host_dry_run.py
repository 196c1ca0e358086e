"""The host side of a kernel for a GPU we cannot reach, proven on one we can.

A study for another GPU (the SM100a megakernel on a B200) has a host side that nothing runs
before that GPU's first session: the spec's :meth:`~tuner.contract.kernel_spec.KernelSpec.launch` (grid, block,
cluster, dynamic shared memory), the TMA descriptors encoded from it, and the argument array the
worker marshals. Here each valid config's launch, described for the target device, goes through
the engine's worker on this GPU into a *stub*: a kernel with the real entry's name, parameter list
and launch directives (taken from the real kernel's PTX for the study's arch), built for this GPU,
which writes back what it received (:mod:`tuner.device.echo_stub`).

What the spec meant is computed independently: pointers as allocated, scalars packed from their
values, tensor maps as ``cuTensorMapEncodeTiled`` encodes them. Any byte that differs is a
difference. Where this GPU's limit is below the target's (shared memory per block, cluster size),
the stub runs with this GPU's limit and that config's real value is checked against the target's
row of :mod:`tuner.contract.arch` instead, counted per reason.
"""

from __future__ import annotations

import sys
import time
from collections import Counter
from collections.abc import Callable, Sequence
from dataclasses import asdict, dataclass, field, replace

from tuner.compile.ptx_entry import PtxEntry, parse_entry
from tuner.contract.arch import ArchLimits, limits, plain_target
from tuner.contract.kernel_spec import DeviceInfo, Launch
from tuner.device.echo_stub import (
    abi_differences,
    decode_record,
    differences,
    directive_differences,
    launch_to_json,
    record_size,
    stub_source,
)
from tuner.device.protocol import HostDryRunJob, PrepareJob
from tuner.device.supervisor import WorkerDied
from tuner.errors import UserError
from tuner.progress import ProgressLines

#: the device a study's arch means when nobody here has one (a spec's launch may depend on it)
TARGET_DEVICES = {"sm_100a": DeviceInfo("NVIDIA B200", 148, (10, 0), limits("sm_100a").max_smem_per_block)}


# -- fitting a target's launch to this GPU -----------------------------------------------------------


@dataclass(frozen=True)
class Fitted:
    """A target launch as this GPU can take it: the launch and stub cluster actually used, what was
    capped (reasons) and where the real values break the target's own limits."""

    launch: Launch
    cluster: tuple[int, int, int] | None  # the stub's compiled-in cluster dims
    capped: tuple[str, ...] = ()
    target_violations: tuple[str, ...] = ()


def _shrink(dims: tuple[int, int, int], most: int) -> tuple[int, int, int]:
    x, y, z = dims
    while x * y * z > most:
        if x > 1:
            x = (x + 1) // 2
        elif y > 1:
            y = (y + 1) // 2
        else:
            z = (z + 1) // 2
    return x, y, z


def fit(launch: Launch, entry: PtxEntry, host: ArchLimits, target: ArchLimits) -> Fitted:
    """The launch this GPU (``host``) can take in place of ``launch`` meant for ``target``."""
    capped, violations = [], []
    if launch.smem_bytes > host.max_smem_per_block:
        capped.append("smem")
        if launch.smem_bytes > target.max_smem_per_block:
            violations.append(f"target limit: dynamic smem {launch.smem_bytes} > {target.name}'s {target.max_smem_per_block}")
        launch = replace(launch, smem_bytes=host.max_smem_per_block)
    compiled = entry.reqnctapercluster
    dims = compiled or tuple(launch.cluster)
    size = dims[0] * dims[1] * dims[2]
    if size > target.max_cluster_size:
        violations.append(f"target limit: cluster of {size} > {target.name}'s {target.max_cluster_size}")
    if size > host.max_cluster_size:
        capped.append("cluster")
        small = _shrink(dims, host.max_cluster_size)  # type: ignore[arg-type]
        compiled = small if compiled else None
        launch = replace(launch, cluster=small)
    return Fitted(launch, compiled, tuple(capped), tuple(violations))


# -- the whole run -----------------------------------------------------------------------------------


@dataclass
class Case:
    """One distinct (kernel ABI, launch) of the study, and how many valid configs share it."""

    entry: PtxEntry
    launch: Launch
    configs: int = 0
    fitted: Fitted | None = None
    problems: list[str] = field(default_factory=list)


@dataclass
class DryRunSummary:
    study: str
    device: str
    target: str
    target_arch: str
    configs: int = 0
    distinct_launches: int = 0
    stubs: int = 0
    configs_with_differences: int = 0
    differences: dict[str, int] = field(default_factory=dict)  # by kind, counted over configs
    checked_against_target: dict[str, int] = field(default_factory=dict)  # configs, by capped limit
    examples: list[str] = field(default_factory=list)
    ptx_s: float = 0.0
    launch_s: float = 0.0
    duration_s: float = 0.0

    def lines(self) -> list[str]:
        out = [f"{self.study}: host dry run on {self.device} of {self.configs} valid config(s) meant for "
               f"{self.target}: {self.distinct_launches} distinct launch(es), {self.stubs} stub(s)",
               f"  differences: {self.configs_with_differences} config(s)"
               + (" (" + ", ".join(f"{k}={v}" for k, v in sorted(self.differences.items())) + ")" if self.differences else "")]
        if self.checked_against_target:
            out.append(f"  checked against the {self.target_arch} row of the limits table instead (this GPU's limit is lower): "
                       + ", ".join(f"{k}={v}" for k, v in sorted(self.checked_against_target.items())))
        else:
            out.append(f"  checked against the {self.target_arch} row instead: 0 config(s) (no limit of this GPU is lower)")
        out += [f"  e.g. {e}" for e in self.examples[:3]]
        out.append(f"  duration: {self.duration_s:.1f} s (PTX {self.ptx_s:.1f} s, launches {self.launch_s:.1f} s)")
        return out


def _entry_job(job: tuple) -> PtxEntry | str:
    from tuner.compile.nvrtc import kernel_ptx
    from tuner.contract.kernel_spec import load_spec

    spec_path, config, problem, arch = job
    spec = load_spec(spec_path)
    try:
        return parse_entry(kernel_ptx(spec, config, problem, arch, fast=True), spec.kernel_name)
    except (RuntimeError, ValueError) as exc:  # does not compile, or no such entry: that config's difference
        return "ptx: " + " ".join(str(exc).split())[:300]


def real_entries(spec, configs: Sequence[dict], problem: dict, arch: str, jobs: int,
                 tick: Callable[[], None] | None = None) -> list[PtxEntry | str]:
    """The real kernel's entry of each config, from its PTX for ``arch`` (in ``jobs`` processes), or
    why there is none; ``tick`` is called as each one is found."""
    work = [(str(spec.path), c, problem, arch) for c in configs]
    if jobs <= 1 or len(work) <= 1:
        found = []
        for w in work:
            found.append(_entry_job(w))
            if tick:
                tick()
        return found
    from tuner.lifetime import helper_pool

    with helper_pool(jobs) as pool:
        found = []
        for entry in pool.map(_entry_job, work, chunksize=4):
            found.append(entry)
            if tick:
                tick()
        return found


def run(cfg, spec, space, supervisor, jobs: int, chunk: int = 64, timeout_s: float = 120.0,
        say: Callable[[str], None] = lambda line: print(line, file=sys.stderr, flush=True)) -> DryRunSummary:
    """The host dry run of every valid config of a study (``cfg``: its StudyConfig) on the worker's GPU."""
    started = time.perf_counter()
    device_info = TARGET_DEVICES.get(cfg.arch)
    if device_info is None:
        raise UserError(f"host dry run: no target device known for arch {cfg.arch!r} "
                        f"(known: {', '.join(TARGET_DEVICES)}); it is for studies of a GPU not at hand")
    problem = space.problem
    job_base = PrepareJob(spec_path=str(spec.path), problem=problem, seed=0)
    try:
        device = supervisor.start()
    except WorkerDied as exc:
        raise UserError(f"host dry run: no usable CUDA GPU here ({exc}); it runs on a GPU host (an H100/H200)") from None
    supervisor.prepare(job_base)  # the problem's buffers come up while the PTX compiles
    configs = [space.full_config(p) for p in space.valid]
    summary = DryRunSummary(cfg.name, "", f"{cfg.arch} ({device_info.name}, {device_info.sm_count} SMs)", cfg.arch,
                            len(configs))
    say(f"{cfg.name}: {len(configs)} valid configs; compiling each one's PTX for {cfg.arch} ({jobs} processes)")
    ptx = ProgressLines(len(configs), "  PTX", "config", say)
    entries = real_entries(spec, configs, problem, cfg.arch, jobs, ptx.update)
    ptx.close()
    summary.ptx_s = time.perf_counter() - started

    cases, config_case = _distinct_launches(spec, configs, entries, problem, device_info, summary)
    summary.distinct_launches = len(cases)
    summary.device = str(device.get("name", "?"))
    host_arch = plain_target(device.get("cc", (0, 0)))
    host = limits(host_arch)
    host = replace(host, max_smem_per_block=min(host.max_smem_per_block, int(device.get("max_smem_per_block", 0))))
    stubs, runnable = _fitted_with_stubs(spec, cases, host, limits(cfg.arch), host_arch)
    summary.stubs = len(stubs)
    say(f"  {len(cases)} distinct launch(es), {len(stubs)} stub(s) for {host_arch}; launching on {summary.device}")

    launched = time.perf_counter()
    for first in range(0, len(runnable), chunk):
        _launch_part(supervisor, job_base, runnable[first:first + chunk], stubs, timeout_s)
        say(f"  launched {min(first + chunk, len(runnable))}/{len(runnable)} ({time.perf_counter() - started:.0f} s)")
    summary.launch_s = time.perf_counter() - launched

    for config, case_key in zip(configs, config_case, strict=True):
        if case_key is None:
            continue
        case = cases[case_key]
        _count(summary, case.problems, config)
        assert case.fitted is not None
        for reason in case.fitted.capped:
            summary.checked_against_target[reason] = summary.checked_against_target.get(reason, 0) + 1
    summary.duration_s = time.perf_counter() - started
    return summary


def _distinct_launches(spec, configs: list[dict], entries: list[PtxEntry | str], problem: dict, device_info,
                       summary: DryRunSummary) -> tuple[dict[tuple, Case], list[tuple | None]]:
    """The configs grouped by what a launch sends (entry, grid, block, arguments, cluster, SMEM): each
    group launched once; per config its group's key, or None where it has no launch (counted now)."""
    cases: dict[tuple, Case] = {}
    config_case: list[tuple | None] = []
    for config, entry in zip(configs, entries, strict=True):
        if isinstance(entry, str):
            _count(summary, [entry], config)
            config_case.append(None)
            continue
        try:
            launch = spec.launch(config, problem, device_info)
        except Exception as exc:  # the spec's launch() itself fails for a valid config
            reason = f"launch(): {type(exc).__name__}: {' '.join(str(exc).split())[:200]}"
            _count(summary, [reason], config)
            config_case.append(None)
            continue
        key = (entry, launch.grid, launch.block, tuple(launch.args), launch.cluster, launch.smem_bytes)
        case = cases.setdefault(key, Case(entry, launch))
        case.configs += 1
        config_case.append(key)
    return cases, config_case


def _fitted_with_stubs(spec, cases: dict[tuple, Case], host, target, host_arch: str
                       ) -> tuple[dict[tuple, bytes], list[tuple[tuple, Case]]]:
    """Each launch checked against the kernel's ABI and fitted to this GPU; the stubs (one CUBIN per
    entry and cluster shape) and the launches that can run."""
    from tuner.compile.nvrtc import helper_cubin

    stubs: dict[tuple, bytes] = {}
    runnable: list[tuple[tuple, Case]] = []
    for key, case in cases.items():
        case.problems = abi_differences(case.launch, case.entry) + directive_differences(case.launch, case.entry)
        case.fitted = fit(case.launch, case.entry, host, target)
        case.problems += list(case.fitted.target_violations)
        if abi_differences(case.launch, case.entry):
            continue  # the driver would read past an argument: no launch
        stub_key = (case.entry, case.fitted.cluster)
        if stub_key not in stubs:
            stubs[stub_key] = helper_cubin(f"{spec.kernel_name}_stub.cu", stub_source(case.entry, case.fitted.cluster),
                                           host_arch)
        runnable.append((key, case))
    return stubs, runnable


def _launch_part(supervisor, job_base: PrepareJob, part: list[tuple[tuple, Case]], stubs: dict[tuple, bytes],
                 timeout_s: float) -> None:
    """Launch ``part`` in one worker job; each case gains what its stub received otherwise than sent."""
    job = HostDryRunJob(spec_path=job_base.spec_path, problem=job_base.problem, seed=job_base.seed,
                        cases=[{"launch": launch_to_json(c.fitted.launch), "kernel_name": c.entry.name,  # type: ignore[union-attr]
                                "image": stubs[(c.entry, c.fitted.cluster)], "record_size": record_size(c.entry)}  # type: ignore[union-attr]
                               for _, c in part])
    result = supervisor.host_dry_run(job, timeout_s)
    answers = result.extra.get("results", [])
    for i, (_, case) in enumerate(part):
        if i >= len(answers):  # a launch error that took the worker's context with it is still the launch's
            kind = "launch" if result.status == "launch_error" else "worker"
            case.problems.append(f"{kind}: {result.status}: {result.reason}")
            continue
        answer = answers[i]
        if "error" in answer:
            case.problems.append(f"launch: {answer['error']}")
            continue
        fitted = case.fitted
        assert fitted is not None
        received = decode_record(bytes.fromhex(answer["record"]), case.entry)
        case.problems += differences(fitted.launch, case.entry, [bytes.fromhex(s) for s in answer["sent"]], received,
                                     fitted.cluster)


def _count(summary: DryRunSummary, problems: list[str], config: dict) -> None:
    if not problems:
        return
    summary.configs_with_differences += 1
    for kind in Counter(p.split(":")[0] for p in problems):
        summary.differences[kind] = summary.differences.get(kind, 0) + 1
    if len(summary.examples) < 5:
        summary.examples.append(f"{problems[0]} ({', '.join(f'{k}={v}' for k, v in config.items())})")


def command(cfg, spec, space, jobs: int | None, as_json: bool) -> int:
    """``tuner check STUDY --host-dry-run``: the summary printed (or one JSON line); exit code 0 when
    nothing differs, 1 otherwise."""
    import json

    from tuner.compile.nvrtc import default_jobs
    from tuner.device.supervisor import Supervisor

    supervisor = Supervisor.from_env()
    try:
        summary = run(cfg, spec, space, supervisor, jobs or default_jobs())
    finally:
        supervisor.stop()
    if as_json:
        print(json.dumps(asdict(summary)))
    else:
        print("\n".join(summary.lines()))
    return 1 if summary.configs_with_differences else 0
