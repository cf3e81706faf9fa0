"""The run folder: its layout and an attempt's lifecycle (`rundir.py`), what a run owns and
how it is deleted (`ownership.py`), the one door into it and its lock
(`runguard.py`), `run.json` read back (`run_json.py`), which attempt wrote a file
(`attempt.py`), what a component waits for (`waits.py`) and the admin token (`admin_token.py`).

Imports: rlcore.errors, rlcore.secrets, rlcore.files, rlcore.host, rlcore.processes,
rlcore.config."""
