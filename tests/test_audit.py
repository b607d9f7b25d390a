"""runner.judge.audit: static audit of candidate patches (docs/protocol.md §8.2-8.3).

Sample sources live in tests/data/audit/<file>.<variant>.py; the patch of each case is
generated here with difflib, in git format, from ``<file>.before.py`` to the variant.
"""

from __future__ import annotations

import difflib
import json
from pathlib import Path

import pytest
from hypothesis import given
from hypothesis import strategies as st

from runner.judge.audit import AuditReport, audit_patch, changed_lines, check_declared_bucket
from runner.judge.audit_source import REJECT, WARN, audit_source

DATA = Path(__file__).parent / "data" / "audit"
REPO_PATHS = {
    "gemm_fp8": "primus_turbo/pytorch/ops/gemm_fp8.py",
    "gemm_kernel": "primus_turbo/triton/gemm/gemm_fp8_kernel.py",
    "grouped_gemm": "primus_turbo/pytorch/ops/grouped_gemm.py",
    "linear_fp8": "primus_turbo/pytorch/modules/linear_fp8.py",
}


def git_patch(path: str, before: str, after: str) -> str:
    body = difflib.unified_diff(
        before.splitlines(keepends=True),
        after.splitlines(keepends=True),
        fromfile=f"a/{path}",
        tofile=f"b/{path}",
    )
    return f"diff --git a/{path} b/{path}\n" + "".join(body)


def sample(base: str, variant: str) -> str:
    return (DATA / f"{base}.{variant}.py").read_text()


def audit_case(base: str, variant: str, with_old: bool = False) -> AuditReport:
    path = REPO_PATHS[base]
    before, after = sample(base, "before"), sample(base, variant)
    old = {path: before} if with_old else None
    return audit_patch(git_patch(path, before, after), {path: after}, old)


CASES = [
    # (base, variant, buckets, rejects, rule of the first finding)
    ("gemm_kernel", "k1_autotune", set(), False, None),
    ("gemm_fp8", "w1_cache", {"W1"}, False, "id-key"),
    ("gemm_fp8", "w2_cache", {"W2"}, True, "id-key"),
    ("gemm_fp8", "w2_versioned", {"W2"}, True, "id-key"),
    ("gemm_fp8", "lru_quant", {"W3"}, True, "lru-cache"),
    ("linear_fp8", "ordereddict_memo", {"W2"}, True, "id-key"),
    ("linear_fp8", "shape_memo", {"W3"}, True, "memo-container"),
    ("grouped_gemm", "constexpr", {"GG-UNIFORM"}, True, "gg-constexpr"),
    ("grouped_gemm", "divisible", {"GG-UNIFORM"}, True, "gg-divisible"),
    ("grouped_gemm", "static_split", {"GG-UNIFORM"}, True, "gg-static-split"),
    ("grouped_gemm", "nonempty", {"GG-UNIFORM"}, True, "gg-nonempty"),
]


@pytest.mark.parametrize(("base", "variant", "buckets", "rejects", "rule"), CASES)
@pytest.mark.parametrize("with_old", [False, True])
def test_sample_patches(
    base: str, variant: str, buckets: set[str], rejects: bool, rule: str | None, with_old: bool
) -> None:
    report = audit_case(base, variant, with_old)
    assert report.buckets == buckets
    assert report.rejects is rejects
    assert report.unaudited == []
    if rule is not None:
        assert report.findings[0].rule == rule
        assert all(f.path == REPO_PATHS[base] for f in report.findings)
    json.dumps(report.to_dict())  # travels as JSON


def test_before_sources_are_clean() -> None:
    for base in REPO_PATHS:
        assert audit_source("x.py", sample(base, "before")) == []


def test_k1_autotune_change_keeps_scalar_lru_cache_legal() -> None:
    # the K1 sample edits an lru_cache keyed on (M: int, N: int, K: int): a config cache
    report = audit_case("gemm_kernel", "k1_autotune")
    assert report.findings == []
    assert not report.adds_cache
    assert check_declared_bucket(report, "K1") == []
    assert report.id_audit() == "no cache added; no id()-keyed state found"


def test_w1_weight_cache_is_allowed_with_a_warning() -> None:
    report = audit_case("gemm_fp8", "w1_cache")
    assert {f.severity for f in report.findings} == {WARN}
    assert report.adds_cache  # needs the 8-step simulation
    assert "quant_time(weight)/step_time" in report.findings[0].message
    # the key helper _weight_key is inlined: its return line is part of the evidence
    helper_line = (
        sample("gemm_fp8", "w1_cache")
        .splitlines()
        .index("    return (id(w), w._version, tuple(w.shape), w.dtype)")
    )
    assert helper_line + 1 in report.findings[0].lines


def test_w2_with_version_shape_and_dtype_is_still_w2() -> None:
    report = audit_case("gemm_fp8", "w2_versioned")
    assert report.buckets == {"W2"}
    assert all(f.severity == REJECT for f in report.findings)
    assert "grad_out" in report.findings[0].message
    assert "does not make it legal" in report.findings[0].message


def test_declared_bucket_mismatches() -> None:
    w1 = audit_case("gemm_fp8", "w1_cache")
    k1 = audit_case("gemm_kernel", "k1_autotune")
    w2 = audit_case("gemm_fp8", "w2_cache")
    assert check_declared_bucket(w1, "W1") == []
    assert check_declared_bucket(w1, " w1 ") == []
    assert any("W1 weight cache" in p for p in check_declared_bucket(w1, "K1"))
    assert any("no weight cache" in p for p in check_declared_bucket(k1, "W1"))
    assert any("forbidden ['W2']" in p for p in check_declared_bucket(w2, "K3"))
    assert any("forbidden" in p for p in check_declared_bucket(w2, "W1"))
    assert any("not one of" in p for p in check_declared_bucket(k1, "W2"))


def test_untouched_preexisting_cache_is_not_reported() -> None:
    path = REPO_PATHS["gemm_fp8"]
    before = sample("gemm_fp8", "w1_cache")
    after = before.replace("sample modelled on", "sample, modelled on")
    patch = git_patch(path, before, after)
    assert audit_patch(patch, {path: after}).findings == []
    assert audit_patch(patch, {path: after}, {path: before}).findings == []


def test_change_in_key_helper_reaches_the_cache_site() -> None:
    # the patch touches only the helper's return line; the cache sites are unchanged
    path = REPO_PATHS["gemm_fp8"]
    before = sample("gemm_fp8", "w1_cache")
    after = before.replace("(id(w), w._version, tuple(w.shape), w.dtype)", "(id(w), w.dtype)")
    report = audit_patch(git_patch(path, before, after), {path: after})
    assert report.buckets == {"W3"}
    assert "without _version+shape" in report.findings[0].message


def test_deleting_version_from_a_multiline_key_is_caught() -> None:
    path = "primus_turbo/pytorch/ops/gemm_fp8.py"
    src = (
        "_CACHE = {}\n\n\ndef quantize_weight(b, config):\n    key = (\n        id(b),\n"
        "        b._version,\n        tuple(b.shape),\n    )\n    if key not in _CACHE:\n"
        "        _CACHE[key] = config.quantize(b)\n    return _CACHE[key]\n"
    )
    assert {f.bucket for f in audit_source(path, src)} == {"W1"}
    after = src.replace("        b._version,\n", "")
    report = audit_patch(git_patch(path, src, after), {path: after})
    assert report.buckets == {"W3"}  # a pure deletion, no added line


def test_new_finding_on_unchanged_line_needs_old_sources() -> None:
    # renaming a helper into forward code makes an unchanged cache write a finding
    path = "primus_turbo/pytorch/ops/linear.py"
    before = (
        "_MEMO = {}\n\n\ndef prep(x, key):\n    _MEMO[key] = x.float() * 2\n    return _MEMO[key]\n"
    )
    after = before.replace("def prep(", "def prep_forward(")
    patch = git_patch(path, before, after)
    assert audit_patch(patch, {path: after}).findings == []  # limit: line 5 is untouched
    report = audit_patch(patch, {path: after}, {path: before})
    assert report.buckets == {"W3"}
    assert report.findings[0].rule == "memo-container"


def test_unparseable_missing_and_non_python_files() -> None:
    patch = (
        git_patch("a.py", "x = 1\n", "x = (\n")
        + git_patch("b.py", "y = 1\n", "y = 2\n")
        + git_patch("csrc/kernels/gemm.cu", "int x;\n", "int y;\n")
    )
    report = audit_patch(patch, {"a.py": "x = (\n"})
    assert [(f.bucket, f.path, f.severity) for f in report.findings] == [
        ("AUDIT", "a.py", REJECT),
        ("AUDIT", "b.py", REJECT),
    ]
    assert report.unaudited == ["csrc/kernels/gemm.cu"]


def test_source_keys_may_carry_a_prefix() -> None:
    path = REPO_PATHS["gemm_fp8"]
    before, after = sample("gemm_fp8", "before"), sample("gemm_fp8", "w2_cache")
    report = audit_patch(git_patch(path, before, after), {f"/worktree/{path}": after})
    assert report.buckets == {"W2"}


SNIPPETS = [
    # (source, expected buckets)
    ("C = {}\ndef f(a):\n    return C.get(hash(a))\n", {"W2"}),
    ("C = {}\ndef f(a):\n    return C[a.data_ptr()]\n", {"W2"}),
    ("def f(a):\n    return a.data_ptr() % 16 == 0\n", set()),
    ("C = {}\ndef f(x):\n    return C[(id(x), x._version, x.shape, x.dtype)]\n", {"W2"}),
    ("C = {}\ndef f(t):\n    return C[id(t)]\n", {"W3"}),
    ("C = {}\ndef f(w):\n    return C[(id(w), w._version)]\n", {"W3"}),  # no shape
    ("C = {}\ndef f(w):\n    return C[(id(w), w.shape)]\n", {"W3"}),  # no _version
    ("C = {}\ndef f(w):\n    return C[(id(w), w._version, w.size())]\n", {"W1"}),
    ("C = {}\ndef f():\n    w = make()\n    return C[(id(w), w._version, w.shape)]\n", {"W3"}),
    ("C = {}\ndef f(self):\n    return C[(id(self), 3)]\n", set()),
    ("C = {}\ndef f(launch):\n    return C[id(launch)]\n", {"ID-KEY"}),
    (
        "import weakref\nC = weakref.WeakKeyDictionary()\ndef forward(x, w):\n"
        "    if x in C:\n        return C[x]\n    C[x] = y = x @ w\n    return y\n",
        {"W2"},
    ),
    (
        "class M:\n    def forward(self, a):\n        if self._last is a:\n"
        "            return self._out\n        return a\n",
        {"W2"},
    ),
    ("def forward(self, x):\n    if self._key == (id(x), x._version):\n        pass\n", {"W2"}),
    (
        "import functools\n@functools.cache\ndef gemm_cfg(m: int, n: int, k: int):\n    pass\n",
        set(),
    ),
    (
        "from functools import lru_cache\n@lru_cache\ndef gemm_cfg(m, n, k, dtype):\n    pass\n",
        set(),
    ),
    ("import functools\n@functools.lru_cache\ndef f(t):\n    return t.float()\n", {"W3"}),
    ("from functools import cache\n@cache\ndef quantize(x):\n    return q(x)\n", {"W3"}),
    ("M_PER_GROUP = 256\n", {"GG-UNIFORM"}),
    ("def f(tokens_per_expert):\n    tokens_per_expert = tokens_per_expert.cumsum(0)\n", set()),
    (
        "def grouped_gemm(a, b, G):\n    group_lens = torch.full((G,), a.shape[0] // G)\n",
        {"GG-UNIFORM"},
    ),
    ("def grouped_gemm(a, b, G, M, K):\n    return a.view(G, -1, K)\n", {"GG-UNIFORM"}),
    ("def grouped_gemm(a, b, G, N, K):\n    return b.view(G, N, K)\n", set()),
    ("def grouped_gemm(x, num_experts):\n    return x.chunk(num_experts)\n", {"GG-UNIFORM"}),
    ("def grouped_gemm(x, sizes):\n    return x.split(sizes)\n", set()),
    ("def gemm(a, b, K):\n    assert K % 16 == 0\n", set()),
    (
        "def moe(x, group_lens):\n    if group_lens.min() == 0:\n        raise ValueError\n",
        {"GG-UNIFORM"},
    ),
    ("def moe(x, group_lens):\n    assert group_lens.numel() > 0\n", set()),
    ("def moe(x, group_lens):\n    assert (group_lens % 128 == 0).all()\n", {"GG-UNIFORM"}),
    ("def moe(x, group_lens):\n    assert group_lens.sum() > 0\n", set()),
    ("def moe(x, group_lens):\n    if (group_lens == 0).any():\n        raise E\n", {"GG-UNIFORM"}),
    ("def grouped_gemm(a, b, M, G):\n    if M % G != 0:\n        raise E\n", {"GG-UNIFORM"}),
    ("def test_view(x, y):\n    assert id(x.data) == id(y.data)\n", set()),  # no stored state
]


@pytest.mark.parametrize(("source", "buckets"), SNIPPETS)
def test_rule_snippets(source: str, buckets: set[str]) -> None:
    assert {f.bucket for f in audit_source("primus_turbo/x.py", source)} == buckets


def test_id_key_is_a_warning_not_a_reject() -> None:
    (finding,) = audit_source("x.py", SNIPPETS[10][0])
    assert finding.severity == WARN


@given(
    st.lists(st.sampled_from("abcdef"), max_size=12),
    st.lists(st.sampled_from("abcdef"), max_size=12),
)
def test_changed_lines_matches_difflib(old: list[str], new: list[str]) -> None:
    before = "".join(f"{c}\n" for c in old)
    after = "".join(f"{c}\n" for c in new)
    files = changed_lines(git_patch("f.py", before, after))
    ops = difflib.SequenceMatcher(a=old, b=new, autojunk=False).get_opcodes()
    added = {
        j + 1 for tag, _, _, j1, j2 in ops if tag in ("insert", "replace") for j in range(j1, j2)
    }
    if before == after:
        assert files == {}
    else:
        assert added <= files["f.py"]
        # besides added lines, only the neighbours of removals are marked
        removal_points = {j1 for tag, _, _, j1, _ in ops if tag in ("delete", "replace")}
        near = {p for j in removal_points for p in (max(j, 1), j + 1)}
        assert files["f.py"] - added <= near


def test_changed_lines_reads_content_that_looks_like_headers() -> None:
    patch = (
        "diff --git a/x.py b/x.py\n--- a/x.py\n+++ b/x.py\n@@ -1,2 +1,3 @@\n"
        " a = 1\n+++ b/evil.py\n+--- a/evil.py\n b = 2\n"
    )
    assert changed_lines(patch) == {"x.py": {2, 3}}


def test_a_uniform_split_through_a_neutral_local_name_is_caught() -> None:
    """`rows = M // G` then `torch.split(a, rows)`: the name says nothing, the value does."""
    before = (
        "import torch\n\n\ndef grouped_gemm(a, b, group_lens):\n"
        "    outs = []\n    start = 0\n"
        "    for g, n in enumerate(group_lens.tolist()):\n"
        "        outs.append(a[start : start + n] @ b[g].t())\n        start += n\n"
        "    return torch.cat(outs)\n"
    )
    after = (
        "import torch\n\n\ndef grouped_gemm(a, b, group_lens):\n"
        "    rows = a.shape[0] // len(group_lens)\n"
        "    parts = torch.split(a, rows)\n"
        "    return torch.cat([p @ b[g].t() for g, p in enumerate(parts)])\n"
    )
    path = "pkg/grouped_gemm.py"
    patch = "".join(
        difflib.unified_diff(
            before.splitlines(keepends=True),
            after.splitlines(keepends=True),
            f"a/{path}",
            f"b/{path}",
        )
    )
    report = audit_patch(f"diff --git a/{path} b/{path}\n" + patch, {path: after}, {path: before})
    assert report.rejects
    assert any(f.bucket == "GG-UNIFORM" and "split" in f.message for f in report.findings)
