"""turbo-campaign: kernel-optimisation campaigns with pinned CSVs, a statistical gate
and append-only records.

The host side (CLI, campaign, gate, records, lineage, executors) needs no torch; the
worker side (the ``runner.worker`` package, and ``runner.targets``) imports torch and
runs inside the isolated environment.  Nothing imported here may pull
in pydantic or torch: the worker must start on machines that have neither extra.
"""

__version__ = "0.1.0"
