"""The names the host and a yielding test suite share (docs/protocol.md §1.4): the
plugin's module, the variable naming their shared folder, and the marker files in it.

``campaign accept`` runs the target's suite beside full validation; the host
(``runner.flow.suite_beside``) asks it to pause, and the plugin loaded into its pytest
(``runner.worker.bench.suite_yield``) answers.  Both spell the folder's files from
here, so neither side imports the other's module.  Standard library only.
"""

from __future__ import annotations

YIELD_ENV = "TURBO_CAMPAIGN_YIELD_DIR"  # the shared folder
PLUGIN = "runner.worker.bench.suite_yield"  # what PYTEST_PLUGINS names
PAUSE = "pause"  # the host's request: give the device up at the next test boundary
RUNNING = "running-"  # running-<pid>: a suite process between its tests' starts and its end
PAUSED = "paused-"  # paused-<pid>: that process waits, its device work finished
SPANS = "tests-"  # tests-<pid>.jsonl: each test's span, compared with the timed turns
POLL_S = 0.02  # how often either side looks at the folder
