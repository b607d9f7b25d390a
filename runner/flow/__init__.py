"""Host-side flows: baseline, validate, accept, passes, sharding."""
