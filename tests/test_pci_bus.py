"""Cards matched by PCI bus id (runner.core.pci_bus): amd-smi's index is not HIP's on some
hosts, so the clocks of a leased GPU, its render node and its amd-smi entry are found
through the bus id, from recorded samples of amd-smi and the KFD topology."""

from __future__ import annotations

from pathlib import Path

import pytest

from runner.core import pci_bus
from runner.executors.container import render_nodes_for
from runner.executors.gpus import gpu_env
from runner.worker.bench import clocks
from tests.amd_smi_fake import BUS_DATA, KFD, install


def test_bus_id_from_kfd_location() -> None:
    assert pci_bus.bus_id_from_location(0, 49152) == "0000:c0:00.0"
    assert pci_bus.bus_id_from_location(1, (0x8C << 8) | (2 << 3) | 1) == "0001:8c:02.1"
    assert pci_bus.normalize_bdf("0000:C0:00.0") == "0000:c0:00.0"
    assert pci_bus.normalize_bdf("c0:00.0") == "0000:c0:00.0"
    assert pci_bus.normalize_bdf("GPU-1234") is None


def test_kfd_order_is_not_amd_smi_order() -> None:
    gpus = pci_bus.kfd_gpus(KFD)
    by_bus = pci_bus.parse_amd_smi_list((BUS_DATA / "amd_smi_list_mi300x.json").read_text())
    assert [g.bus_id for g in gpus][:2] == ["0000:c0:00.0", "0000:20:00.0"]
    assert [by_bus[g.bus_id] for g in gpus] == [7, 1, 3, 4, 6, 5, 2, 0]
    assert pci_bus.kfd_gpus(KFD.parent / "absent") == []


def test_gpu_env_maps_to_rocr_physical_index() -> None:
    env = gpu_env(5, "amd")
    assert pci_bus.rocr_physical_index(0, env) == 5
    assert pci_bus.rocr_physical_index(1, {"HIP_VISIBLE_DEVICES": "2,3"}) == 3
    assert pci_bus.rocr_physical_index(0, {"ROCR_VISIBLE_DEVICES": "GPU-ab12"}) is None
    assert pci_bus.rocr_physical_index(2, {}) == 2


@pytest.mark.parametrize("lease", [0, 6, 7])
def test_clocks_read_the_leased_card(
    lease: int, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A worker pinned to ROCr GPU ``lease`` (the lease's env) reads that card's amd-smi
    entry through a real ``amd-smi`` subprocess, not amd-smi's entry of the same digit."""
    install(tmp_path / "bin", monkeypatch)
    monkeypatch.setattr(clocks, "_read_nvml", lambda index: None)
    monkeypatch.setattr(clocks, "_read_nvidia_smi", lambda index: None)
    for var, value in gpu_env(lease, "amd").items():
        monkeypatch.setenv(var, value)
    bus = pci_bus.kfd_gpus(KFD)[lease].bus_id
    smi_index = pci_bus.parse_amd_smi_list((BUS_DATA / "amd_smi_list_mi300x.json").read_text())[bus]
    assert smi_index != lease
    out = clocks.sample_clocks(0)
    assert out["source"] == "amd-smi", out
    assert out["sm_mhz"] == 2000 + 10 * smi_index
    assert out["temperature_c"] == 50 + 3 * smi_index
    node = render_nodes_for([lease], KFD)[0]
    assert node == f"/dev/dri/renderD{pci_bus.kfd_gpus(KFD)[lease].render_minor}"


def test_unmatched_card_is_an_error_not_a_guess(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    install(tmp_path / "bin", monkeypatch)
    monkeypatch.setattr(clocks, "_read_nvml", lambda index: None)
    monkeypatch.setattr(clocks, "_read_nvidia_smi", lambda index: None)
    monkeypatch.setenv("ROCR_VISIBLE_DEVICES", "GPU-ab12")
    monkeypatch.delenv("HIP_VISIBLE_DEVICES", raising=False)
    monkeypatch.delenv("CUDA_VISIBLE_DEVICES", raising=False)
    out = clocks.sample_clocks(0)
    assert out["source"] == "none" and "UUID" in out["error"]


def test_no_amd_smi_says_the_check_was_not_made(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("PATH", str(tmp_path))
    monkeypatch.setattr(clocks, "_read_nvml", lambda index: None)
    out = clocks.sample_clocks(0)
    assert out["source"] == "none" and out["error"] == clocks.NO_SOURCE
