"""Round flow: baseline, validate, accept, passes, sharding, builds."""
