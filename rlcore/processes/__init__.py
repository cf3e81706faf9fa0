"""Processes: which process a recorded pid is (`procs.py`), starting and stopping children
(`children.py`), deadline loops and the stop request (`poll.py`), the readiness probe and its
route (`health.py`), the inference ports and their reservation (`ports.py`), memory handed back
(`heap.py`).

Imports: rlcore.errors, rlcore.secrets, rlcore.files, rlcore.host."""
