"""Campaign flows: baseline, validate, accept, passes, sharding."""
