"""Where the record of ``campaign accept`` lives (``acceptance/``) and how it is read
back, for ``campaign status`` and the report; ``runner.flow.acceptance_record`` makes
and writes it."""

from __future__ import annotations

import json
from pathlib import Path
from typing import TypedDict

from runner.core.errors import ConfigError
from runner.core.outcomes import GateResultDict, ScoreDict
from runner.core.step_times import StepTimesDict
from runner.core.versions import require_schema_version
from runner.store.campaign import Campaign

ACCEPTANCE_SCHEMA_VERSION = 1


class FullBenchmarkInfo(TypedDict, total=False):
    """How the target's full benchmark ran (``runner.flow.accept.full_benchmark``)."""

    command: str
    engine: str
    timing: dict[str, object]
    returncode: int
    csv: str | None
    fail: int
    from_full_validation: bool
    log: str
    upstream_csv: str
    csv_error: str
    skipped: int


class FullSuiteInfo(TypedDict, total=False):
    """How the full test suite ran (``runner.flow.accept.full_suite``), and beside what
    (``runner.flow.suite_beside.SuiteBeside.record``)."""

    command: str
    returncode: int
    log: str
    tail: str
    ran: str
    yielded: dict[str, float]
    tests_logged: int
    during_timed_work: list[str]


class CheckDict(TypedDict):
    name: str
    ok: bool
    detail: str


class _AcceptanceKeys(TypedDict):
    outcome: str


class AcceptanceDict(_AcceptanceKeys, total=False):
    """``acceptance/acceptance.json`` (``runner.flow.acceptance_record.Acceptance``)."""

    schema_version: int
    campaign: str
    reasons: list[str]
    started: str
    finished: str
    base_commit: str
    head: str
    passes: int
    shapes: list[str]
    heldout_shapes: list[str]
    checks: list[CheckDict]
    baseline_score: ScoreDict | None
    final_score: ScoreDict | None
    gate: GateResultDict | None
    full_benchmark: FullBenchmarkInfo
    full_suite: FullSuiteInfo
    commits: list[str]
    step_seconds: dict[str, float]
    step_times: StepTimesDict


def acceptance_dir(campaign: Campaign) -> Path:
    return campaign.root / "acceptance"


def load_acceptance(campaign: Campaign) -> AcceptanceDict | None:
    """``acceptance/acceptance.json`` as a dict, or None when acceptance never ran."""
    path = acceptance_dir(campaign) / "acceptance.json"
    try:
        data: AcceptanceDict = json.loads(path.read_text(encoding="utf-8"))
    except FileNotFoundError:
        return None
    except json.JSONDecodeError as exc:
        raise ConfigError(
            f"{path} is not valid JSON ({exc}); run `campaign accept` again"
        ) from None
    require_schema_version(
        data.get("schema_version"),
        ACCEPTANCE_SCHEMA_VERSION,
        str(path),
        older="run `campaign accept` again",
        newer="upgrade turbo-campaign (pip install -U turbo-campaign) to read it, or run "
        "`campaign accept` again",
    )
    return data
