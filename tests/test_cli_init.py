"""``campaign init``: builds the manifest, creates the directory, refuses to overwrite."""

from __future__ import annotations

import dataclasses
import datetime as dt
import json
import re
import shutil
import subprocess
from pathlib import Path

import pytest
from campaign_helpers import committed_repo

from runner.cli import main
from runner.core.errors import ConfigError
from runner.core.shapes import shape_set
from runner.flow.new_campaign import build_manifest
from runner.store.manifest import load_manifest
from runner.store.sealed import heldout_labels, heldout_path

pytestmark = pytest.mark.integration  # real git repositories


@pytest.fixture
def repo(tmp_path: Path) -> Path:
    return committed_repo(tmp_path / "target")


def test_init_refuses_a_repository_without_commits(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    empty = tmp_path / "empty"
    subprocess.run(["git", "init", "-q", str(empty)], check=True)
    rc, _, err = invoke(capsys, tmp_path / "c", "--op", "gemm", "--source", str(empty), *BASIC)
    assert rc == 2
    assert "has no commit yet" in err
    assert not (tmp_path / "c").exists() or not any((tmp_path / "c").iterdir())


def invoke(capsys: pytest.CaptureFixture[str], root: Path, *args: str) -> tuple[int, str, str]:
    argv = ["--campaigns-root", str(root), "init", *args]
    with pytest.raises(SystemExit) as info:
        main(argv)
    out, err = capsys.readouterr()
    return int(info.value.code or 0), out, err


EXAMPLES = Path(__file__).resolve().parent.parent / "examples"
BASIC = ("--test-command", "pytest tests -q", "--benchmark-command", "python bench.py")
S1, S2, S3 = (s.label for s in shape_set("models")[:3])


def test_init_refuses_shapes_outside_the_shape_set(
    tmp_path: Path, repo: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    rc, _, err = invoke(
        capsys,
        tmp_path / "c",
        "--op",
        "gemm",
        "--gpu",
        "gfx942",
        "--source",
        str(repo),
        "--shapes",
        "s1,s2,s3",
        *BASIC,
    )
    assert rc == 2
    assert "shapes not in shape set models: ['s1', 's2', 's3']" in err


def test_init_creates_a_campaign(
    tmp_path: Path, repo: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    root = tmp_path / "campaigns"
    rc, out, err = invoke(
        capsys,
        root,
        "--op",
        "gemm_fp8",
        "--granularity",
        "blockwise",
        "--backend",
        "triton",
        "--gpu",
        "gfx942",
        "--source",
        str(repo / "."),
        "--shapes",
        f"{S1}, {S2},{S3}",
        "--max-iterations",
        "20",
        "--performance-target",
        ">500 TFLOPS",
        "--suite-command",
        "pytest tests/unit -q",
        *BASIC,
    )
    assert (rc, err) == (0, "")
    name = Path(out.split("campaign: ")[-1].strip()).name
    assert out.endswith(f"campaign: {root / name}\n")  # after what the held-out pick left out
    m = load_manifest(root / name / "manifest.yaml")
    assert name == f"gemm_fp8_blockwise_triton_gfx942_{m.created[:10].replace('-', '')}"
    assert m.created[:10] in (str(dt.date.today()), str(dt.date.today() - dt.timedelta(days=1)))
    assert m.campaign_name == name
    assert m.source == str(repo.resolve())
    assert (m.target_backend, m.target_lang, m.granularity) == ("TRITON", "TRITON", "blockwise")
    assert m.target_shapes == [S1, S2, S3]
    assert m.shape_set == "models"
    assert m.max_iterations == 20
    assert m.suite_command == "pytest tests/unit -q"  # accept's full suite
    assert m.git_commit is True
    assert re.fullmatch(r"\d{4}-\d{2}-\d{2} \d{2}:\d{2}", m.created)
    assert m.quick_command == f"python {root / name / 'quick_test_bench.py'}"
    assert (root / name / "logs" / "performance_trend.md").is_file()


def test_init_with_name_and_options(
    tmp_path: Path, repo: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    root = tmp_path / "campaigns"
    # workspace mode extracts the op's kernel files, focused test and benchmark at init:
    # the checkout must hold them (the example package does)
    shutil.copytree(EXAMPLES, repo, dirs_exist_ok=True)
    ident = ["-c", "user.name=t", "-c", "user.email=t@localhost"]
    subprocess.run(["git", "-C", str(repo), "add", "-A"], check=True)
    subprocess.run(["git", "-C", str(repo), *ident, "commit", "-qm", "kernel"], check=True)
    rc, _, _ = invoke(
        capsys,
        root,
        "--op",
        "quantize",
        "--granularity",
        "rowwise",
        "--backend",
        "TORCH",
        "--source",
        str(repo),
        "--name",
        "q1",
        "--no-git-commit",
        "--git-branch",
        "none",
        "--cache-mode",
        "cold",
        "--mode",
        "workspace",
        *BASIC,
    )
    assert rc == 0
    m = load_manifest(root / "q1" / "manifest.yaml")
    assert (m.target_lang, m.primary_metric, m.csv_schema) == ("PYTORCH", "Forward GB/s", "memory")
    assert (m.git_commit, m.git_branch, m.cache_mode) == (False, "none", "cold")
    assert (m.execution_mode, m.target_gpu, m.shape_set) == ("workspace", "cpu", "quant-cpu")


def test_init_refuses_to_overwrite(
    tmp_path: Path, repo: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    root = tmp_path / "campaigns"
    args = ("--op", "gemm", "--source", str(repo), "--name", "c1", *BASIC)
    assert invoke(capsys, root, *args)[0] == 0
    before = {p: p.read_bytes() for p in (root / "c1").rglob("*") if p.is_file()}
    rc, out, err = invoke(capsys, root, *args[:-1], "other bench")
    assert rc == 2
    assert out == ""
    assert "already exists" in err
    assert {p: p.read_bytes() for p in (root / "c1").rglob("*") if p.is_file()} == before


def test_source_must_be_a_git_work_tree(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    plain = tmp_path / "plain"
    plain.mkdir()
    rc, _, err = invoke(capsys, tmp_path / "c", "--op", "gemm", "--source", str(plain), *BASIC)
    assert rc == 2
    assert "is not a git work tree" in err
    assert not (tmp_path / "c").exists()


def test_bad_values_exit_2_with_the_fix(
    tmp_path: Path, repo: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    rc, _, err = invoke(
        capsys,
        tmp_path / "c",
        "--op",
        "gemm",
        "--source",
        str(repo),
        "--performance-target",
        "fast",
        "--max-iterations",
        "500",
        *BASIC,
    )
    assert rc == 2
    assert "performance_target = 'fast'" in err
    assert "max_iterations = 500" in err
    assert not (tmp_path / "c").exists()


def test_primus_turbo_defaults_need_an_upstream_checkout(
    tmp_path: Path, repo: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """The target's default commands name upstream files; a tree without them is refused
    (tests/test_primus_turbo_facts.py runs init against an upstream-shaped checkout)."""
    rc, _, err = invoke(
        capsys,
        tmp_path / "c",
        "--op",
        "gemm_fp8",
        "--granularity",
        "blockwise",
        "--target",
        "primus-turbo",
        "--gpu",
        "gfx942",
        "--source",
        str(repo),
        "--executor",
        "local",
    )
    assert rc == 2
    assert "benchmark/ops/training/bench_gemm_turbo.py" in err
    assert "tests/pytorch/ops/test_gemm_fp8.py" in err


def test_primus_turbo_defaults_to_the_image_campaign_image_built(
    tmp_path: Path, repo: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """Without --executor a primus-turbo campaign runs in the image `make image` builds
    for its GPU, recorded by id at init; when that image is not here, init says how to
    build it (or to run locally) and creates nothing."""
    paths = Path(__file__).parent / "data" / "primus_turbo_paths.txt"
    for rel in paths.read_text(encoding="utf-8").splitlines():
        if rel and not rel.startswith("#"):  # an upstream-shaped checkout (empty files)
            (repo / rel).parent.mkdir(parents=True, exist_ok=True)
            (repo / rel).write_text("")
    rc, _, err = invoke(
        capsys,
        tmp_path / "c",
        "--op",
        "gemm_fp8",
        "--granularity",
        "blockwise",
        "--target",
        "primus-turbo",
        "--gpu",
        "gfx942",
        "--source",
        str(repo),
        "--image",
        "turbo-campaign/not-built:here",
    )
    assert rc == 2
    assert "the image turbo-campaign/not-built:here is not available here" in err
    assert "make image GPU_ARCHS=gfx942" in err and "--executor local" in err
    assert not (tmp_path / "c").exists() or not any((tmp_path / "c").iterdir())


def test_build_manifest_derives_fields() -> None:
    m = build_manifest(
        target_op="grouped_gemm_fp8",
        granularity="rowwise",
        target_backend="ck",
        target_gpu="gfx950",
        source="/src/pt",
        target="primus-turbo",
        test_command="t",
        benchmark_command="b",
        created="2026-11-29 09:00",
    )
    assert m.campaign_name == "grouped_gemm_fp8_rowwise_ck_gfx950_20261129"
    assert (m.target_backend, m.target_lang) == ("CK", "HIP")
    assert (m.primary_metric, m.csv_schema, m.shape_set) == (
        "Combined Step TFLOPS",
        "gemm",
        "moe",
    )
    with pytest.raises(ConfigError, match="target_lang 'TRITON' does not follow"):
        build_manifest(
            target_op="gemm",
            target_backend="CK",
            target_lang="TRITON",
            source="/s",
            test_command="t",
            benchmark_command="b",
        )


def test_init_holds_shapes_out_by_default(
    tmp_path: Path, repo: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """A few shapes of the op's set are reserved with a recorded seed, outside the
    targets; the same seed picks the same shapes; --no-heldout reserves none."""
    picks = []
    for name, extra in (("a", ["--heldout-seed", "11"]), ("b", ["--heldout-seed", "11"])):
        rc, out, _ = invoke(
            capsys,
            tmp_path / name,
            "--op",
            "gemm",
            "--gpu",
            "gfx942",
            "--source",
            str(repo),
            *BASIC,
            *extra,
        )
        assert rc == 0
        root = Path(out.split("campaign: ")[1].strip())
        m = load_manifest(root / "manifest.yaml")
        held = heldout_labels(root, m)  # sealed: the manifest lists neither labels nor seed
        assert held and not m.heldout_shapes and m.heldout_seed is None
        assert json.loads(heldout_path(root).read_text(encoding="utf-8"))["seed"] == 11
        assert isinstance(m.target_shapes, list)
        assert not set(held) & set(m.target_shapes)
        all_labels = {s.label for s in shape_set(m.shape_set)}
        assert set(held) | set(m.target_shapes) == all_labels
        picks.append(held)
    assert picks[0] == picks[1]
    rc, out, _ = invoke(
        capsys,
        tmp_path / "c",
        "--op",
        "gemm",
        "--gpu",
        "gfx942",
        "--source",
        str(repo),
        *BASIC,
        "--no-heldout",
    )
    root = Path(out.split("campaign: ")[1].strip())
    m = load_manifest(root / "manifest.yaml")
    assert rc == 0 and m.heldout_shapes == [] and m.heldout_digest is None
    assert not heldout_path(root).exists()


def _branches(repo: Path) -> list[str]:
    out = subprocess.run(
        ["git", "-C", str(repo), "for-each-ref", "--format=%(refname)"],
        capture_output=True,
        text=True,
        check=True,
    ).stdout
    return [r for r in out.splitlines() if "optimize/" in r or "refs/campaigns/" in r]


@pytest.mark.parametrize(
    ("args", "named"),
    [
        (("--backend", "triton", "--gpu", "cpu"), "on the CPU choose --backend TORCH"),
        (("--gpu", "gfx999"), "choose one of: cpu, gfx942, gfx950, sm90"),
    ],
)
def test_init_refuses_a_device_that_cannot_run(
    tmp_path: Path,
    repo: Path,
    capsys: pytest.CaptureFixture[str],
    args: tuple[str, ...],
    named: str,
) -> None:
    """docs/reliability.md §7 row 10: refused at init (exit 2, the valid choices named); no campaign
    folder and nothing in the source repository."""
    root = tmp_path / "c"
    rc, _, err = invoke(
        capsys,
        root,
        "--op",
        "gemm_fp8",
        "--granularity",
        "blockwise",
        "--source",
        str(repo),
        *args,
        *BASIC,
    )
    assert rc == 2 and named in err, err
    assert not root.exists() and _branches(repo) == []


def test_init_on_cpu_defaults_to_a_backend_that_runs(
    tmp_path: Path, repo: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    rc, out, err = invoke(capsys, tmp_path / "c", "--op", "gemm", "--source", str(repo), *BASIC)
    assert rc == 0, err
    m = load_manifest(Path(out.removeprefix("campaign: ").strip()) / "manifest.yaml")
    assert (m.target_gpu, m.target_backend) == ("cpu", "TORCH")


def test_init_refuses_a_source_with_uncommitted_edits(
    tmp_path: Path, repo: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """docs/reliability.md §7 row 9: an uncommitted edit of a tracked file would become part
    of the first round's candidate: refused (exit 2) naming the file and the way out;
    an untracked file is not an edit of the base commit."""
    (repo / "README").write_text("edited\n")
    (repo / "notes.txt").write_text("untracked\n")
    root = tmp_path / "c"
    rc, _, err = invoke(capsys, root, "--op", "gemm", "--source", str(repo), *BASIC)
    assert rc == 2, err
    assert "uncommitted changes to tracked files (README)" in err
    assert "commit -am" in err and "stash" in err
    assert not root.exists() and _branches(repo) == []
    subprocess.run(["git", "-C", str(repo), "checkout", "README"], check=True)
    assert invoke(capsys, root, "--op", "gemm", "--source", str(repo), *BASIC)[0] == 0


def test_init_refuses_a_campaigns_root_that_is_a_file(
    tmp_path: Path,
    repo: Path,
    capsys: pytest.CaptureFixture[str],
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """docs/reliability.md §7 row 6: CAMPAIGN_ROOT pointing at a file is exit 2 with what to do (it
    was a FileExistsError traceback), and nothing is left in the source."""
    afile = tmp_path / "afile"
    afile.write_text("x")
    monkeypatch.setenv("CAMPAIGN_ROOT", str(afile))
    with pytest.raises(SystemExit) as info:
        main(["init", "--op", "gemm", "--source", str(repo), *BASIC])
    err = capsys.readouterr().err
    assert info.value.code == 2, err
    assert f"the campaigns root {afile} is not a folder" in err and "CAMPAIGN_ROOT" in err
    assert "Traceback" not in err and afile.read_text() == "x" and _branches(repo) == []
    monkeypatch.setenv("CAMPAIGN_ROOT", str(afile / "below"))
    with pytest.raises(SystemExit) as info:
        main(["init", "--op", "gemm", "--source", str(repo), *BASIC])
    assert info.value.code == 2 and "is not a folder" in capsys.readouterr().err


def test_a_failed_baseline_leaves_nothing_in_the_source(
    tmp_path: Path, repo: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """docs/reliability.md §7 row 10: a baseline that fails (here: its focused test, before anything
    is measured) removes the chain head and the optimize/<name> branch it created."""
    root = tmp_path / "c"
    failing = (
        "--test-command",
        "python -c 'raise SystemExit(1)'",
        "--benchmark-command",
        "python bench.py",
    )
    rc, _, err = invoke(
        capsys, root, "--op", "gemm", "--source", str(repo), "--name", "fb", *failing
    )
    assert rc == 0, err
    with pytest.raises(SystemExit) as info:
        main(["--campaigns-root", str(root), "baseline", "--campaign", "fb", "--passes", "2"])
    err = capsys.readouterr().err
    assert info.value.code == 2 and "focused test fails on the base commit" in err, err
    assert _branches(repo) == []


def test_campaign_fields_refuse_a_name_that_is_not_one(tmp_path: Path) -> None:
    """Campaign creation takes one ``CampaignFields``: a misspelt field from a command
    or an upstream manifest is refused where it is built, naming it, never carried on."""
    from runner.core.errors import ConfigError
    from runner.flow.new_campaign import CampaignFields

    given = {"source": str(tmp_path), "target_op": "gemm", "target_shape": ["a"]}
    with pytest.raises(
        ConfigError, match=r"campaign init: unknown campaign field\(s\) target_shape"
    ):
        CampaignFields.from_mapping(given, "campaign init")
    with pytest.raises(ConfigError, match="no target_op"):
        CampaignFields.from_mapping({"source": str(tmp_path)}, "campaign init")
    fields = CampaignFields.from_mapping(
        {"source": "s", "target_op": "gemm", "heldout": False}, "x"
    )
    assert fields.as_dict() == {"source": "s", "target_op": "gemm", "heldout": False}
    assert dataclasses.replace(fields, target_gpu="sm90").as_dict()["target_gpu"] == "sm90"
