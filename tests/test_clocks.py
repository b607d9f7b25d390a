"""Clock/throttle parsers on recorded (hand-made, documented-format) tool outputs."""

from __future__ import annotations

from pathlib import Path

import pytest

from runner.worker.bench import clocks
from runner.worker.bench.clocks import decode_throttle_mask, parse_amd_smi_metric, parse_nvidia_smi

DATA = Path(__file__).parent / "data"


def test_nvidia_smi_single_gpu() -> None:
    (r,) = parse_nvidia_smi((DATA / "nvidia_smi_h200.csv").read_text())
    assert (r.sm_mhz, r.mem_mhz, r.temperature_c) == (1980.0, 3201.0, 41.0)
    assert r.power_w == pytest.approx(402.17)
    assert r.throttle_mask == 0 and r.throttle_reasons == []
    assert r.source == "nvidia-smi"


def test_nvidia_smi_throttle_reasons_and_missing_values() -> None:
    rs = parse_nvidia_smi((DATA / "nvidia_smi_8gpu_throttled.csv").read_text())
    assert len(rs) == 6
    assert rs[0].throttle_reasons == ["SwPowerCap"]
    assert rs[2].throttle_reasons == ["GpuIdle"] and rs[2].sm_mhz == 345.0
    assert rs[3].throttle_reasons == ["SwThermalSlowdown", "HwThermalSlowdown"]
    assert rs[4].sm_mhz is None and rs[4].throttle_mask is None and rs[4].power_w is None
    assert rs[5].throttle_reasons == ["Unknown(0x200)"]


def test_nvidia_smi_ignores_garbage_lines() -> None:
    assert parse_nvidia_smi("No devices were found\n") == []
    assert parse_nvidia_smi("") == []


def test_decode_mask() -> None:
    assert decode_throttle_mask(0x4 | 0x8) == ["SwPowerCap", "HwSlowdown"]
    assert decode_throttle_mask(0) == []


def test_amd_smi_bare_list_form() -> None:
    rs = parse_amd_smi_metric((DATA / "amd_smi_metric_mi300x_list.json").read_text())
    assert len(rs) == 2
    r = rs[0]
    assert (r.sm_mhz, r.mem_mhz, r.temperature_c, r.power_w) == (1923.0, 1300.0, 84.0, 741.0)
    assert r.throttle_reasons == ["ppt"]
    assert r.source == "amd-smi"
    idle = rs[1]
    assert idle.sm_mhz == 132.0 and idle.throttle_reasons == []


def test_amd_smi_gpu_data_form() -> None:
    (r,) = parse_amd_smi_metric((DATA / "amd_smi_metric_mi355x_gpu_data.json").read_text())
    assert (r.sm_mhz, r.mem_mhz, r.temperature_c) == (2311.0, 2000.0, 91.0)
    assert r.power_w == 1288.0  # socket_power is N/A, average_socket_power is used
    assert r.throttle_reasons == ["hbm_thermal", "socket_thermal"]


def test_amd_smi_plain_number_values() -> None:
    text = '[{"gpu": 0, "clock": {"gfx_0": {"clk": "2100 MHz"}}, "power": {"socket_power": 300}}]'
    (r,) = parse_amd_smi_metric(text)
    assert r.sm_mhz == 2100.0 and r.power_w == 300.0 and r.mem_mhz is None


def test_sample_clocks_never_raises(monkeypatch: pytest.MonkeyPatch) -> None:
    def boom(index: int) -> None:
        raise OSError("driver gone")

    for name in ("_read_nvml", "_read_nvidia_smi", "_read_amd_smi"):
        monkeypatch.setattr(clocks, name, boom)
    out = clocks.sample_clocks(0)
    assert out["source"] == "none" and "driver gone" in out["error"]


def test_sample_clocks_uses_first_source(monkeypatch: pytest.MonkeyPatch) -> None:
    text = (DATA / "nvidia_smi_h200.csv").read_text()
    monkeypatch.setattr(clocks, "_read_nvml", lambda index: None)
    monkeypatch.setattr(clocks, "_run", lambda cmd: text if cmd[0] == "nvidia-smi" else None)
    out = clocks.sample_clocks(0)
    assert out["source"] == "nvidia-smi" and out["sm_mhz"] == 1980.0


def test_cuda_index_follows_visible_devices(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("CUDA_VISIBLE_DEVICES", "3,5")
    assert clocks._cuda_index(1) == 5
    monkeypatch.setenv("CUDA_VISIBLE_DEVICES", "GPU-uuid")
    monkeypatch.delenv("HIP_VISIBLE_DEVICES", raising=False)
    monkeypatch.delenv("ROCR_VISIBLE_DEVICES", raising=False)
    assert clocks._cuda_index(0) == 0


def test_never_sets_clocks() -> None:
    source = Path(clocks.__file__).read_text()
    for forbidden in ("-lgc", "-ac", "-pl", "--setperfdeterminism", "set_clk", "nvmlDeviceSet"):
        assert forbidden not in source
