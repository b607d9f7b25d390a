"""A worker's device memory known before it runs (docs/protocol.md §5.8): each op's per-shape figure
(``runner.core.op_info.shape_memory``), the paired session's plan from it (pool members,
first wave), the device's memory from the manifest's GPU (``runner.judge.peaks``), and
``campaign init`` / the held-out pick leaving out or refusing what cannot run."""

from __future__ import annotations

import types
from pathlib import Path

import pytest
import torch
from campaign_helpers import committed_repo

from runner.cli import main
from runner.core.device_memory import ShapeMemory
from runner.core.op_info import shape_memory, worker_bytes
from runner.core.shapes import Shape, shape_set
from runner.core.spec import RoundSpec, TimingSettings
from runner.core.worker_messages import Ready, parse_reply, reply_line
from runner.judge.memory_fit import shape_report, unfit_shapes, worker_need
from runner.judge.peaks import device_memory_for
from runner.measure.waves import plan_memory
from runner.store.manifest import load_manifest
from runner.store.sealed import heldout_labels
from runner.worker.bench.serve import Server, device_memory

GIB = 1 << 30
BIG = "Llama-3.1-70B-gate_up-mb4-32768x57344x8192"  # ran out of memory on an H200
TARGETS = [
    s.label for s in shape_set("models") if s.label.startswith("Llama-2-7B") and "-mb1-" in s.label
]
BASIC = ("--test-command", "pytest tests -q", "--benchmark-command", "python bench.py")


def test_device_memory_comes_from_the_device() -> None:
    assert device_memory_for("sm90") == device_memory_for("NVIDIA H200") == 143165 << 20
    assert device_memory_for("MI300X") == 192 * 10**9
    assert device_memory_for("gfx950") == 288 * 10**9
    assert device_memory_for("cpu") is None and device_memory_for("gfx999") is None


def test_the_figure_is_a_pure_function_of_the_shape_and_counts_the_parts() -> None:
    shapes = {s.label: s for s in shape_set("models")}
    big, small = shapes[BIG], shapes[TARGETS[0]]
    fp8, bf16 = shape_memory("gemm_fp8", big), shape_memory("gemm", big)
    assert fp8 == shape_memory("gemm_fp8", big)  # pure
    assert fp8.member > bf16.member and fp8.work > bf16.work  # FP8 copies, quantisation
    out_bytes = 2 * big.m * big.n  # the bf16 output alone
    assert fp8.member > 2 * out_bytes and fp8.work > 8 * out_bytes  # copies, FP8 transients
    every = big.m * big.k + big.n * big.k + big.m * big.n
    assert fp8.work < 16 * every  # one tile of the float32 reference, not all of it
    assert worker_bytes("gemm_fp8", [big, small], 2) == 2 * (
        fp8.member + shape_memory("gemm_fp8", small).member
    ) + max(fp8.work, shape_memory("gemm_fp8", small).work)
    attention = Shape("a", 4096, 4096, 128, 2, params={"heads": 32, "kv_heads": 8})
    quantize = Shape("q", 4096, 4096, 1)
    assert shape_memory("attention", attention).work > 16 * 2 * 32 * 4096 * 4096 - 1
    assert shape_memory("quantize", quantize).member >= 3 * 4096 * 4096


def _spec(pool: int | None = None) -> RoundSpec:
    timing = TimingSettings(warmup_s=0.01, repeats=2, max_repeats=3, budget_s=0.05)
    options = {"granularity": "blockwise"}
    return RoundSpec(
        "c",
        0,
        "baseline",
        0,
        "full",
        "example",
        "gemm_fp8",
        options,
        (),
        timing,
        device="cuda",
        pool=pool,
    )


def test_paired_sessions_plan_pool_and_waves_from_the_figure() -> None:
    """An accept session like the H200 runs' (four Llama-2-7B mb1 targets and a 32768-row
    held-out shape) on an H200: one pair at a time with two members (the checks in
    slices, ``runner.worker.ops.sliced_check``); measured by three roles, as a tournament
    would, its pool shrinks to one member; on an MI355X it keeps two; a round of the
    four targets starts several pairs at once."""
    shapes = {s.label: s for s in shape_set("models")}
    held = shapes["Llama-3.1-8B-gate_up-mb4-32768x28672x4096"]
    accept = [shapes[t] for t in TARGETS] + [held]
    h200, mi355 = device_memory_for("sm90"), device_memory_for("gfx950")
    pair = plan_memory(_spec(), True, h200, accept, roles=2, turns=2)
    assert pair.members == 2 and pair.fits == 1 and pair.first_wave(4) is None
    tight = plan_memory(_spec(), True, h200, accept, roles=3, turns=2)
    assert tight.members == 1 and tight.fits == 1 and tight.first_wave(4) is None
    assert 3 * tight.need <= 0.9 * (h200 or 0) < 3 * worker_need("gemm_fp8", accept, 2)
    roomy = plan_memory(_spec(), True, mi355, accept, roles=2, turns=2)
    assert roomy.members == 2
    rounds = plan_memory(_spec(), True, h200, [shapes[t] for t in TARGETS], roles=2, turns=2)
    assert rounds.members == 2 and (rounds.first_wave(4) or 0) >= 2
    cpu = plan_memory(_spec(), False, None, accept, roles=2, turns=2)
    assert (cpu.members, cpu.fits, cpu.first_wave(4)) == (2, None, None)


def test_the_big_shape_does_not_fit_an_h200_but_fits_an_mi355x() -> None:
    shapes = shape_set("models")
    h200 = {u.label: u for u in unfit_shapes("gemm_fp8", shapes, "sm90")}
    assert BIG in h200 and not set(TARGETS) & set(h200)
    assert "needs" in h200[BIG].describe() and "the device has 139.81 GiB" in h200[BIG].describe()
    assert unfit_shapes("gemm_fp8", shapes, "gfx950") == []
    assert unfit_shapes("gemm_fp8", shapes, "cpu") == []


@pytest.fixture
def repo(tmp_path: Path) -> Path:
    return committed_repo(tmp_path / "target")


def _init(capsys: pytest.CaptureFixture[str], root: Path, *args: str) -> tuple[int, str, str]:
    with pytest.raises(SystemExit) as info:
        main(
            [
                "--campaigns-root",
                str(root),
                "init",
                "--op",
                "gemm_fp8",
                "--granularity",
                "blockwise",
                "--backend",
                "triton",
                *BASIC,
                *args,
            ]
        )
    out, err = capsys.readouterr()
    return int(info.value.code or 0), out, err


@pytest.mark.integration
def test_init_refuses_a_target_shape_the_device_cannot_hold(
    tmp_path: Path, repo: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    shapes = ",".join([TARGETS[0], BIG])
    rc, _, err = _init(
        capsys, tmp_path / "a", "--gpu", "sm90", "--source", str(repo), "--shapes", shapes
    )
    assert rc == 2
    assert f"campaign init: 1 target shape(s) cannot be measured on sm90: {BIG} needs" in err
    assert "the device has 139.81 GiB" in err
    rc, _, err = _init(
        capsys, tmp_path / "b", "--gpu", "gfx950", "--source", str(repo), "--shapes", shapes
    )
    assert (rc, err) == (0, "")  # more memory: the same shapes are kept


@pytest.mark.integration
def test_the_heldout_pick_takes_only_shapes_that_fit_and_says_which_it_left_out(
    tmp_path: Path, repo: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """Seed 17 picked the 70B mb4 shape for the four Llama-2-7B mb1 targets before the
    pick knew the device's memory."""
    rc, out, _ = _init(
        capsys,
        tmp_path / "c",
        "--gpu",
        "sm90",
        "--source",
        str(repo),
        "--shapes",
        ",".join(TARGETS),
        "--heldout-seed",
        "17",
    )
    assert rc == 0
    unfit = sorted(u.label for u in unfit_shapes("gemm_fp8", shape_set("models"), "sm90"))
    assert BIG in unfit
    listed = ", ".join(unfit)
    assert f"held-out pick: {len(unfit)} shape(s) of models left out, they do not fit " in out
    assert f"the device: {listed}\n" in out
    root = Path(out.split("campaign: ")[1].strip())
    m = load_manifest(root / "manifest.yaml")
    held = heldout_labels(root, m)
    assert held and BIG not in held
    assert m.target_shapes == TARGETS


@pytest.mark.integration
def test_baseline_refuses_a_target_shape_the_device_cannot_hold(
    tmp_path: Path, repo: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """A campaign made for an MI355X, moved to an H200 (its manifest's GPU edited): the
    baseline refuses before measuring anything, naming the shape and both figures."""
    from runner.core.errors import ConfigError
    from runner.executors.local import LocalExecutor
    from runner.flow.baseline import run_baseline
    from runner.store.campaign import Campaign

    root = tmp_path / "c"
    rc, out, _ = _init(
        capsys,
        root,
        "--gpu",
        "gfx950",
        "--source",
        str(repo),
        "--shapes",
        ",".join([TARGETS[0], BIG]),
        "--executor",
        "local",
    )
    assert rc == 0
    folder = Path(out.split("campaign: ")[1].strip())
    manifest = folder / "manifest.yaml"
    text = manifest.read_text(encoding="utf-8")
    manifest.write_text(text.replace("target_gpu: gfx950", "target_gpu: sm90"), encoding="utf-8")
    campaign = Campaign.load(folder)
    assert campaign.manifest.target_gpu == "sm90"
    with pytest.raises(ConfigError) as info:
        run_baseline(campaign, LocalExecutor(), passes=2, progress=lambda _: None)
    assert f"campaign baseline: 1 target shape(s) cannot be measured on sm90: {BIG}" in str(
        info.value
    )
    assert info.value.return_code == 2 and not (folder / "rounds" / "round-1").exists()


def test_the_shape_report_puts_the_measured_peak_beside_the_figure() -> None:
    """Calibration (docs/protocol.md §5.8): a paired session's memory report gives per shape the
    op's figure for one worker with the session's pool and, only where a GPU worker measured
    it, its peak; a shape nobody measured has no ``measured`` field."""
    shapes = [s for s in shape_set("models") if s.label in TARGETS[:2]]
    report = shape_report("gemm_fp8", shapes, 2, {TARGETS[0]: 123})
    assert report[TARGETS[0]].to_dict() == {
        "estimate": shape_memory("gemm_fp8", shapes[0]).worker(2),
        "measured": 123,
    }
    assert report[TARGETS[1]].to_dict() == {
        "estimate": shape_memory("gemm_fp8", shapes[1]).worker(2)
    }
    assert report[TARGETS[1]] == ShapeMemory(shape_memory("gemm_fp8", shapes[1]).worker(2))


def _server(device: str) -> Server:
    spec = RoundSpec(
        "c",
        0,
        "baseline",
        0,
        "full",
        "example",
        "gemm",
        {},
        (Shape("s1", 64, 96, 128), Shape("s2", 256, 128, 64)),
        TimingSettings(),
        device=device,
        pool=2,
    )
    gemm = types.SimpleNamespace(gemm=lambda a, b, trans_b: a @ b.t())
    from runner.worker.ops.gemm import GemmOp

    server = Server(spec, Path("."), GemmOp(types.SimpleNamespace(ops=gemm), {}), device)
    server.prepare()
    return server


def test_a_cpu_worker_reports_no_shape_peaks() -> None:
    """On the CPU a serving worker measures no device memory: its ready message has no
    ``shape_peaks`` (absent, not zero) and no memory figures."""
    server = _server("cpu")
    assert all(st.cases and not st.error for st in server.states)
    ready = server.peaks.ready(("s1", "s2"), device_memory("cpu"))
    assert ready == Ready(("s1", "s2"), {}) and ready.shape_peaks == {}
    assert "shape_peaks" not in reply_line(ready)


@pytest.mark.gpu
@pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a GPU")
def test_a_gpu_worker_measures_each_shapes_peak() -> None:
    """On a GPU each shape's preparation peak is measured apart (its own window), above
    what the worker held before it, and the ready report's ``reserved`` covers them."""
    server = _server("cuda")
    ready = server.peaks.ready(("s1", "s2"), device_memory("cuda"))
    peaks = ready.shape_peaks
    assert set(peaks) == {"s1", "s2"} and all(v > 0 for v in peaks.values())
    assert ready.memory["reserved"] >= max(peaks.values())
    assert parse_reply(reply_line(ready)) == ready  # the peaks cross the wire
