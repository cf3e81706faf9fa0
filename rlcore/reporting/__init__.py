"""What a run reports: the logging setup (`logs.py`), `metrics.jsonl` (`metrics.py`) and the one
W&B run (`wandb_run.py`).

Imports: rlcore.errors, rlcore.secrets, rlcore.files, rlcore.host, rlcore.processes, rlcore.config,
rlcore.runs."""
