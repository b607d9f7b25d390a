"""The environment fingerprint: parsers on recorded samples, collection on this
machine, the YAML file, and the comparability gate."""

from __future__ import annotations

import copy
import shutil
from pathlib import Path
from typing import Any

import pytest
import yaml

from runner.core.errors import ConfigError, FingerprintMismatch
from runner.store import fingerprint as fpm
from runner.store.fingerprint import (
    FingerprintDiff,
    collect_env,
    collect_fingerprint,
    compare_fingerprints,
    load_fingerprint,
    require_comparable,
    write_fingerprint,
)
from runner.store.fingerprint_parsers import (
    load_json_lenient,
    number,
    parse_amd_smi_firmware,
    parse_amd_smi_metric,
    parse_amd_smi_static,
    parse_cpuinfo,
    parse_nvidia_smi,
    parse_nvidia_smi_version,
    parse_rocminfo,
    parse_version_header,
)

DATA = Path(__file__).parent / "data" / "fingerprint"


def sample(name: str) -> str:
    return (DATA / name).read_text(encoding="utf-8")


# --------------------------------------------------------------------------- parsers


def test_amd_smi_static_bare_list_form() -> None:
    gpus = parse_amd_smi_static(sample("amd_smi_static_mi300x_list.json"))
    assert [g["gpu"] for g in gpus] == [0, 1]
    assert gpus[0] == {
        "gpu": 0,
        "model": "AMD Instinct MI300X",
        "architecture": "gfx942",
        "driver_version": "6.8.5",
        "vbios": "022.040.003.043.000001",
        "power_cap_w": 750,
    }


def test_amd_smi_static_gpu_data_form_with_leading_warning() -> None:
    (gpu,) = parse_amd_smi_static(sample("amd_smi_static_mi355x_gpu_data.json"))
    assert gpu == {
        "gpu": 0,
        "model": "AMD Instinct MI355X",
        "architecture": "gfx950",
        "driver_version": "6.14.14",
        "vbios": "113-M355-01-1K1-010C",  # ifwi.version is N/A: the part number stands in
        "power_cap_w": 1400,
    }


def test_amd_smi_metric_both_forms() -> None:
    mi300 = parse_amd_smi_metric(sample("amd_smi_metric_mi300x_list.json"))
    assert mi300[0] == {"gpu": 0, "sclk_mhz": 132, "mclk_mhz": 900, "perf_level": "auto"}
    assert mi300[1]["sclk_mhz"] == 131
    (mi355,) = parse_amd_smi_metric(sample("amd_smi_metric_mi355x_gpu_data.json"))
    assert mi355 == {"gpu": 0, "sclk_mhz": 2400, "mclk_mhz": 2000, "perf_level": "determinism"}


def test_amd_smi_firmware() -> None:
    gpus = parse_amd_smi_firmware(sample("amd_smi_firmware_mi300x.json"))
    assert gpus[0]["firmware"]["CP_MEC1"] == "177"
    assert gpus[0]["firmware"]["PM"] == "00.85.121.00"
    assert "RAS" not in gpus[0]["firmware"]  # N/A is dropped
    assert gpus[1] == {"gpu": 1, "firmware": {"CP_MEC1": "177", "PM": "00.85.121.00"}}


@pytest.mark.parametrize("text", ["", "not json", "{}", "[]", '{"gpu_data": "N/A"}', "[1, 2]"])
def test_amd_smi_parsers_tolerate_junk(text: str) -> None:
    for parse in (parse_amd_smi_static, parse_amd_smi_metric):
        assert all(v is None for g in parse(text) for v in g.values())
    assert all(g["firmware"] == {} for g in parse_amd_smi_firmware(text))


def test_rocminfo_gpu_agents_only() -> None:
    info = parse_rocminfo(sample("rocminfo_mi300x.txt"))
    assert info["runtime_version"] == "1.14"
    assert info["rock_version"] == "6.8.5"
    assert info["gpus"] == [
        {"architecture": "gfx942", "model": "AMD Instinct MI300X", "compute_units": 304},
        {"architecture": "gfx942", "model": "AMD Instinct MI300X", "compute_units": 304},
    ]


def test_rocminfo_without_gpus() -> None:
    assert parse_rocminfo("") == {"runtime_version": None, "rock_version": None, "gpus": []}


def test_nvidia_smi_recorded_h200() -> None:
    (gpu,) = parse_nvidia_smi(sample("nvidia_smi_h200.csv"))
    assert gpu == {
        "model": "NVIDIA H200",
        "driver_version": "580.159.04",
        "vbios": "96.00.A5.00.1A",
        "sclk_mhz": 1980,
        "mclk_mhz": 3201,
        "power_cap_w": 700,
        "compute_mode": "Default",
        "architecture": None,
    }
    (with_cc,) = parse_nvidia_smi(sample("nvidia_smi_h200_compute_cap.csv"))
    assert with_cc == {**gpu, "architecture": "sm_90"}


def test_nvidia_smi_placeholders_and_junk() -> None:
    text = "Tesla T4, 470.1, [N/A], [Not Supported], 5001 MHz, [N/A], Default\nerror line\n"
    (gpu,) = parse_nvidia_smi(text)
    assert gpu["vbios"] is None and gpu["sclk_mhz"] is None and gpu["power_cap_w"] is None
    assert gpu["mclk_mhz"] == 5001


def test_nvidia_smi_version() -> None:
    assert parse_nvidia_smi_version(sample("nvidia_smi_version_h200.txt")) == {
        "driver_version": "580.159.04",
        "cuda_version": "13.0",
    }


def test_version_headers() -> None:
    assert (
        parse_version_header(sample("hipblaslt-version.h"), "HIPBLASLT_VERSION_", "TWEAK")
        == "0.12.1-e6da924"
    )
    assert parse_version_header(sample("hip_version.h"), "HIP_VERSION_", "GITHASH") == (
        "6.3.42131-fa1d09cbd"
    )
    assert parse_version_header("#define HIP_VERSION_MAJOR 6\n", "HIP_VERSION_") is None


def test_small_helpers() -> None:
    assert number({"value": 750, "unit": "W"}) == 750
    assert number("700.00 W") == 700
    assert number("0.5 V") == 0.5
    assert number("N/A") is None and number(True) is None
    assert load_json_lenient('warn: x\n[{"gpu": 0}]') == [{"gpu": 0}]
    assert parse_cpuinfo("processor\t: 0\nmodel name\t: AMD EPYC 9654\n") == "AMD EPYC 9654"


# --------------------------------------------------------------------------- collect


def test_collect_on_this_machine_without_gpu() -> None:
    fp = collect_fingerprint(image_digest="sha256:abc", extra={"target": {"commit": "deadbeef"}})
    assert fp["schema_version"] == 1
    assert fp["image_digest"] == "sha256:abc"
    assert fp["extra"] == {"target": {"commit": "deadbeef"}}
    assert fp["host"]["hostname"] and fp["host"]["kernel"]
    assert fp["software"]["python"]
    if shutil.which("amd-smi") is None and shutil.which("nvidia-smi") is None:
        assert set(fp["gpu"]) == set(fpm._GPU_KEYS)
        assert all(v is None for v in fp["gpu"].values())


def test_collect_records_failing_tools_as_null(
    monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    """A tool that is there but fails (exit 1) leaves its fields null."""
    for tool in ("amd-smi", "rocminfo", "nvidia-smi", "rocm-sdk"):
        script = tmp_path / tool
        script.write_text("#!/bin/sh\necho boom >&2\nexit 1\n")
        script.chmod(0o755)
    monkeypatch.setenv("PATH", str(tmp_path))
    fp = collect_fingerprint()
    assert all(v is None for v in fp["gpu"].values())
    assert fp["tools"]["amd-smi static"] == "failed (exit 1)"
    assert fp["tools"]["nvidia-smi --version"] == "failed (exit 1)"


def test_collect_amd_host_from_fake_tools(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    """The recorded samples, served by fake tools, become the gpu section."""
    outputs = {
        "static": "amd_smi_static_mi300x_list.json",
        "metric": "amd_smi_metric_mi300x_list.json",
        "firmware": "amd_smi_firmware_mi300x.json",
    }
    amd_smi = tmp_path / "amd-smi"
    amd_smi.write_text(
        "#!/bin/sh\n"
        + "".join(f'[ "$1" = {k} ] && cat {DATA / v}\n' for k, v in outputs.items())
        + "exit 0\n"
    )
    rocminfo = tmp_path / "rocminfo"
    rocminfo.write_text(f"#!/bin/sh\ncat {DATA / 'rocminfo_mi300x.txt'}\n")
    for script in (amd_smi, rocminfo):
        script.chmod(0o755)
    monkeypatch.setenv("PATH", f"{tmp_path}:/usr/bin:/bin")
    gpu = collect_fingerprint()["gpu"]
    assert gpu["vendor"] == "AMD" and gpu["architecture"] == "gfx942"
    assert gpu["model"] == "AMD Instinct MI300X" and gpu["count"] == 2
    assert gpu["driver_version"] == "6.8.5" and gpu["power_cap_w"] == 750
    assert gpu["perf_level"] == "auto" and gpu["sclk_mhz"] == 132
    assert gpu["firmware"]["PM"] == "00.85.121.00"


def test_env_filtering(monkeypatch: pytest.MonkeyPatch) -> None:
    env = {
        "HSA_NO_SCRATCH_RECLAIM": "1",
        "HIP_FORCE_DEV_KERNARG": "1",
        "ROCR_VISIBLE_DEVICES": "0",
        "PRIMUS_TURBO_GEMM_BACKEND": "HIPBLASLT",
        "TRITON_CACHE_DIR": "/tmp/t",
        "TURBO_KERNELS_X": "y",
        "CUDA_VISIBLE_DEVICES": "1",
        "HIP_VISIBLE_DEVICES": "2",
        "CUDA_HOME": "/usr/local/cuda",
        "HOME": "/root",
        "MY_HSA_THING": "no",
    }
    for k in list(fpm.os.environ):
        monkeypatch.delenv(k)
    for k, v in env.items():
        monkeypatch.setenv(k, v)
    got = collect_fingerprint()["env"]
    assert list(got) == sorted(set(env) - {"CUDA_HOME", "HOME", "MY_HSA_THING"})
    assert collect_env({"HSA_X": "1", "PATH": "/bin"}) == {"HSA_X": "1"}


# --------------------------------------------------------------------------- files


def test_round_trip(tmp_path: Path) -> None:
    fp = collect_fingerprint(image_digest="sha256:0123", extra={"target": {"version": "0.1"}})
    path = tmp_path / "sub" / "fingerprint.yaml"
    write_fingerprint(path, fp)
    assert load_fingerprint(path) == fp
    assert [p.name for p in path.parent.iterdir()] == ["fingerprint.yaml"]  # no temp left


def test_write_refuses_unrepresentable_extra(tmp_path: Path) -> None:
    with pytest.raises(ConfigError, match="plain values"):
        write_fingerprint(tmp_path / "f.yaml", {"schema_version": 1, "extra": {"x": object()}})


@pytest.mark.parametrize(
    ("version", "message"),
    [
        (2, "newer than 1.*upgrade turbo-campaign"),
        (0, "older than 1.*re-collect"),
        ("1", "schema_version .1. is not the integer 1"),
        (None, "schema_version None is not the integer 1"),
    ],
)
def test_load_rejects_other_schema_versions(tmp_path: Path, version: Any, message: str) -> None:
    path = tmp_path / "f.yaml"
    path.write_text(yaml.safe_dump({"schema_version": version, "gpu": {}}))
    with pytest.raises(ConfigError, match=message) as info:
        load_fingerprint(path)
    assert info.value.return_code == 2


def test_load_missing_or_bad_file(tmp_path: Path) -> None:
    with pytest.raises(ConfigError, match="cannot read"):
        load_fingerprint(tmp_path / "absent.yaml")
    (tmp_path / "list.yaml").write_text("- 1\n")
    with pytest.raises(ConfigError, match="not a mapping"):
        load_fingerprint(tmp_path / "list.yaml")
    (tmp_path / "bad.yaml").write_text("a: [\n")
    with pytest.raises(ConfigError, match="not valid YAML"):
        load_fingerprint(tmp_path / "bad.yaml")


# --------------------------------------------------------------------------- compare


def _fp() -> dict[str, Any]:
    return {
        "schema_version": 1,
        "collected": "2025-01-01T00:00:00+00:00",
        "host": {
            "hostname": "mi300-a",
            "kernel": "6.8.0",
            "cpu_model": "EPYC",
            "numa_balancing": 0,
        },
        "gpu": {
            "vendor": "AMD",
            "model": "AMD Instinct MI300X",
            "architecture": "gfx942",
            "count": 8,
            "driver_version": "6.8.5",
            "sclk_mhz": 132,
            "power_cap_w": 750,
            "perf_level": "auto",
        },
        "software": {"rocm_version": "6.3.1", "torch_version": "2.6.0+rocm6.3"},
        "image_digest": "sha256:aaa",
        "env": {"PRIMUS_TURBO_GEMM_BACKEND": "HIPBLASLT", "HIP_VISIBLE_DEVICES": "0"},
        "extra": {"target": {"commit": "c0ffee"}},
    }


def test_identical_fingerprints_have_no_diffs() -> None:
    assert compare_fingerprints(_fp(), _fp()) == []
    assert require_comparable(_fp(), _fp()) == []


def test_different_driver_blocks_and_names_it() -> None:
    b = _fp()
    b["gpu"]["driver_version"] = "6.10.5"
    with pytest.raises(FingerprintMismatch) as info:
        require_comparable(_fp(), b)
    msg = str(info.value)
    assert "gpu.driver_version: 6.8.5 vs 6.10.5" in msg
    assert "--allow-env-mismatch REASON" in msg
    assert info.value.return_code == 2
    assert isinstance(info.value, ConfigError)


def test_override_returns_the_diffs() -> None:
    b = _fp()
    b["gpu"]["driver_version"] = "6.10.5"
    b["host"]["hostname"] = "mi300-b"
    diffs = require_comparable(_fp(), b, override_reason="same ROCm; driver-only update")
    assert diffs == [
        FingerprintDiff("gpu.driver_version", "6.8.5", "6.10.5", True),
        FingerprintDiff("host.hostname", "mi300-a", "mi300-b", False),
    ]
    assert diffs[0].to_dict() == {
        "key": "gpu.driver_version",
        "a": "6.8.5",
        "b": "6.10.5",
        "perf_relevant": True,
    }
    with pytest.raises(FingerprintMismatch):
        require_comparable(_fp(), b, override_reason="  ")


def test_non_perf_differences_never_block() -> None:
    b = copy.deepcopy(_fp())
    b["host"]["hostname"] = "mi300-b"
    b["collected"] = "2025-02-02T00:00:00+00:00"
    b["gpu"]["sclk_mhz"] = 2100
    b["gpu"]["count"] = 4
    b["extra"]["target"]["commit"] = "decaf"
    b["env"]["HIP_VISIBLE_DEVICES"] = "3"
    diffs = require_comparable(_fp(), b)
    assert {d.key for d in diffs} == {
        "host.hostname",
        "gpu.sclk_mhz",
        "gpu.count",
        "extra.target.commit",
        "env.HIP_VISIBLE_DEVICES",
    }
    assert not any(d.perf_relevant for d in diffs)


def test_hostname_only_difference_does_not_block() -> None:
    b = _fp()
    b["host"]["hostname"] = "mi300-b"
    assert require_comparable(_fp(), b) == [
        FingerprintDiff("host.hostname", "mi300-a", "mi300-b", False)
    ]


def test_missing_field_and_env_var_are_perf_differences() -> None:
    b = _fp()
    del b["software"]["torch_version"]
    b["env"]["PRIMUS_TURBO_GEMM_BACKEND"] = "TRITON"
    with pytest.raises(FingerprintMismatch) as info:
        require_comparable(_fp(), b)
    assert "software.torch_version: 2.6.0+rocm6.3 vs <missing>" in str(info.value)
    assert "env.PRIMUS_TURBO_GEMM_BACKEND: HIPBLASLT vs TRITON" in str(info.value)


def test_perf_keys_exclude_target_commit_and_gpu_count() -> None:
    assert "gpu.driver_version" in fpm.PERF_KEYS and "image_digest" in fpm.PERF_KEYS
    assert not fpm.is_perf_relevant("extra.target.commit")
    assert not fpm.is_perf_relevant("gpu.count")
    assert not fpm.is_perf_relevant("env.TRITON_CACHE_DIR")
    assert fpm.is_perf_relevant("env.HSA_NO_SCRATCH_RECLAIM")


def test_torchs_fields_are_read_from_its_version_file_without_importing_it() -> None:
    """Importing torch on the host cost seconds of every round's start (its checks
    fingerprint the machine before anything runs); the fields are the values an
    imported torch reports, read from the file it reads them from."""
    import subprocess
    import sys

    code = (
        "import json, sys; from runner.store import fingerprint as f; got = f._torch(); "
        "print(json.dumps([got, 'torch' in sys.modules]))"
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    got, imported = yaml.safe_load(out.stdout)
    assert imported is False
    assert got == fpm._torch_imported()  # what an imported torch reports
    assert got["torch_version"] is not None
