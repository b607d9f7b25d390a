"""Ahead-of-time compilation of a tree's Triton kernels for a target GPU, on any machine
(worker side: torch and triton, imported only by the compile's own subprocess).

``launches`` records a real wrapper's launch and specialises it as Triton's JIT does;
``example_cases`` are the example package's launches; ``compile_main`` is the process
the host starts (``python -m runner.worker.analyze.compile_main``, one per role and kernel
file, ``runner.round.kernel_facts``).  docs/analysis.md.
"""
