"""What a round is (``context.RoundPlan``, ``open_round``) and the steps every command flow
that measures shares: builds, the tamper check, judge files, kernel facts, candidates,
the round's result and logs (docs/architecture.md §4)."""
