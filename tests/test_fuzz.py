"""Fuzzed readers (hypothesis): the CSV reader, the manifest loader, the patch intake,
the bundle reader and the MCP tools' arguments.  Every input gives a result or one of
the project's errors (a ``CampaignError`` with its exit code), never a traceback, and
nothing is written outside the folder the reader owns.  Example counts stay modest
(CI time); the patch intake runs real git, so it gets the fewest.
"""

from __future__ import annotations

import io
import os
import subprocess
import tarfile
from collections.abc import Iterator
from pathlib import Path

import pytest
import yaml
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from runner.core.csv_io import read_csv
from runner.core.csv_schema import GEMM_SCHEMA
from runner.core.errors import CampaignError
from runner.portable.bundle import open_bundle
from runner.store.lineage import Lineage, patch_paths
from runner.store.manifest import load_manifest

# Health checks on generation speed and size fire on a loaded 2-core CI machine, not on
# the code under test; the fixtures are reset by each example themselves.
_QUIET = [
    HealthCheck.function_scoped_fixture,
    HealthCheck.too_slow,
    HealthCheck.data_too_large,
    HealthCheck.filter_too_much,
]
FAST = settings(max_examples=60, deadline=None, suppress_health_check=_QUIET)
SLOW = settings(max_examples=15, deadline=None, suppress_health_check=_QUIET)
EXIT_CODES = {2, 5, 6, 7}


def _files(root: Path) -> set[str]:
    return {str(p.relative_to(root)) for p in root.rglob("*")}


def _project_error(exc: CampaignError) -> None:
    assert exc.return_code in EXIT_CODES, exc
    assert str(exc).strip()


# ---------------------------------------------------------------- CSV reader
HEADER = GEMM_SCHEMA.header
CELL = st.one_of(
    st.sampled_from(["PASS", "FAIL", "-", "", "nan", "inf", "-1", "0", "1e400", "1_0", '"']),
    st.floats(allow_nan=True).map(repr),
    st.text(max_size=6),
)
ROW = st.lists(CELL, min_size=0, max_size=17).map(",".join)
EOL = st.sampled_from(["\n", "\r\n", "\r"])


@st.composite
def csv_bytes(draw: st.DrawFn) -> bytes:
    head = draw(
        st.one_of(
            st.just(HEADER),
            st.just("\ufeff" + HEADER),
            st.just(HEADER.replace("Check", "check")),
            st.text(max_size=40),
        )
    )
    rows = draw(st.lists(st.one_of(ROW, st.just("a,1,16,256,1024,PASS" + ",1" * 9)), max_size=4))
    eol = draw(EOL)
    text = eol.join([head, *rows]) + draw(st.sampled_from(["", eol]))
    raw = text.encode("utf-8", "surrogatepass")
    return draw(st.one_of(st.just(raw), st.binary(max_size=200)))


@FAST
@given(data=csv_bytes())
def test_csv_reader_fuzz(tmp_path: Path, data: bytes) -> None:
    path = tmp_path / "b.csv"
    path.write_bytes(data)
    before = _files(tmp_path)
    for pinned in (None, HEADER):
        try:
            got = read_csv(path, pinned=pinned)
        except CampaignError as exc:
            _project_error(exc)
        else:
            assert got.rows and got.header == HEADER
    assert _files(tmp_path) == before


# ---------------------------------------------------------------- manifest loader
VALID = {
    "target_op": "gemm_fp8",
    "target_backend": "TORCH",
    "target_gpu": "cpu",
    "target_lang": "PYTORCH",
    "primary_metric": "Combined Step TFLOPS",
    "created": "2026-11-30 12:00",
    "target_shapes": "all",
    "kernel_source": ["turbo_kernels/cpu/gemm_fp8.py"],
    "test_command": "python -m pytest -q",
    "benchmark_command": "python -m runner.worker.fullbench",
    "quick_command": "python q.py",
    "schema_version": 1,
    "campaign_name": "fuzz",
    "target": "example",
    "source": "/nonexistent/source",
    "granularity": "blockwise",
    "shape_set": "cpu",
    "timing": {"repeats": 3, "warmup_s": 0.1},
}
JSONISH = st.recursive(
    st.one_of(st.none(), st.booleans(), st.integers(), st.floats(), st.text(max_size=12)),
    lambda inner: st.one_of(
        st.lists(inner, max_size=3), st.dictionaries(st.text(max_size=8), inner, max_size=3)
    ),
    max_leaves=8,
)


@st.composite
def manifest_bytes(draw: st.DrawFn) -> bytes:
    kind = draw(st.sampled_from(["mutated", "dropped", "raw", "binary"]))
    if kind == "binary":
        return draw(st.binary(max_size=200))
    if kind == "raw":
        return draw(st.text(max_size=200)).encode("utf-8", "surrogatepass")
    data = dict(VALID)
    key = draw(st.sampled_from(sorted(VALID)))
    if kind == "dropped":
        del data[key]
    else:
        data[key] = draw(JSONISH)
    return yaml.safe_dump(data).encode()


@FAST
@given(data=manifest_bytes())
def test_manifest_loader_fuzz(tmp_path: Path, data: bytes) -> None:
    path = tmp_path / "manifest.yaml"
    path.write_bytes(data)
    before = _files(tmp_path)
    try:
        load_manifest(path)
    except CampaignError as exc:
        _project_error(exc)
    assert _files(tmp_path) == before


def test_the_valid_manifest_of_the_fuzzer_loads(tmp_path: Path) -> None:
    """The fuzzer mutates a manifest that is valid: a mutation is the only fault."""
    path = tmp_path / "manifest.yaml"
    path.write_text(yaml.safe_dump(VALID), encoding="utf-8")
    assert load_manifest(path).campaign_name == "fuzz"


# ---------------------------------------------------------------- patch intake
def _git(cwd: Path, *args: str) -> str:
    env = {
        **os.environ,
        "GIT_AUTHOR_NAME": "t",
        "GIT_AUTHOR_EMAIL": "t@t",
        "GIT_COMMITTER_NAME": "t",
        "GIT_COMMITTER_EMAIL": "t@t",
    }
    return subprocess.run(
        ["git", *args], cwd=cwd, env=env, check=True, capture_output=True, text=True
    ).stdout


@pytest.fixture(scope="module")
def repo(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Lineage]:
    src = tmp_path_factory.mktemp("patchfuzz") / "src"
    src.mkdir()
    (src / "k.py").write_text("def f(x):\n    return x + 1\n")
    _git(src, "init", "-q", "-b", "main")
    _git(src, "add", "-A")
    _git(src, "commit", "-q", "-m", "base")
    lineage = Lineage(src, "fuzz", None)
    lineage.start(_git(src, "rev-parse", "HEAD").strip())
    yield lineage


GOOD_PATCH = (
    "diff --git a/k.py b/k.py\n--- a/k.py\n+++ b/k.py\n@@ -1,2 +1,2 @@\n def f(x):\n"
    "-    return x + 1\n+    return x + 2\n"
)


@st.composite
def patches(draw: st.DrawFn) -> str:
    kind = draw(st.sampled_from(["mutated", "text", "paths"]))
    if kind == "text":
        return draw(st.text(max_size=120))
    if kind == "paths":
        name = draw(st.sampled_from(["../escape.py", "/etc/passwd", ".git/config", "a b.py"]))
        return GOOD_PATCH.replace("k.py", name)
    at = draw(st.integers(0, len(GOOD_PATCH)))
    cut = draw(st.integers(0, 8))
    return GOOD_PATCH[:at] + draw(st.text(max_size=6)) + GOOD_PATCH[at + cut :]


@SLOW
@given(patch=patches())
def test_patch_intake_fuzz(repo: Lineage, patch: str) -> None:
    status = _git(repo.source, "status", "--porcelain", "--ignored")
    parent = repo.source.parent
    # git apply --index stores the patch's blobs in the object database (content-
    # addressed, unreferenced, harmless); nothing else may change
    before = {f for f in _files(parent) if not f.startswith("src/.git/objects")}
    try:
        touched = repo.check_patch(patch)
    except CampaignError as exc:
        _project_error(exc)
    else:
        assert touched == patch_paths(patch)
    assert _git(repo.source, "status", "--porcelain", "--ignored") == status
    assert {f for f in _files(parent) if not f.startswith("src/.git/objects")} == before
    worktrees = _git(repo.source, "worktree", "list", "--porcelain")
    assert worktrees.count("worktree ") == 1


@FAST
@given(patch=st.text(max_size=300))
def test_patch_paths_never_raises(patch: str) -> None:
    assert isinstance(patch_paths(patch), list)


# ---------------------------------------------------------------- bundle reader
MEMBER = st.tuples(
    st.one_of(
        st.sampled_from(
            [
                "c/bundle.yaml",
                "c/manifest.yaml",
                "c/MANIFEST.sha256",
                "c/x",
                "../evil",
                "/abs",
                "c/../../evil",
                "c",
                "d/y",
            ]
        ),
        st.text(alphabet="abc/._", min_size=1, max_size=12),
    ),
    st.binary(max_size=60),
    st.sampled_from([tarfile.REGTYPE, tarfile.DIRTYPE, tarfile.SYMTYPE]),
)


@st.composite
def bundles(draw: st.DrawFn) -> bytes:
    if draw(st.booleans()):
        return draw(st.binary(max_size=200))
    buf = io.BytesIO()
    with tarfile.open(fileobj=buf, mode="w:gz") as tar:
        for name, data, kind in draw(st.lists(MEMBER, max_size=5)):
            info = tarfile.TarInfo(name)
            info.type = kind
            if kind == tarfile.SYMTYPE:
                info.linkname = "/etc/passwd"
                tar.addfile(info)
            elif kind == tarfile.DIRTYPE:
                tar.addfile(info)
            else:
                info.size = len(data)
                tar.addfile(info, io.BytesIO(data))
    return buf.getvalue()


@FAST
@given(data=bundles())
def test_bundle_reader_fuzz(tmp_path: Path, data: bytes) -> None:
    box = tmp_path / "box"
    box.mkdir(exist_ok=True)
    for p in sorted(box.rglob("*"), reverse=True):
        p.unlink() if p.is_file() or p.is_symlink() else p.rmdir()
    bundle = box / "b.tar.gz"
    bundle.write_bytes(data)
    dest = box / "out"
    dest.mkdir()
    try:
        open_bundle(bundle, dest)
    except CampaignError as exc:
        _project_error(exc)
    outside = _files(box) - {"b.tar.gz", "out"}
    assert all(p.startswith("out/") for p in outside), outside
    assert not (tmp_path / "evil").exists()


# ---------------------------------------------------------------- MCP tools' arguments
NAMES = st.one_of(
    st.none(),
    st.sampled_from(["..", ".", "../x", "/", "/etc", "a/b", "x" * 300, "ok", "\x00", "~"]),
    st.text(max_size=20),
)
PATHS = st.one_of(
    st.sampled_from(
        [
            "best.csv",
            "../outside.csv",
            "/etc/passwd",
            "",
            ".",
            "..",
            "\x00",
            "sub/../best.csv",
            "/dev/zero",
        ]
    ),
    st.text(max_size=30),
)


@pytest.fixture(scope="module")
def tools_root(tmp_path_factory: pytest.TempPathFactory) -> Path:
    from runner.core.csv_io import write_csv

    base = tmp_path_factory.mktemp("mcpfuzz")
    root = base / "campaigns"
    root.mkdir()
    row = {c: 1.0 for c in GEMM_SCHEMA.columns} | {"label": "a", "Check": "PASS"}
    write_csv(root / "best.csv", GEMM_SCHEMA, [row])
    write_csv(base / "outside.csv", GEMM_SCHEMA, [row])
    return root


@FAST
@given(
    name=NAMES,
    path=PATHS,
    other=PATHS,
    n=st.integers(-(2**70), 2**70),
    sigma=st.one_of(st.none(), st.floats()),
    shapes=st.one_of(st.none(), st.lists(st.text(max_size=5), max_size=3)),
)
def test_mcp_tool_arguments_fuzz(
    tools_root: Path,
    name: str | None,
    path: str,
    other: str,
    n: int,
    sigma: float | None,
    shapes: list[str] | None,
) -> None:
    pytest.importorskip("mcp")
    from mcp.server.mcpserver.exceptions import ToolError

    from runner.cli.mcp_server import TurboTools
    from runner.judge.scoring import Metric

    tools = TurboTools(tools_root)
    base = tools_root.parent
    before = _files(base)
    calls = [
        lambda: tools.parse_bench_csv(path, name),
        lambda: tools.score(path, Metric.AUTO, other if name else None),
        lambda: tools.gate(path, other, Metric.AUTO, sigma, shapes),
        lambda: tools.campaign_status(name),
        lambda: tools.list_rounds(name),
        lambda: tools.round_summary(n, name),
    ]
    for call in calls:
        try:
            call()
        except ToolError as exc:
            cause = exc.__cause__
            assert isinstance(cause, CampaignError), repr(cause)
            _project_error(cause)
    assert _files(base) == before


# ---------------------------------------------------------------- the command line
# Every command but those that run for minutes whatever their arguments (demo, mcp,
# image); baseline only where there is no campaign to measure.
CLI_COMMANDS = [
    "accept",
    "correct",
    "export",
    "gate",
    "init",
    "isa",
    "profile",
    "relocate",
    "report",
    "reproduce",
    "rounds",
    "score",
    "set",
    "show",
    "status",
    "tip",
    "validate",
]
CLI_FLAGS = [
    "--round",
    "--hypothesis",
    "--patch",
    "--text",
    "--reason",
    "--pairs",
    "--passes",
    "--timeout",
    "--level",
    "--bucket",
    "--out",
    "--source",
    "--op",
    "--name",
    "--json",
    "--campaign",
    "sigma_g",
    "timing",
    "pairs",
    "shape_set",
    "test_command",
    "2",
    "-1",
    "nan",
    "1e400",
    "{warmup_s: .inf}",
    "[]",
    "full",
    "quick",
    "K1",
    ".",
    "/",
    "~",
]
# what a POSIX argv can hold: any text but NUL, and bytes that are not UTF-8 (kept by
# Python as lone surrogates, as a latin-1 terminal gives them)
CLI_ARG = st.one_of(
    st.sampled_from(CLI_FLAGS),
    st.text(st.characters(blacklist_characters="\x00", blacklist_categories=["Cs"]), max_size=40),
    st.binary(max_size=12)
    .filter(lambda b: b"\x00" not in b)
    .map(lambda b: b.decode("utf-8", "surrogateescape")),
    st.sampled_from(["x" * 300, "9" * 30]),
)


@pytest.fixture(scope="module")
def cli_roots(tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, Path]:
    """(an empty campaigns root, a root holding one campaign with no round yet)"""
    from campaign_helpers import tiny_campaign

    empty = tmp_path_factory.mktemp("cli-empty") / "campaigns"
    camp = tiny_campaign(tmp_path_factory.mktemp("cli-one"), "f", baseline=False)
    return empty, camp.root.parent


@settings(max_examples=120, deadline=None, suppress_health_check=_QUIET)
@given(
    command=st.one_of(st.sampled_from(CLI_COMMANDS), st.just("baseline")),
    args=st.lists(CLI_ARG, max_size=6),
    with_campaign=st.booleans(),
)
def test_cli_arguments_fuzz(
    cli_roots: tuple[Path, Path],
    capsys: pytest.CaptureFixture[str],
    command: str,
    args: list[str],
    with_campaign: bool,
) -> None:
    """Any arguments give an exit status and a message, never a traceback."""
    from runner.cli import main

    root = cli_roots[1] if with_campaign and command != "baseline" else cli_roots[0]
    with pytest.raises(SystemExit) as info:
        main(["--campaigns-root", str(root), command, *args])
    out = capsys.readouterr()
    assert info.value.code in (None, 0, 1, 2, 3, 5), (info.value.code, out)
    assert "Traceback" not in out.out + out.err
