"""The speed-of-light table and check."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from runner.core.csv_io import read_csv, write_csv
from runner.core.csv_schema import GEMM_SCHEMA, BenchCSV
from runner.core.errors import CampaignError, SpeedOfLightError
from runner.judge.peaks import PEAKS, check_speed_of_light, peak_for
from runner.judge.vetoes import speed_of_light_veto
from runner.measure.passes import light_readings

_FAMILY_PEAKS = {  # an architecture counts at the highest of its family's figures
    "gfx942": (1307.4, 2614.9, 6000.0),  # MI300X, MI325X
    "gfx950": (2500.0, 5000.0, 8000.0),  # MI355X, MI350X
    "sm_90": (989.5, 1979.0, 4800.0),  # H100 SXM, H200
}


@pytest.mark.parametrize(
    ("name", "peaks"),
    [
        ("NVIDIA H200", PEAKS["H200"]),
        ("NVIDIA H200 NVL", PEAKS["H200 NVL"]),
        ("NVIDIA H100 80GB HBM3", PEAKS["H100 SXM"]),
        ("NVIDIA H100 PCIe", PEAKS["H100 PCIe"]),
        ("AMD Instinct MI300X", PEAKS["MI300X"]),
        ("AMD Instinct MI300X VF", PEAKS["MI300X"]),
        ("AMD Instinct MI325X", PEAKS["MI325X"]),
        ("AMD Instinct MI355X", PEAKS["MI355X"]),
        ("gfx942", _FAMILY_PEAKS["gfx942"]),
        ("gfx942:sramecc+:xnack-", _FAMILY_PEAKS["gfx942"]),
        ("gfx950", _FAMILY_PEAKS["gfx950"]),
        ("sm_90", _FAMILY_PEAKS["sm_90"]),
    ],
)
def test_a_device_name_or_architecture_finds_its_peaks(
    name: str, peaks: tuple[float, float, float]
) -> None:
    assert tuple(peak_for(name, dtype) for dtype in ("bf16", "fp8", "hbm")) == peaks


def test_unknown_gpu_and_dtype() -> None:
    assert peak_for("NVIDIA GeForce RTX 4090", "bf16") is None
    assert peak_for("NVIDIA H200", "int4") is None


def test_values() -> None:
    assert peak_for("NVIDIA H200", "bf16") == pytest.approx(989.5)
    assert peak_for("NVIDIA H200", "torch.bfloat16") == pytest.approx(989.5)
    assert peak_for("NVIDIA H200", "fp8") == pytest.approx(1979.0)
    assert peak_for("NVIDIA H200", "hbm") == 4800.0
    assert peak_for("AMD Instinct MI300X", "float8_e4m3fnuz") == pytest.approx(2614.9)
    assert peak_for("AMD Instinct MI355X", "bf16") == 2500.0


def test_arch_family_takes_highest_peak() -> None:
    # gfx942 covers MI300X (5.3 TB/s) and MI325X (6.0 TB/s): never call 5.5 TB/s impossible
    assert peak_for("gfx942", "hbm") == 6000.0
    assert peak_for("gfx942", "bf16") == pytest.approx(1307.4)


def test_table_is_sane() -> None:
    for bf16, fp8, hbm in PEAKS.values():
        assert 0 < bf16 < fp8 <= 2.001 * bf16
        assert hbm > 1000


def test_check_passes_below_peak_and_unknown() -> None:
    check_speed_of_light(790.0, "NVIDIA H200", "bf16")
    check_speed_of_light(1e9, "unknown gpu", "bf16")


def test_check_raises_above_peak() -> None:
    with pytest.raises(SpeedOfLightError, match="exceeds the bf16 peak") as info:
        check_speed_of_light(1200.0, "NVIDIA H200", "bf16", label="8192x8192x8192")
    assert isinstance(info.value, CampaignError)
    assert info.value.return_code == 6
    assert "8192x8192x8192" in str(info.value)
    with pytest.raises(SpeedOfLightError, match="GB/s"):
        check_speed_of_light(5000.0, "NVIDIA H200", "hbm")


def test_tolerance() -> None:
    check_speed_of_light(1000.0, "NVIDIA H200", "bf16", tolerance=0.02)


# ---- the veto a round applies (runner.compare.loop.judge) -------------------------------
def a_pass(folder: Path, tflops: float, gpu: str | None) -> BenchCSV:
    """One pass folder as a worker leaves it: its CSV and, on a GPU, meta.json."""
    folder.mkdir(parents=True)
    values: dict[str, object] = {c: None for c in GEMM_SCHEMA.columns}
    values.update({"label": "4096x4096x4096", "B": 1, "M": 4096, "N": 4096, "K": 4096})
    values.update({"Check": "PASS", "Forward TFLOPS": tflops, "Forward TFLOPS_stddev": 1.0})
    values.update({"Forward Time (ms)": 0.1, "out_snr": 40.0})
    write_csv(folder / "benchmark.csv", GEMM_SCHEMA, [values])
    meta = {"device": "cuda" if gpu else "cpu", **({"gpu_name": gpu} if gpu else {})}
    (folder / "meta.json").write_text(json.dumps(meta), encoding="utf-8")
    return read_csv(folder / "benchmark.csv")


def test_a_candidate_faster_than_its_gpu_is_vetoed(tmp_path: Path) -> None:
    incumbent = a_pass(tmp_path / "pass-01-incumbent", 900.0, "NVIDIA H200")
    honest = a_pass(tmp_path / "pass-02-candidate", 1500.0, "NVIDIA H200")
    impossible = a_pass(tmp_path / "pass-04-candidate", 2500.0, "NVIDIA H200")
    assert speed_of_light_veto(light_readings([honest], "fp8", [incumbent])) is None  # 1979
    veto = speed_of_light_veto(light_readings([honest, impossible], "fp8", [incumbent]))
    assert veto is not None and "faster than the hardware" in veto and "4096x4096x4096" in veto
    # the same numbers as bf16 (peak 989.5): both above
    assert speed_of_light_veto(light_readings([honest], "bf16", [incumbent])) is not None


def test_the_device_is_the_incumbent_s_not_what_the_candidate_says(tmp_path: Path) -> None:
    """A candidate whose worker leaves the GPU's name out of its own meta.json is still
    judged: the device is read from the incumbent's passes, on the same device."""
    incumbent = a_pass(tmp_path / "pass-01-incumbent", 900.0, "NVIDIA H200")
    silent = a_pass(tmp_path / "pass-02-candidate", 2500.0, None)
    assert speed_of_light_veto(light_readings([silent], "fp8", [incumbent])) is not None


def test_the_cpu_and_unknown_gpus_have_no_speed_of_light(tmp_path: Path) -> None:
    cpu = a_pass(tmp_path / "pass-01-incumbent", 1e6, None)
    unknown = a_pass(tmp_path / "pass-03-incumbent", 1e6, "Some Future GPU")
    assert light_readings([cpu], "fp8", [cpu]) == []
    assert speed_of_light_veto(light_readings([cpu], "fp8", [unknown])) is None


def test_a_pass_s_meta_reads_back_as_its_worker_wrote_it(tmp_path: Path) -> None:
    """``meta.json`` as a worker on the CPU writes it (``environment_meta``, the real one,
    torch imported) reads back field for field; a GPU's name is kept only where there is
    one, and a file that is not an object is no record."""
    pytest.importorskip("torch")
    from runner.core.pass_meta import PassMeta, read_meta
    from runner.worker.bench.environment import environment_meta

    written = environment_meta("cpu")
    (tmp_path / "meta.json").write_text(json.dumps(written.to_dict()), encoding="utf-8")
    assert "gpu_name" not in written.to_dict() and read_meta(tmp_path) == written
    assert written.torch and written.python and written.device == "cpu"
    gpu = PassMeta(device="cuda", gpu_name="NVIDIA H200")
    assert PassMeta.from_dict(gpu.to_dict()) == gpu
    (tmp_path / "meta.json").write_text("[]", encoding="utf-8")
    assert read_meta(tmp_path) is None and read_meta(tmp_path / "nowhere") is None


EMPIRICAL = Path(__file__).parent / "data" / "empirical_peak" / "mi355x.json"


def test_the_veto_uses_the_recorded_empirical_peak(tmp_path: Path) -> None:
    """FP8 on gfx950 measured about half its datasheet peak: a candidate reading 3000
    TFLOPS passes the datasheet (5000) but not the campaign's measured 2240.7 (+25%)."""
    from runner.compare.loop import empirical_peak
    from runner.core.artifact_names import EMPIRICAL_PEAK

    (tmp_path / EMPIRICAL_PEAK).write_text(EMPIRICAL.read_text())
    peak = empirical_peak(tmp_path)
    assert peak is not None and peak.tflops["fp8"] == 2240.7
    reading = [("AMD Instinct MI355X", "M8192_N8192_K8192", "fp8", 3000.0)]
    assert speed_of_light_veto(reading) is None  # the datasheet alone lets it pass
    said = speed_of_light_veto(reading, peak)
    assert said is not None and "2240.7 TFLOPS, plus 25%" in said and "BASELINE" in said
    honest = [("AMD Instinct MI355X", "M8192_N8192_K8192", "e4m3", 2500.0)]
    assert speed_of_light_veto(honest, peak) is None  # within the margin over the library
    other_card = [("AMD Instinct MI300X", "M8192_N8192_K8192", "fp8", 2600.0)]
    assert speed_of_light_veto(other_card, peak) is None  # another card's peak is not used
    assert empirical_peak(tmp_path / "absent") is None


def test_the_reference_fp8_gemm_uses_fnuz_on_gfx94x_only() -> None:
    """The card's ``gcnArchName`` as ROCm torch reports it (MI300X, MI325X: gfx942;
    MI355X: gfx950); a CUDA torch has no ``torch.version.hip``."""
    from runner.worker.bench.empirical_peak import fnuz_arch

    assert fnuz_arch("6.4.43483", "gfx942:sramecc+:xnack-")
    assert not fnuz_arch("7.0.51831", "gfx950:sramecc+:xnack-")
    assert not fnuz_arch(None, "")
