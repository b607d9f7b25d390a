"""The bounds on what a user hands the runner (docs/reliability.md §6, bad input): pair
counts, patches, hypotheses, corrections, CSVs, manifests and MCP messages.  One place,
so that every layer that reads input refuses the same sizes, and an error message quotes
at most ``excerpt(...)`` of what it was given.  Standard library only (both sides)."""

from __future__ import annotations

from runner.core.errors import ValueRefused

# Paired blocks one comparison may be asked to start with (``validate --pairs``, the
# manifest's ``pairs``, ``accept --passes``): each block is two incumbent/candidate
# pairs, so 48 blocks are ``runner.judge.measuring_caps.MAX_PAIRS`` (96), the most one
# comparison measures; the gate asks for more near its threshold by itself.
MAX_BLOCKS = 48
PAIRS_PER_BLOCK = 2  # incumbent/candidate pairs of one paired block (B C C B, A B B A)
# Hypotheses of one tournament (``validate`` with several --patch), at most.
MAX_TOURNAMENT_ENTRIES = 8
# A candidate patch (``--patch`` or the source tree's diff), and one line of it: one
# hypothesis's kernel change is a few hundred KB at most; the round keeps it and the
# HTML report inlines it (64 MiB let a 50 MB patch through into a 52 MB index.html).
MAX_PATCH_BYTES = 4 << 20
MAX_PATCH_LINE = 1 << 20
# A hypothesis: one statement of what the change does and why it should be faster.
MAX_HYPOTHESIS_CHARS = 4000
# A correction, a --reason or any other free text appended to the logs.
MAX_NOTE_CHARS = 16_000
# A CSV the runner is given (a pinned benchmark CSV, an upstream one): its bytes, one
# line (a header or one shape's row) and its data rows (thousands of shapes at most).
MAX_CSV_BYTES = 16 << 20
MAX_CSV_LINE = 64 << 10
MAX_CSV_ROWS = 20_000
# A manifest.yaml, in bytes, and the YAML nodes it may build (aliases counted each time
# they are used, so an alias bomb stops here instead of filling memory).
MAX_MANIFEST_BYTES = 256 * 1024
MAX_YAML_NODES = 100_000
# One line of the MCP transport (a JSON-RPC message).
MAX_MCP_MESSAGE_BYTES = 4 * 1024 * 1024
# sigma_G, the baseline's relative noise of one sample, as a fraction: a busy 2-core CPU
# measured 9.3%; 100% or more (``campaign set sigma_g 500%``), or not finite, is no noise
# figure a gate can use.
MAX_SIGMA_G = 1.0
# The shortest time a benchmark CSV may give a kernel call: below a nanosecond is no
# measurement (a candidate row of 1e-300 ms was ACCEPTED at +14%).
MIN_TIME_MS = 1e-6
# A campaign's timing (manifest ``timing``, ``campaign set timing``): the warm-up runs
# before any time cap applies (a warm-up of 1e12 s held four workers at 100% CPU), so
# each figure has a bound a round can finish within, and none may be inf or nan.
MAX_WARMUP_S = 60.0
MAX_BATCH_S = 120.0
MAX_BUDGET_S = 3600.0
MAX_TIMED_REPEATS = 10_000  # repeats and max_repeats
MAX_ITERS_PER_REPEAT = 1_000_000_000
MAX_TARGET_RSD = 1.0
# A bundle (``campaign reproduce``/``import``): one file of it, all of them unpacked, and
# its entries.  A campaign's records, patches and logs are megabytes; a bundle over these
# is refused from its tar headers, before anything is written.
MAX_BUNDLE_MEMBER_BYTES = 256 << 20
MAX_BUNDLE_TOTAL_BYTES = 1 << 30
MAX_BUNDLE_MEMBERS = 200_000
# Calibration passes of a baseline (``campaign baseline --passes``): each is a full run
# of every shape in a fresh process; 5 is the default, 20 already an hour on a CPU.
MAX_BASELINE_PASSES = 20
# Seconds one role's profiled run may take (``campaign profile --timeout``).
MAX_PROFILE_TIMEOUT_S = 4 * 3600.0
# What an error message quotes of a value it refuses.
EXCERPT_CHARS = 200


def excerpt(value: object, limit: int = EXCERPT_CHARS) -> str:
    """``repr(value)`` cut to ``limit`` characters, saying how much was left out."""
    text = repr(value)
    if len(text) <= limit:
        return text
    return f"{text[:limit]}... ({len(text) - limit} more characters)"


def clip(text: str, limit: int = EXCERPT_CHARS) -> str:
    """``text`` cut to ``limit`` characters, saying how much was left out (for text the
    runner wrote, such as a parser's message; a user's value goes through ``excerpt``)."""
    if len(text) <= limit:
        return text
    return f"{text[:limit]}... ({len(text) - limit} more characters)"


def blocks_problem(value: object) -> str | None:
    """What is wrong with a pair count a user asked for (None: a whole number from 1 to
    ``MAX_BLOCKS``)."""
    if isinstance(value, int) and not isinstance(value, bool) and 1 <= value <= MAX_BLOCKS:
        return None
    return (
        f"give a whole number of paired blocks from 1 to {MAX_BLOCKS} (each block is two "
        f"incumbent/candidate pairs; {MAX_BLOCKS} are the {block_pairs(MAX_BLOCKS)} pairs one "
        "comparison measures at most); the gate asks for more near its threshold by "
        "itself, so the manifest's pairs are usually right"
    )


def block_pairs(blocks: int) -> int:
    """The incumbent/candidate pairs that ``blocks`` paired blocks measure: the one
    conversion from what a user asks for (``--pairs``, the manifest's ``pairs``,
    ``accept --passes``) to what the measuring engine counts (``samples`` of each role
    in ``runner.compare.loop``)."""
    return PAIRS_PER_BLOCK * blocks


def check_blocks(value: object, what: str) -> int:
    """A pair count a user asked for, refused (ConfigError, exit 2) unless it is a whole
    number from 1 to ``MAX_BLOCKS``."""
    problem = blocks_problem(value)
    if problem is not None:
        raise ValueRefused(f"{what} = {excerpt(value)}: {problem}; nothing was measured")
    assert isinstance(value, int)
    return value


def undecodable(text: str) -> bool:
    """True when ``text`` holds bytes that were not UTF-8 (Python keeps them as lone
    surrogates, ``surrogateescape``): no record, log or terminal can take it as is."""
    try:
        text.encode("utf-8")
    except UnicodeEncodeError:
        return True
    return False


def check_utf8(text: str, what: str) -> str:
    """``text`` if it is valid UTF-8 text, else ValueRefused (exit 2) saying what to do."""
    if undecodable(text):
        shown = text.encode("utf-8", "surrogateescape").decode("utf-8", "replace")
        raise ValueRefused(
            f"{what} {excerpt(shown)} holds bytes that are not UTF-8 (a terminal or file in "
            "another encoding, such as latin-1): give it as UTF-8 (set a UTF-8 locale, e.g. "
            "LANG=C.UTF-8, or convert it with iconv -f latin1 -t utf-8); nothing was done"
        )
    return text


def check_size(text: str, limit: int, what: str, fix: str) -> str:
    """``text`` if it has at most ``limit`` characters, else ConfigError saying what to do."""
    if len(text) > limit:
        raise ValueRefused(
            f"{what} has {len(text):,} characters, over the limit of {limit:,}: {fix}"
        )
    return text


__all__ = [
    "EXCERPT_CHARS",
    "MAX_BASELINE_PASSES",
    "MAX_BATCH_S",
    "MAX_BLOCKS",
    "MAX_BUDGET_S",
    "MAX_BUNDLE_MEMBERS",
    "MAX_BUNDLE_MEMBER_BYTES",
    "MAX_BUNDLE_TOTAL_BYTES",
    "MAX_CSV_BYTES",
    "MAX_CSV_LINE",
    "MAX_CSV_ROWS",
    "MAX_HYPOTHESIS_CHARS",
    "MAX_ITERS_PER_REPEAT",
    "MAX_MANIFEST_BYTES",
    "MAX_MCP_MESSAGE_BYTES",
    "MAX_NOTE_CHARS",
    "MAX_PATCH_BYTES",
    "MAX_PATCH_LINE",
    "MAX_PROFILE_TIMEOUT_S",
    "MAX_SIGMA_G",
    "MAX_TARGET_RSD",
    "MAX_TIMED_REPEATS",
    "MAX_TOURNAMENT_ENTRIES",
    "MAX_WARMUP_S",
    "MAX_YAML_NODES",
    "MIN_TIME_MS",
    "block_pairs",
    "blocks_problem",
    "check_blocks",
    "check_size",
    "check_utf8",
    "clip",
    "excerpt",
    "undecodable",
]
