"""Parsing what Slurm's commands print (pure): ``sbatch --parsable`` and
``scontrol show job -o``."""

from __future__ import annotations

import re

# Final job states that mean the task did not finish its work (``man squeue``).
BAD_STATES = frozenset(
    {
        "BOOT_FAIL",
        "CANCELLED",
        "DEADLINE",
        "FAILED",
        "NODE_FAIL",
        "OUT_OF_MEMORY",
        "PREEMPTED",
        "REVOKED",
        "TIMEOUT",
    }
)
FINAL_STATES = BAD_STATES | {"COMPLETED"}
_JOB_ID = re.compile(r"^(\d+)(?:;\S+)?$")


def parse_job_id(output: str) -> str | None:
    """The job id of ``sbatch --parsable`` output (``ID`` or ``ID;cluster``); other
    lines (warnings, merged stderr) are skipped."""
    for line in output.splitlines():
        match = _JOB_ID.match(line.strip())
        if match:
            return match.group(1)
    return None


def parse_scontrol(text: str) -> list[dict[str, str]]:
    """``scontrol show job -o`` output: one dict of ``Key=Value`` per job line.

    Values never contain spaces in the fields we read (JobState, ArrayTaskId,
    ExitCode, NodeList); a value with spaces is cut at the first one.
    """
    jobs = []
    for line in text.splitlines():
        if "JobId=" not in line:
            continue
        fields: dict[str, str] = {}
        for token in line.split():
            key, sep, value = token.partition("=")
            if sep and key not in fields:
                fields[key] = value
        jobs.append(fields)
    return jobs


def state_by_task(jobs: list[dict[str, str]]) -> dict[str | None, str]:
    """JobState per ArrayTaskId (``None`` for a job that is not an array)."""
    states: dict[str | None, str] = {}
    for job in jobs:
        task = job.get("ArrayTaskId")
        states[task] = job.get("JobState", "UNKNOWN")
    return states


def all_final(states: dict[str | None, str]) -> bool:
    """Whether every task listed is in a final state (``COMPLETING`` is not; a
    still-pending array range shows as one ``PENDING`` entry)."""
    return bool(states) and all(s.split()[0] in FINAL_STATES for s in states.values())
