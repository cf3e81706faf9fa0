"""Files, read and written safely: paths a user gives made absolute (`paths.py`), atomic durable
writes (`atomic.py`), a full disk said as one message (`disk_full.py`), what a folder holds on
disk (`disk_use.py`), the one bounded reader of what a run folder holds (`readback.py`) and the
one door for files a user names (`user_files.py`).

Imports: rlcore.errors, rl_files."""
