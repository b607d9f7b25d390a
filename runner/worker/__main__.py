"""``python -m runner.worker [--serve] SPEC.json OUT_DIR``: the executors, the docker
argv and the Slurm scripts start the worker by this name; the work is in
``runner.worker.dispatch``."""

from runner.worker.dispatch import run_and_leave

if __name__ == "__main__":
    run_and_leave()
