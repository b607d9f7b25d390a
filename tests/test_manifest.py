"""The manifest: validation on every load, errors that name field, value and fix."""

from __future__ import annotations

import datetime as dt
from pathlib import Path
from typing import Any

import pytest
import yaml
from hypothesis import given
from hypothesis import strategies as st

from runner.core.errors import CampaignNotFound, ConfigError
from runner.store.manifest import (
    BACKEND_LANG,
    MANIFEST_SCHEMA_VERSION,
    SECTION2_FIELDS,
    Manifest,
    branch_name,
    campaign_name,
    lang_for_backend,
    load_manifest,
    manifest_yaml,
    save_manifest,
    validate_manifest,
)


def fields(**over: Any) -> dict[str, Any]:
    data: dict[str, Any] = {
        "schema_version": MANIFEST_SCHEMA_VERSION,
        "campaign_name": "gemm_fp8_blockwise_triton_gfx942_20261129",
        "target": "primus-turbo",
        "source": "/src/Primus-Turbo",
        "target_op": "gemm_fp8",
        "granularity": "blockwise",
        "target_backend": "TRITON",
        "target_lang": "TRITON",
        "target_gpu": "gfx942",
        "primary_metric": "Combined Step TFLOPS",
        "shape_set": "models",
        "test_command": "pytest tests/pytorch/ops/test_gemm_fp8.py -v",
        "benchmark_command": "python benchmark/ops/training/bench_gemm_turbo.py",
        "created": "2026-11-29 14:05",
    }
    data.update(over)
    return data


def write(tmp_path: Path, data: dict[str, Any]) -> Path:
    path = tmp_path / "manifest.yaml"
    path.write_text(yaml.safe_dump(data, sort_keys=False))
    return path


def load_error(tmp_path: Path, data: dict[str, Any]) -> str:
    with pytest.raises(ConfigError) as info:
        load_manifest(write(tmp_path, data))
    return str(info.value)


def test_valid_manifest_round_trips(tmp_path: Path) -> None:
    m = validate_manifest(fields(max_iterations=30, performance_target=">500 TFLOPS"), "t")
    path = tmp_path / "manifest.yaml"
    save_manifest(path, m)
    assert load_manifest(path) == m
    assert m.git_commit is True
    assert m.cache_mode == "hot"
    assert m.pairs == 1
    assert m.executor == "local"
    assert m.timing.repeats >= 1


def test_saved_keys_follow_section_2_order(tmp_path: Path) -> None:
    text = manifest_yaml(validate_manifest(fields(), "t"))
    assert text.startswith("# turbo-campaign manifest")
    keys = list(yaml.safe_load(text))
    assert keys[: len(SECTION2_FIELDS)] == list(SECTION2_FIELDS)
    assert set(keys) == set(Manifest.model_fields)


def test_missing_file_says_to_run_init(tmp_path: Path) -> None:
    with pytest.raises(CampaignNotFound, match="campaign init"):
        load_manifest(tmp_path / "nope.yaml")


def test_missing_field_is_named_with_the_fix(tmp_path: Path) -> None:
    data = fields()
    del data["test_command"]
    msg = load_error(tmp_path, data)
    assert "test_command: missing; add `test_command: <value>`" in msg


def test_unknown_field_is_named(tmp_path: Path) -> None:
    msg = load_error(tmp_path, fields(target_opp="gemm"))
    assert "target_opp = 'gemm': unknown field; remove it" in msg


def test_wrong_value_names_field_value_and_choices(tmp_path: Path) -> None:
    msg = load_error(tmp_path, fields(cache_mode="warm"))
    assert "cache_mode = 'warm'" in msg
    assert "'hot' or 'cold'" in msg


def test_every_bad_field_is_reported(tmp_path: Path) -> None:
    msg = load_error(tmp_path, fields(target_gpu="mi300", max_iterations=120, pairs=0))
    assert "3 problem(s)" in msg
    assert "target_gpu = 'mi300'" in msg
    assert "gfx942" in msg
    assert "max_iterations = 120" in msg
    assert "pairs = 0" in msg


@pytest.mark.parametrize(
    ("backend", "lang"), [("TRITON", "HIP"), ("CK", "TRITON"), ("TORCH", "HIP"), ("FLYDSL", "HIP")]
)
def test_backend_lang_mismatch_names_both(tmp_path: Path, backend: str, lang: str) -> None:
    msg = load_error(tmp_path, fields(target_backend=backend, target_lang=lang))
    assert f"target_lang {lang!r} does not follow target_backend {backend!r}" in msg
    assert f"set target_lang: {BACKEND_LANG[backend]}" in msg


@pytest.mark.parametrize("created", ["2026-11-29", "2026-11-29 14:05:00", "29.11.2026 14:05"])
def test_bad_created_format(tmp_path: Path, created: str) -> None:
    msg = load_error(tmp_path, fields(created=created))
    assert f"created = {created!r}" in msg
    assert "YYYY-MM-DD HH:MM" in msg


def test_impossible_created_date(tmp_path: Path) -> None:
    assert "YYYY-MM-DD HH:MM" in load_error(tmp_path, fields(created="2026-13-40 25:61"))


def test_too_new_schema_version_says_upgrade(tmp_path: Path) -> None:
    msg = load_error(tmp_path, fields(schema_version=MANIFEST_SCHEMA_VERSION + 1))
    assert "newer" in msg
    assert "upgrade turbo-campaign" in msg


def test_too_old_schema_version_says_recreate(tmp_path: Path) -> None:
    msg = load_error(tmp_path, fields(schema_version=0))
    assert "older" in msg
    assert "campaign init" in msg


def test_not_a_mapping(tmp_path: Path) -> None:
    path = tmp_path / "manifest.yaml"
    path.write_text("- a\n- b\n")
    with pytest.raises(ConfigError, match="expected a YAML mapping"):
        load_manifest(path)


@pytest.mark.parametrize(
    "target", [">500 TFLOPS", ">=3000 GB/s", "> 12.5 TFLOPS", "500 TFLOPS", None], ids=str
)
def test_performance_target_forms(target: str | None) -> None:
    metric = "Forward GB/s" if target and "GB/s" in target else "Combined Step TFLOPS"
    schema = "memory" if metric == "Forward GB/s" else "gemm"
    m = validate_manifest(
        fields(performance_target=target, primary_metric=metric, csv_schema=schema), "t"
    )
    assert m.performance_target == (target.strip() if target else None)


@pytest.mark.parametrize("target", [">500", ">fast TFLOPS", "<500 TFLOPS", "80% of nothing"])
def test_bad_performance_target(tmp_path: Path, target: str) -> None:
    assert "has the wrong form" in load_error(tmp_path, fields(performance_target=target))


def test_performance_target_unit_must_fit_metric(tmp_path: Path) -> None:
    msg = load_error(tmp_path, fields(performance_target=">3000 GB/s"))
    assert "is in GB/s but primary_metric is 'Combined Step TFLOPS'" in msg


def test_metric_and_csv_schema_must_agree(tmp_path: Path) -> None:
    assert "set csv_schema: memory" in load_error(tmp_path, fields(primary_metric="Forward GB/s"))


@pytest.mark.parametrize("gpu", ["gfx942", "gfx950", "gfx90a", "sm90", "sm100", "cpu"])
def test_gpu_codes(gpu: str) -> None:
    assert validate_manifest(fields(target_gpu=gpu), "t").target_gpu == gpu


def test_representative_shapes_need_three_to_five(tmp_path: Path) -> None:
    msg = load_error(tmp_path, fields(representative_shapes=["a", "b"]))
    assert "3-5" in msg
    ok = validate_manifest(fields(representative_shapes=["a", "b", "c"]), "t")
    assert ok.representative_shapes == ["a", "b", "c"]


def test_representative_shapes_come_from_target_shapes(tmp_path: Path) -> None:
    data = fields(target_shapes=["a", "b", "c"], representative_shapes=["a", "b", "z"])
    assert "['z'] are not in target_shapes" in load_error(tmp_path, data)


def test_heldout_and_representative_are_disjoint(tmp_path: Path) -> None:
    data = fields(representative_shapes=["a", "b", "c"], heldout_shapes=["c"])
    assert "both representative and held out" in load_error(tmp_path, data)


def test_target_shapes_all_or_list(tmp_path: Path) -> None:
    assert "'all' or a non-empty list" in load_error(tmp_path, fields(target_shapes="some"))
    assert "'all' or a non-empty list" in load_error(tmp_path, fields(target_shapes=[]))


def test_relative_source_and_bad_commit(tmp_path: Path) -> None:
    msg = load_error(tmp_path, fields(source="rel/path", base_commit="abc"))
    assert "absolute path" in msg
    assert "40-hex" in msg


def test_kernel_source_must_be_relative(tmp_path: Path) -> None:
    assert "relative to source" in load_error(tmp_path, fields(kernel_source=["/abs/k.py"]))
    assert "relative to source" in load_error(tmp_path, fields(kernel_source=["../k.py"]))


@pytest.mark.parametrize("branch", ["has space", "a..b", "-x", "x.lock", "a~1"])
def test_bad_branch_names(tmp_path: Path, branch: str) -> None:
    assert "valid git branch" in load_error(tmp_path, fields(git_branch=branch))


def test_branch_name() -> None:
    m = validate_manifest(fields(), "t")
    assert branch_name(m) == "optimize/gemm_fp8_blockwise_triton_gfx942_20261129"
    assert branch_name(validate_manifest(fields(git_branch="none"), "t")) is None
    assert branch_name(validate_manifest(fields(git_branch="perf/x"), "t")) == "perf/x"


def test_campaign_name() -> None:
    day = dt.date(2026, 11, 29)
    assert campaign_name("gemm_fp8", "TRITON", "gfx942", day, "blockwise") == (
        "gemm_fp8_blockwise_triton_gfx942_20261129"
    )
    assert campaign_name("gemm_fp8_blockwise", "TRITON", "gfx942", day) == (
        "gemm_fp8_blockwise_triton_gfx942_20261129"
    )
    assert campaign_name("gemm_fp8_blockwise", "TRITON", "gfx942", day, "blockwise") == (
        "gemm_fp8_blockwise_triton_gfx942_20261129"
    )
    assert campaign_name("gemm", "CK", "gfx950", "20270101") == "gemm_ck_gfx950_20270101"
    with pytest.raises(ConfigError, match="YYYYMMDD"):
        campaign_name("gemm", "CK", "gfx950", "2027-01-01")


def test_lang_for_backend() -> None:
    assert [lang_for_backend(b) for b in ("TRITON", "CK", "HIPBLASLT", "TURBO")] == [
        "TRITON",
        "HIP",
        "HIP",
        "HIP",
    ]
    assert lang_for_backend("flydsl") == "FLYDSL"
    assert lang_for_backend("TORCH") == "PYTORCH"
    with pytest.raises(ConfigError, match="CK, FLYDSL"):
        lang_for_backend("CUDA")


@given(
    op=st.sampled_from(["gemm", "gemm_fp8", "grouped_gemm_fp8", "quantize"]),
    gran=st.sampled_from([None, "tensorwise", "rowwise", "blockwise", "mx_blockwise"]),
    backend=st.sampled_from(sorted(BACKEND_LANG)),
    gpu=st.sampled_from(["gfx942", "gfx950", "sm90", "cpu"]),
    day=st.dates(min_value=dt.date(2000, 1, 1), max_value=dt.date(2999, 12, 31)),
)
def test_composed_names_always_validate(
    op: str, gran: str | None, backend: str, gpu: str, day: dt.date
) -> None:
    name = campaign_name(op, backend, gpu, day, gran)
    m = validate_manifest(
        fields(
            campaign_name=name,
            target_op=op,
            granularity=gran,
            target_backend=backend,
            target_lang=lang_for_backend(backend),
            target_gpu=gpu,
        ),
        "t",
    )
    assert m.campaign_name.endswith(f"_{backend.lower()}_{gpu}_{day:%Y%m%d}")
