"""The names of the files a worker leaves in its artifacts folder, and of the files a
round keeps beside them in ``rounds/round-N/artifacts/`` (docs/architecture.md §1).

The worker side writes them and the host side reads them, so both spell them from here.
"""

from __future__ import annotations

# a worker's artifacts folder
BENCHMARK_CSV = "benchmark.csv"  # the pinned CSV (runner.core.csv_schema)
SAMPLES = "samples.json"  # the spec and every shape's raw timing samples
META = "meta.json"  # the device and software the pass ran on
PROVENANCE = "provenance.json"  # where the op's modules were imported from
LOADED = "loaded.json"  # every module and extension the worker loaded, with its hash
WORKER_LOG = "worker.log"
FOCUSED_TEST = "test.json"  # the focused test's outcome (runner.worker.bench.focused_test)
OUT_OF_MEMORY = "out_of_memory.json"  # left when the device ran out of memory
# what a paired session's workers reported (the host writes it, one file per shard:
# suffix "" or "-gpuN"); the next round on the same machine sizes its waves by it
MEMORY_LOG = "memory{suffix}.json"
MEMORY = MEMORY_LOG.format(suffix="")

# a paired session whose worker died by a crash signal with graph replay on: its
# workers' folders go under GRAPH_CRASH, and the round's record gets the LAUNCH_NOTES
GRAPH_CRASH = "graph-crash"
LAUNCH_NOTES = "launch_notes.txt"

# a round's artifacts folder besides the candidate's BENCHMARK_CSV
INCUMBENT_CSV = "incumbent.csv"
AUDIT = "audit.json"  # the static audit of the round's change
BUILDS = "builds.json"  # the native builds of the round's roles

# a round's folder (``rounds/round-N/``, and each failed attempt's): the change as judged
CANDIDATE_PATCH = "candidate.patch"

# a campaign's root: the reference GEMM's rate measured on the campaign's card
# (runner.core.empirical_peak), which tightens the speed-of-light veto
EMPIRICAL_PEAK = "empirical_peak.json"
