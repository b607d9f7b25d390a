"""The command flows: baseline, validate (single rounds and tournaments), accept, set,
report, profile, demo, new campaigns, workspace mode; each step of one command beside
its flow.  What a round is and the steps they share: ``runner.round``; the
measure-judge loop: ``runner.compare``."""
