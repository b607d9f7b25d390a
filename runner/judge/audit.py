"""Static audit of a candidate patch: docs/protocol.md §8.2-8.3 (W1-W3, grouped GEMM).

``audit_patch`` reads the unified diff for the lines each file gains (and the points
where lines were removed), parses the *new* source of every changed ``.py`` file with
``ast`` and reports the findings that touch those lines or that ``old_sources`` lacks.
A finding "touches" a line when the site, or an assignment its key was resolved
through (local names, same-module key helpers), is on it.

Rules (``Finding.rule``):

* ``id-key``: a subscript, ``get``/``setdefault``/``pop``, ``in`` test, ``==``/``is`` test
  or dict literal whose key holds a tensor's identity: ``id(t)``, ``hash(t)``,
  ``t.data_ptr()`` (not in pointer arithmetic), ``weakref.ref(t)``; or, for a cache-like
  container, the tensor itself.  W1 only when every identity is a weight-named parameter
  (or ``ctx.saved_tensors`` entry, or ``self.<weight>``) AND the key holds its
  ``_version`` AND shape.  An activation/grad/scale identity is W2; any other tensor W3;
  a weight without ``_version``/shape W3.  ``_version``/shape/dtype never legalise W2/W3.
  ``id()`` of an object whose name says nothing (``id(launch)``) is ID-KEY, a warning.
* ``lru-cache``: ``functools.lru_cache``/``cache`` on a function with a tensor parameter
  (annotated Tensor, or used as ``p.attr``/``p[...]``), or with an activation/weight-named
  parameter in forward/backward/gemm/quant code: ``hash(Tensor)`` is ``id``.
* ``memo-container``: inside forward/backward/gemm/quant code, a write into a module-,
  class- or instance-level dict/OrderedDict/WeakKeyDictionary/list or a ``global``, keyed
  on a tensor identity, or storing tensor data (not a compiled kernel/config/buffer).
* ``harness-reach`` (bucket HARNESS, ``runner.judge.reach``): stack/frame inspection,
  ``sys.modules`` lookups, imports of the harness or ``ctypes``, ``gc`` reach-ins and
  assignments to attributes of modules the patched package does not own.
* ``gg-*`` (bucket GG-UNIFORM): compile-time/constant tokens-per-group, divisibility
  asserts on tokens, fixed-size split/chunk/view of the token dimension, uniform
  ``group_lens`` synthesised from ``M // G``, asserts that every group is non-empty.

W1 and ID-KEY warn (W1 is allowed, its gain bounded by quant_time(weight)/step_time);
everything else rejects.
"""

from __future__ import annotations

import re
from collections.abc import Mapping
from dataclasses import dataclass, field

from runner.judge.audit_source import CACHE_BUCKETS, REJECT, Finding, audit_source

DECLARABLE = ("K1", "K2", "K3", "K4", "W1")


@dataclass
class AuditReport:
    """Findings of one patch; ``unaudited``: changed files no rule reads (not .py);
    ``risks``: the high-risk kinds of the change (control flow, data layout:
    ``runner.judge.confirmation.change_risk``), which ask a quick round's acceptance to
    be confirmed at the full level."""

    findings: list[Finding] = field(default_factory=list)
    unaudited: list[str] = field(default_factory=list)
    risks: list[str] = field(default_factory=list)

    @property
    def buckets(self) -> set[str]:
        return {f.bucket for f in self.findings}

    @property
    def rejects(self) -> bool:
        return any(f.severity == REJECT for f in self.findings)

    @property
    def adds_cache(self) -> bool:
        """True when the round needs the 8-step simulation (``runner.worker.cachesim``)."""
        return bool(self.buckets & CACHE_BUCKETS)

    def id_audit(self) -> str:
        """One line for ``TransferCheck.id_audit``."""
        if not self.findings:
            return "no cache added; no id()-keyed state found"
        return "; ".join(f"{f.bucket} {f.path}:{f.line} ({f.severity})" for f in self.findings)

    def to_dict(self) -> dict[str, object]:
        return {
            "findings": [f.to_dict() for f in self.findings],
            "buckets": sorted(self.buckets),
            "rejects": self.rejects,
            "unaudited": list(self.unaudited),
            "risks": list(self.risks),
        }


# ----------------------------------------------------------------------------- diff

HUNK_RE = re.compile(r"^@@ -\d+(?:,(\d+))? \+(\d+)(?:,(\d+))? @@")


def diff_path(header: str) -> str | None:
    """The path a ``--- ``/``+++ `` header names (None for ``/dev/null``)."""
    path = header.split("\t", 1)[0].strip().strip('"')
    if path == "/dev/null":
        return None
    return path[2:] if path.startswith(("a/", "b/")) else path


def changed_lines(patch_text: str) -> dict[str, set[int]]:
    """New-file line numbers each file gains, plus the two lines around each removal (so
    deleting ``w._version,`` from a multi-line key still touches the key)."""
    files: dict[str, set[int]] = {}
    path: str | None = None
    old_left = new_left = line_no = 0
    for raw in patch_text.splitlines():
        if old_left > 0 or new_left > 0:
            tag = raw[:1]
            if tag == "+":
                new_left -= 1
                files.setdefault(path or "", set()).add(line_no)
                line_no += 1
            elif tag == "-":
                old_left -= 1
                files.setdefault(path or "", set()).update({max(line_no - 1, 1), max(line_no, 1)})
            elif tag != "\\":
                old_left, new_left, line_no = old_left - 1, new_left - 1, line_no + 1
        elif raw.startswith("+++ "):
            path = diff_path(raw[4:])
            if path is not None:
                files.setdefault(path, set())
        elif (m := HUNK_RE.match(raw)) is not None:
            old_left = int(m.group(1) or 1)
            line_no, new_left = int(m.group(2)), int(m.group(3) or 1)
    files.pop("", None)  # hunks of deleted files
    return files


# ----------------------------------------------------------------------------- module audit


# ----------------------------------------------------------------------------- API


def _lookup(sources: Mapping[str, str] | None, path: str) -> str | None:
    if sources is None or path in (sources or {}):
        return None if sources is None else sources[path]
    hits = [k for k in sources if k.endswith("/" + path) or path.endswith("/" + k)]
    return sources[hits[0]] if len(hits) == 1 else None


def _old_signatures(path: str, old: str | None) -> set[str]:
    try:
        return {f.signature for f in audit_source(path, old)} if old is not None else set()
    except SyntaxError:
        return set()


def _audit_file(
    path: str, touched: set[int], new: str | None, old: str | None, have_old: bool
) -> list[Finding]:
    if new is None:
        return [Finding("AUDIT", path, 0, "new source not provided: cannot audit", REJECT, "audit")]
    try:
        found = audit_source(path, new)
    except SyntaxError as exc:
        return [
            Finding("AUDIT", path, exc.lineno or 0, f"does not parse: {exc.msg}", REJECT, "audit")
        ]
    old_sigs = _old_signatures(path, old)
    return [
        f for f in found if touched & set(f.lines) or (have_old and f.signature not in old_sigs)
    ]


def audit_patch(
    patch_text: str,
    new_sources: Mapping[str, str],
    old_sources: Mapping[str, str] | None = None,
) -> AuditReport:
    """Audit a candidate patch.  ``new_sources``/``old_sources`` map each changed .py path
    (as the diff names it, without ``a/``/``b/``) to its full text after/before the patch.
    A changed .py file missing from ``new_sources`` or not parsing is an AUDIT reject."""
    report = AuditReport()
    for path, touched in sorted(changed_lines(patch_text).items()):
        if not path.endswith(".py"):
            report.unaudited.append(path)
            continue
        new, old = _lookup(new_sources, path), _lookup(old_sources, path)
        report.findings += _audit_file(path, touched, new, old, old_sources is not None)
    return report


def check_declared_bucket(report: AuditReport, declared: str) -> list[str]:
    """Problems when the round's ``--bucket`` disagrees with the audit (empty: agrees)."""
    bucket = declared.strip().upper()
    if bucket not in DECLARABLE:
        return [
            f"declared bucket {declared!r} is not one of {', '.join(DECLARABLE)} "
            "(W2 and W3 are forbidden and cannot be declared)"
        ]
    problems = []
    caches = sorted(report.buckets & CACHE_BUCKETS)
    if forbidden := [b for b in caches if b != "W1"]:
        problems.append(f"declared {bucket} but the audit found forbidden {forbidden} caches")
    if bucket == "W1" and "W1" not in caches:
        problems.append(
            "declared W1 but the audit found no weight cache keyed on id(weight)+_version+shape"
        )
    if bucket != "W1" and "W1" in caches:
        problems.append(
            f"declared {bucket} but the patch adds a W1 weight cache: "
            "declare --bucket W1 (its gain is capped)"
        )
    return problems
