"""`evals @ eval.toml` (and `rl eval`): evaluate a model on environments, alone."""
