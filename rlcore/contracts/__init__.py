"""What the processes exchange, defined once: training batches and HTTP routes (`protocol.py`),
the rollout archive (`samples_store.py`) and the collective transport's files (`collective.py`).

Imports: rlcore.errors, rlcore.secrets, rlcore.files, rlcore.host, rlcore.processes, rlcore.config,
rlcore.runs."""
