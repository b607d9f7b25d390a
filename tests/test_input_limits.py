"""docs/reliability.md §9, bad input, second pass: each row's input is refused (exit 2, saying
what to do, quoting at most a bounded excerpt) or gives the right result, on a campaign
that never measures (``Campaign.init`` of ``manifest()``): nothing here runs a round.
The bounds themselves are ``runner.core.limits``."""

from __future__ import annotations

import json
import os
import threading
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest
from campaign_helpers import manifest, run_cli
from hypothesis import given, settings
from hypothesis import strategies as st

from runner.core.errors import CampaignError, ConfigError, PatchRefused
from runner.core.limits import MAX_BLOCKS
from runner.judge.measuring_caps import MAX_PAIRS
from runner.store.campaign import Campaign


def _campaign(tmp_path: Path) -> tuple[Campaign, list[str]]:
    c = Campaign.init(tmp_path / "campaigns", manifest())
    return c, ["--campaigns-root", str(tmp_path / "campaigns")]


def _within(fn: Callable[[], Any], seconds: float = 10.0) -> BaseException | None:
    """Run ``fn`` in a daemon thread; the exception it raised (None: it returned).  A
    call still running after ``seconds`` fails the test instead of hanging it."""
    got: list[BaseException | None] = []

    def call() -> None:
        try:
            fn()
            got.append(None)
        except BaseException as exc:
            got.append(exc)

    worker = threading.Thread(target=call, daemon=True)
    worker.start()
    worker.join(seconds)
    assert got, f"still running after {seconds} s: it waits for ever"
    return got[0]


def _validate(root: list[str], *args: str) -> list[str]:
    return [*root, "validate", "--round", "2", "--hypothesis", "h", *args]


def test_row3_pair_counts_are_bounded_and_refused_up_front(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """`validate --pairs 200` planned 400 pairs, `--pairs=-5` ended in an IndexError,
    `campaign set pairs 1000000000` was accepted: each is exit 2 before anything runs,
    saying the range; 48 blocks are the 96 pairs one comparison measures at most."""
    assert 2 * MAX_BLOCKS == MAX_PAIRS
    c, root = _campaign(tmp_path)
    for asked in ("--pairs=-5", "--pairs=0", "--pairs=200"):
        code, out = run_cli(_validate(root, asked), capsys)
        assert code == 2 and f"from 1 to {MAX_BLOCKS}" in out, out
        assert not c.round_dir(2).exists()
    code, out = run_cli([*root, "accept", "--passes", "500"], capsys)
    assert code == 2 and f"from 1 to {MAX_BLOCKS}" in out, out
    before = c.manifest_path.read_bytes()
    code, out = run_cli([*root, "set", "pairs", "1000000000", "--reason", "more"], capsys)
    assert code == 2 and f"from 1 to {MAX_BLOCKS}" in out, out
    assert c.manifest_path.read_bytes() == before


def test_row4_unknown_bucket_refused_before_anything_is_recorded(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """`validate --bucket K9` was measured, closed ROLLED BACK and logged: a round used
    up.  It is refused up front, naming the buckets."""
    c, root = _campaign(tmp_path)
    logs = c.optimize_log.read_bytes(), c.trend_log.read_bytes()
    code, out = run_cli(_validate(root, "--bucket", "K9"), capsys)
    assert code == 2 and "not a transfer bucket" in out and "K1, K2, K3, K4, W1" in out, out
    assert not c.round_dir(2).exists()
    assert (c.optimize_log.read_bytes(), c.trend_log.read_bytes()) == logs


def test_row12_a_fifo_is_refused_not_waited_on(tmp_path: Path) -> None:
    """A FIFO given as the CSV, the pinned header or --patch hung for ever (through MCP
    the server could not exit): it is refused before it is opened."""
    from runner.core.csv_io import read_csv
    from runner.judge.json_contract import read_pinned_header
    from runner.store.lineage import read_patch_file

    fifo = tmp_path / "pipe"
    os.mkfifo(fifo)
    for read in (read_csv, read_pinned_header, read_patch_file):
        got = _within(lambda read=read: read(fifo))  # type: ignore[misc]
        assert isinstance(got, ConfigError) and "FIFO" in str(got), got


def test_row12_sigma_g_must_be_a_noise_figure(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """`campaign set sigma_g .inf` / `1e308` / `500%` were accepted."""
    c, root = _campaign(tmp_path)
    for value in (".inf", "1e308", "500%", "0"):
        code, out = run_cli([*root, "set", "sigma_g", value, "--reason", "r"], capsys)
        assert code == 2 and "relative noise" in out, (value, out)
    assert c.manifest.sigma_g is None
    code, out = run_cli([*root, "set", "sigma_g", "2%", "--reason", "measured"], capsys)
    assert code == 0, out
    assert Campaign.load(c.root).manifest.sigma_g == pytest.approx(0.02)


def test_row12_a_duplicate_manifest_key_is_refused_by_name(tmp_path: Path) -> None:
    """A key given twice in manifest.yaml: the last one won silently."""
    from runner.store.manifest import load_manifest

    c, _ = _campaign(tmp_path)
    text = c.manifest_path.read_text("utf-8")
    c.manifest_path.write_text(text + "pairs: 3\npairs: 4\n", "utf-8")
    with pytest.raises(ConfigError, match="the key 'pairs' is given twice"):
        load_manifest(c.manifest_path)


def test_row12_campaign_root_tilde_is_the_home_folder(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """`CAMPAIGN_ROOT='~/x'` (quoted, so no shell expanded it) made a folder named `~`."""
    from runner.cli.app import CAMPAIGNS_ROOT_ENV, App

    monkeypatch.setenv("HOME", str(tmp_path))
    monkeypatch.setenv(CAMPAIGNS_ROOT_ENV, "~/x")
    assert App.from_env(None).campaigns_root == tmp_path.resolve() / "x"
    assert App.from_env("~/y").campaigns_root == tmp_path.resolve() / "y"


def test_row12_the_same_patch_twice_in_a_tournament_is_refused(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """Both copies were measured, one judged against its own twin."""
    c, root = _campaign(tmp_path)
    diff = "diff --git a/k.py b/k.py\n--- a/k.py\n+++ b/k.py\n@@ -1 +1 @@\n-0\n+1\n"
    one, two = tmp_path / "one.patch", tmp_path / "two.patch"
    one.write_text(diff)
    two.write_text("From 0 Mon Sep 17 00:00:00 2001\nSubject: [PATCH] again\n\n" + diff)
    argv = [*root, "validate", "--round", "2", "--patch", str(one), "--patch", str(two)]
    code, out = run_cli([*argv, "--hypothesis", "a", "--hypothesis", "b"], capsys)
    assert code == 2 and "rounds 2 and 3 are the same patch" in out, out
    assert not c.round_dir(2).exists()


def test_row12_set_and_relocate_are_not_labelled_corrections(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """`campaign set` was logged as "CORRECTION — this corrects an entry above": it
    corrects nothing; it is a recorded change of a setting."""
    c, root = _campaign(tmp_path)
    before = c.optimize_log.read_text("utf-8")
    code, out = run_cli([*root, "set", "pairs", "2", "--reason", "a quieter machine"], capsys)
    assert code == 0, out
    added = c.optimize_log.read_text("utf-8")[len(before) :]
    assert "SETTING CHANGED" in added and "CORRECTION" not in added, added
    assert "a quieter machine" in added


def _bomb(levels: int) -> str:
    lines = ['a0: &a0 ["lol","lol","lol","lol","lol","lol","lol","lol","lol"]']
    for k in range(1, levels):
        refs = ",".join([f"*a{k - 1}"] * 9)
        lines.append(f"a{k}: &a{k} [{refs}]")
    return "\n".join(lines) + "\n"


def test_row6_a_yaml_alias_bomb_is_refused_quickly_and_briefly(tmp_path: Path) -> None:
    """A 1.6 KB manifest of 9 alias levels hung `status` past 120 s; 7 levels gave a 39 MB
    error message.  Both are refused in well under a second with a short message."""
    from runner.store.manifest import load_manifest

    c, _ = _campaign(tmp_path)
    text = c.manifest_path.read_text("utf-8")
    for levels in (7, 9):
        c.manifest_path.write_text(text + _bomb(levels), "utf-8")
        got = _within(lambda: load_manifest(c.manifest_path), 5.0)
        assert isinstance(got, ConfigError) and "aliases counted" in str(got), got
        assert len(str(got)) < 1000


def test_row6_row10_messages_quote_a_bounded_excerpt(tmp_path: Path) -> None:
    """A manifest value that fails validation was echoed whole (39 MB from an alias bomb)."""
    from runner.store.manifest import load_manifest

    c, _ = _campaign(tmp_path)
    text = c.manifest_path.read_text("utf-8")
    c.manifest_path.write_text(text + f"unknown_field: '{'x' * 200_000}'\n", "utf-8")
    with pytest.raises(ConfigError) as info:
        load_manifest(c.manifest_path)
    assert "unknown_field" in str(info.value) and len(str(info.value)) < 3000


def test_row10_sizes_are_bounded(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    """A 50 MB patch, a 100 KB hypothesis, a 120 KB correction and a CSV of 350,000
    labels were all accepted: each is refused, exit 2, saying what to do."""
    from runner.core.csv_io import read_csv
    from runner.core.csv_schema import GEMM_SCHEMA
    from runner.store.lineage import read_patch_file

    _, root = _campaign(tmp_path)
    big = tmp_path / "big.patch"
    big.write_text("diff --git a/k.py b/k.py\n" + "+x = 1\n" * 900_000)  # about 6 MB
    with pytest.raises(PatchRefused, match="one hypothesis per round"):
        read_patch_file(big)
    code, out = run_cli([*_validate(root)[:-1], "h" * 100_000], capsys)
    assert code == 2 and "the hypothesis has 100,000 characters" in out, out[:500]
    assert len(out) < 2000
    code, out = run_cli([*root, "correct", "--text", "c" * 120_000], capsys)
    assert code == 2 and "the correction has 120,000 characters" in out, out[:500]
    assert len(out) < 2000
    header = ",".join(GEMM_SCHEMA.columns)
    row = ",".join("PASS" if col == "Check" else "1" for col in GEMM_SCHEMA.columns[1:])
    csv = tmp_path / "many.csv"
    csv.write_text(header + "\n" + "".join(f"s{k},{row}\n" for k in range(30_000)))
    with pytest.raises(CampaignError, match="30,000 rows"):
        read_csv(csv)


EVIL = "grow BLOCK_K\n## Round 99 — ACCEPTED \x1b]0;pwned\x07 [see](javascript:alert(1))"


def _closed(
    c: Campaign, n: int, status: Any, hypothesis: str, value: float = 1.0, **over: Any
) -> Any:
    from runner.core.outcomes import RoundResult, Score, ShapeScore
    from runner.round.logs import close_round

    shape = ShapeScore("a", "PASS", value, value, value)
    score = Score("Combined Step TFLOPS", value, (shape,), 1, 0)
    c.snapshot_dir(n).mkdir(parents=True)
    (c.snapshot_dir(n) / "kernel.py").write_text("pass\n")
    result = RoundResult(
        round=n,
        status=status,
        level="quick",
        hypothesis=hypothesis,
        change="c",
        description="d",
        started="2026-12-03 17:30",
        finished="2026-12-03 17:40",
        test_command="pytest tests -q",
        benchmark_command="python bench.py",
        score=score,
        baseline=score,
        best=None if n == 1 else score,
        **over,
    )
    close_round(c, result)
    return result


def test_row7_user_text_is_data_in_logs_summaries_report_and_terminal(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """A hypothesis with a newline and `## Round 99 — ACCEPTED` made a real heading in the
    round's summary (and so in the HTML report); `rounds`, `status` and `show` printed
    an OSC sequence raw (it renamed the terminal)."""
    from runner.core.outcomes import Status
    from runner.render.mdhtml import to_html

    c, root = _campaign(tmp_path)
    _closed(c, 1, Status.BASELINE, "")
    _closed(c, 2, Status.ROLLED_BACK, EVIL)
    summary = c.summary_path(2).read_text("utf-8")
    for text in (summary, c.optimize_log.read_text("utf-8")):
        assert not [line for line in text.splitlines() if "Round 99" in line and line[0] == "#"]
        assert "\x1b" not in text and "\x07" not in text
        assert "Round 99" in text and "\\x1b" in text and "pwned" in text  # kept, as data
    page = to_html(summary)
    assert "Round 99" in page and "<h2>Round 99" not in page and 'href="javascript' not in page
    for argv in (["rounds"], ["status"], ["show", "2"]):
        _, out = run_cli([*root, *argv], capsys)
        assert "\x1b" not in out and "\x07" not in out, argv


def test_row12_mcp_answers_a_malformed_line_and_keeps_serving(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """Malformed JSON to `campaign mcp` got no JSON-RPC reply (a client waited for ever):
    a parse error (-32700), an invalid request (-32600) for a non-object and for a line
    over the bound, then the next message is served; `--help` names every tool."""
    import json
    import subprocess
    import sys

    from runner.core.limits import MAX_MCP_MESSAGE_BYTES

    lines = [
        b"{not json",
        b"[1, 2]",
        b'{"jsonrpc": "2.0", "id": 1, "params": "' + b"x" * MAX_MCP_MESSAGE_BYTES + b'"}',
        b'{"jsonrpc": "2.0", "id": 7, "method": "ping"}',
    ]
    argv = [sys.executable, "-m", "runner", "mcp", "--campaigns-root", str(tmp_path)]
    proc = subprocess.run(
        argv, input=b"\n".join(lines) + b"\n", capture_output=True, timeout=60, check=True
    )
    replies = [json.loads(line) for line in proc.stdout.splitlines()]
    codes = [r.get("error", {}).get("code") for r in replies]
    assert codes == [-32700, -32600, -32600, None], proc.stdout[:2000]
    assert replies[-1] == {"jsonrpc": "2.0", "id": 7, "result": {}}
    code, helped = run_cli(["mcp", "--help"], capsys)
    assert code == 0 and "validate_tournament" in helped


def _gemm_row(label: str, m: float = 4096, fwd_ms: float | None = None) -> dict[str, object]:
    flops = 2 * 4096**3
    return {
        "label": label,
        "B": 1,
        "M": m,
        "N": 4096,
        "K": 4096,
        "Check": "PASS",
        "Forward TFLOPS": 400.0,
        "Forward TFLOPS_stddev": 0.5,
        "Backward TFLOPS": 200.0,
        "Backward TFLOPS_stddev": 0.5,
        "Forward Time (ms)": fwd_ms if fwd_ms is not None else flops / 400e9,
        "Backward Time (ms)": 2 * flops / 200e9,
        "out_snr": 40.0,
        "da_snr": 40.0,
        "db_snr": 40.0,
    }


def test_row9_gate_checks_the_candidates_shapes_and_times(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """`campaign gate` ACCEPTED a candidate row whose M was 1e30 (+1.1e9%) and one whose
    forward time was 1e-300 ms (+14%): the first measured another shape, the second no
    kernel call; both are refused, exit 2, naming the row."""
    from runner.core.csv_io import write_csv
    from runner.core.csv_schema import GEMM_SCHEMA

    best = tmp_path / "best.csv"
    write_csv(best, GEMM_SCHEMA, [_gemm_row("a"), _gemm_row("b")])
    wanted = {"M = '1e+30'": {"m": 1e30}, "1e-300": {"fwd_ms": 1e-300}}
    for k, (said, bad) in enumerate(wanted.items()):
        cand = tmp_path / f"cand{k}.csv"
        write_csv(cand, GEMM_SCHEMA, [_gemm_row("a"), _gemm_row("b", **bad)])  # type: ignore[arg-type]
        code, out = run_cli(["gate", "--best", str(best), "--candidate", str(cand)], capsys)
        assert code == 2 and "row 'b'" in out and said in out, out
    code, out = run_cli(["gate", "--best", str(best), "--candidate", str(best)], capsys)
    assert code in (0, 3), out  # the same rows: a verdict, not a refusal


def _git(cwd: Path, *args: str) -> str:
    import subprocess

    env = {"GIT_AUTHOR_NAME": "t", "GIT_AUTHOR_EMAIL": "t@t", "GIT_COMMITTER_NAME": "t"}
    env |= {"GIT_COMMITTER_EMAIL": "t@t", "PATH": os.environ["PATH"], "HOME": str(cwd)}
    got = subprocess.run(["git", *args], cwd=cwd, env=env, check=True, capture_output=True)
    return got.stdout.decode("utf-8", "replace")


def _staged_patch(src: Path, change: Callable[[], object]) -> str:
    """The patch of ``change`` made in ``src`` (staged, diffed as a user would), undone."""
    change()
    _git(src, "add", "-A")
    patch = _git(src, "diff", "--cached", "-M", "--binary")
    _git(src, "reset", "-q", "--hard")
    _git(src, "clean", "-qfd")
    return patch


def test_row1_row2_the_scope_check_reads_what_git_applies(tmp_path: Path) -> None:
    """A rename of a test helper, a `chmod +x` of a test and an added binary beside a
    helper passed the scope check (it read only the ---/+++ lines); a patch that turns
    the kernel file into a link to a host file had the host file copied into the
    round's snapshot.  Each touched path is seen; the link is refused before anything
    runs; a snapshot copies regular files only."""
    from runner.store.lineage import Lineage, snapshot

    src = tmp_path / "src"
    (src / "kern").mkdir(parents=True)
    (src / "tests").mkdir()
    (src / "kern" / "k.py").write_text("K = 0\n")
    (src / "tests" / "helpers.py").write_text("H = 1\n")
    (src / "tests" / "test_k.py").write_text("def test_k():\n    pass\n")
    _git(src, "init", "-q", "-b", "main")
    _git(src, "add", "-A")
    _git(src, "commit", "-qm", "base")
    lineage = Lineage(src, "t", None)
    lineage.start(_git(src, "rev-parse", "HEAD").strip())
    host = tmp_path / "host-secret.txt"
    host.write_text("not for the records\n")

    renamed = _staged_patch(src, lambda: _git(src, "mv", "tests/helpers.py", "tests/x.py"))
    assert {"tests/helpers.py", "tests/x.py"} <= set(lineage.check_patch(renamed))
    chmod = _staged_patch(src, lambda: (src / "tests" / "test_k.py").chmod(0o755))
    assert "tests/test_k.py" in lineage.check_patch(chmod)
    so = src / "tests" / "helpers.cpython-311-x86_64-linux-gnu.so"
    binary = _staged_patch(src, lambda: so.write_bytes(b"\x7fELF\x00\x01" * 50))
    assert so.name in " ".join(lineage.check_patch(binary))

    def link() -> None:
        (src / "kern" / "k.py").unlink()
        (src / "kern" / "k.py").symlink_to(host)

    with pytest.raises(PatchRefused, match=r"kern/k\.py a symbolic link"):
        lineage.check_patch(_staged_patch(src, link))
    tree = tmp_path / "tree"
    (tree / "kern" / "sub").mkdir(parents=True)
    (tree / "kern" / "k.py").symlink_to(host)
    (tree / "kern" / "sub" / "leak").symlink_to(host)
    (tree / "kern" / "sub" / "ok.py").write_text("ok\n")
    snapshot(tree, ["kern/k.py", "kern/sub"], tmp_path / "snap")
    got = sorted(str(p.relative_to(tmp_path / "snap")) for p in (tmp_path / "snap").rglob("*"))
    assert got == ["kern", "kern/sub", "kern/sub/ok.py"], got


def test_row5_a_full_disk_is_exit_6_saying_what_was_kept(tmp_path: Path) -> None:
    """`correct` on a full tmpfs was an `OSError [Errno 28]` traceback, exit 1.  On a real
    full filesystem (a 1 MiB tmpfs in a private mount namespace, as the local executor
    isolates its jobs) it is exit 6, no traceback, saying what was kept and what to do."""
    import shutil
    import subprocess
    import sys

    if shutil.which("unshare") is None:
        pytest.skip("needs unshare (util-linux) for a private tmpfs")
    disk = tmp_path / "disk"
    disk.mkdir()
    tests = Path(__file__).resolve().parent
    init = (
        f"import sys; sys.path.insert(0, {str(tests)!r}); from pathlib import Path; "
        "from campaign_helpers import manifest; from runner.store.campaign import Campaign; "
        f"Campaign.init(Path({str(disk)!r}) / 'campaigns', manifest())"
    )
    script = (
        f'mount -t tmpfs -o size=1m none {disk} && {sys.executable} -c "{init}" && '
        f"(dd if=/dev/zero of={disk}/fill bs=4k 2>/dev/null; true) && "
        f"{sys.executable} -m runner --campaigns-root {disk}/campaigns correct "
        f"--text {'x' * 8000}; echo rc=$?"
    )
    argv = ["unshare", "--user", "--map-root-user", "--mount", "sh", "-c", script]
    got = subprocess.run(argv, capture_output=True, text=True, timeout=120)
    if "rc=" not in got.stdout:
        pytest.skip(f"no private tmpfs here: {got.stderr[-300:]}")
    assert "rc=6" in got.stdout, got.stdout + got.stderr
    assert "the disk is full" in got.stderr and "Traceback" not in got.stderr, got.stderr
    assert "What was kept" in got.stderr


def test_row8_a_failed_focused_test_is_not_passed_nor_measured(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """A round whose focused test failed: optimize.md said "Test: ... — passed" beside
    "focused test failed", and the CLI printed "0.000 -> 0.000 TFLOPS"."""
    from runner.cli.validate_cmd import print_result
    from runner.core.outcomes import Decision, GateResult, Status

    c, _ = _campaign(tmp_path)
    _closed(c, 1, Status.BASELINE, "")
    veto = "focused test failed on the candidate (pytest tests -q):\nE   assert 1 == 2"
    gate = GateResult(Decision.ROLLED_BACK, "Combined Step TFLOPS", 0.0, 0.0, 0.0, (), (), (veto,))
    result = _closed(c, 2, Status.ROLLED_BACK, "h", gate=gate, reasons=[veto])
    entry, state = (
        c.optimize_log.read_text("utf-8").split("### round-2")[1].split("\n## Current Best\n")
    )
    assert "— passed" not in entry and "failed on the candidate" in entry, entry
    assert "0.000" not in entry and "not measured" in entry, entry
    ineffective = state.split("\n## Verified Ineffective Directions\n")[1]
    assert "0.000" not in ineffective and "not measured" in ineffective, ineffective
    summary = c.summary_path(2).read_text("utf-8")
    assert "candidate 0.000" not in summary and "vetoed before measuring" in summary
    capsys.readouterr()
    print_result(result, c)
    out = capsys.readouterr().out
    assert "0.000 -> 0.000" not in out and "not measured" in out, out


def test_row11_a_change_committed_on_top_of_the_head_is_the_candidate(tmp_path: Path) -> None:
    """The user commits the change on `main` (at the lineage head), then `validate`
    without --patch: it said "would undo accepted rounds" (there were none).  The
    change committed on top of the head, with what is still uncommitted, is the patch."""
    from runner.store.lineage import Lineage

    src = tmp_path / "src"
    src.mkdir()
    (src / "k.py").write_text("K = 0\n")
    _git(src, "init", "-q", "-b", "main")
    _git(src, "add", "-A")
    _git(src, "commit", "-qm", "base")
    lineage = Lineage(src, "t", None)
    lineage.start(_git(src, "rev-parse", "HEAD").strip())
    (src / "k.py").write_text("K = 1\n")
    _git(src, "commit", "-qam", "my change")
    (src / "k.py").write_text("K = 2\n")
    patch = lineage.working_tree_patch()
    assert "-K = 0\n+K = 2\n" in patch
    assert lineage.check_patch(patch) == ["k.py"]


def test_newcomer_units_and_a_rolled_back_rounds_transfer_check(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """The metric was labelled "Combined Step TFLOPS" and printed in GFLOPS; a rolled-back
    round's transfer check said "ACCEPT-as-real"."""
    from runner.cli.validate_cmd import print_result
    from runner.core.outcomes import Status

    c, _ = _campaign(tmp_path)
    _closed(c, 1, Status.BASELINE, "", 0.0075)
    result = _closed(c, 2, Status.ROLLED_BACK, "h", 0.0075)  # 7.5 GFLOPS
    capsys.readouterr()
    print_result(result, c)
    out = capsys.readouterr().out
    assert "Combined Step GFLOPS geomean 7.500 GFLOPS" in out and "TFLOPS" not in out, out
    entry = c.optimize_log.read_text("utf-8").split("### round-2")[1]
    assert "TFLOPS geomean" not in entry and "GFLOPS geomean" in entry, entry
    summary = c.summary_path(2).read_text("utf-8")
    assert "ACCEPT-as-real" not in summary and "nothing was kept" in summary


def test_newcomer_an_inconclusive_round_and_the_next_step_offered(tmp_path: Path) -> None:
    """An inconclusive round (gate_up +23.8% ± 6.4%, rolled back) was listed among the
    ineffective directions as if shown so, and the first next step offered was
    `campaign accept` when nothing had been accepted (it can only refuse)."""
    from runner.core.outcomes import Decision, GateResult, PairedEvidence, Status
    from runner.render.final_report import ineffective_directions, next_steps

    c, _ = _campaign(tmp_path)
    base = _closed(c, 1, Status.BASELINE, "")
    gain = {"mean_pct": 23.8, "half_width_pct": 6.4, "pairs": 12}
    evidence = {"gain": gain, "shapes": {"a": gain}, "remeasure_size": 4}
    gate = GateResult(
        Decision.ROLLED_BACK,
        "Combined Step TFLOPS",
        1.0,
        1.238,
        23.8,
        (),
        (),
        ("noisy",),
        threshold_pct=28.0,
        pairs_used=12,
        evidence=PairedEvidence.from_dict(evidence),
    )
    rolled = _closed(c, 2, Status.ROLLED_BACK, "gate_up fusion", gate=gate)
    (line,) = ineffective_directions([base, rolled])
    assert "inconclusive" in line and "quieter machine" in line, line
    steps = next_steps([base, rolled], None, (base.score, base.score))
    assert not any("campaign accept" in s for s in steps), steps


_JSONISH = st.recursive(
    st.none() | st.booleans() | st.integers() | st.text(max_size=8),
    lambda inner: st.lists(inner, max_size=3) | st.dictionaries(st.text(max_size=6), inner),
    max_leaves=8,
)


@settings(max_examples=150, deadline=None)
@given(
    raw=st.one_of(
        st.binary(max_size=64),
        _JSONISH.map(lambda v: json.dumps(v).encode()),
        st.dictionaries(st.sampled_from(["jsonrpc", "id", "method"]), _JSONISH).map(
            lambda d: json.dumps({**d, "jsonrpc": "2.0"}).encode()
        ),
    )
)
def test_the_mcp_transport_answers_every_line(raw: bytes) -> None:
    """Fuzz over what a client may send on one line: each is served (a JSON-RPC 2.0
    object) or answered with a JSON-RPC error (-32700 or -32600) that serialises, or is
    blank; none raises."""
    from runner.cli.mcp_transport import INVALID_REQUEST, PARSE_ERROR, checked

    message, reply = checked(raw)
    if message is not None:
        assert reply is None and json.loads(message)["jsonrpc"] == "2.0"
    elif reply is not None:
        assert reply["error"]["code"] in (PARSE_ERROR, INVALID_REQUEST)
        assert json.loads(json.dumps(reply)) == reply
    else:
        assert not raw.strip()
