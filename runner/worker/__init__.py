"""The worker side: everything that runs inside the isolated environment, in one
package (docs/architecture.md §2, §4).

* ``python -m runner.worker [--serve] SPEC.json OUT_DIR`` (``__main__.py``, a thin call
  into ``dispatch.py``): one pass, the focused test, or a serving worker of a paired
  round;
* ``python -m runner.worker.fullbench``: the example target's full benchmark;
* ``bench/``: the pass, the timing engine, the serving protocol and the guards;
* ``cachesim.py``: the 8-step training simulation;
* ``analyze/``: ahead-of-time compiles and the torch profiler wrapper;
* ``ops/``: the op adapters.

Imports nothing when loaded (a GPU machine may have only torch): the host starts the
worker only as a process, never by importing it.
"""


def __getattr__(name: str) -> object:
    """``run_spec`` and ``resolve_device``, the quick bench script's address for them
    (``quick_test_bench.py``, generated at the baseline and pinned in the campaign
    folder): one address that stays when the modules inside the worker move.  Loaded
    on first use, so the focused test never imports torch."""
    if name in ("run_spec", "resolve_device"):
        from runner.worker.bench import worker_pass

        return getattr(worker_pass, name)
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
