"""The measuring engine, one layer below the command flows (``runner.flow``): paired
turns of live workers (``paired``), waves sized from device memory (``waves``), passes
of fresh processes and their merging (``passes``), one shard per GPU (``sharding``),
progress and the time left (``progress``), and what a measurement needs from the round
it runs in (``host``: the ``Host`` protocol, ``PlainHost`` without a campaign).

It imports only what lies below it (executors, judge, core); the flows hand it a
``Host``."""
