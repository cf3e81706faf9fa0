"""Files a user names, read safely: the one bounded reader of user files (`user_file.py`) and
the one `.env` reader (`env_file.py`). The floor below everything first-party: the project
(rlcore) and the bundled environments (rl_tasks) both read through it, and it imports neither.
It ships in the environments' distribution (`rl-envs`) because the environments cannot import
the project, which depends on them.

Imports: nothing first-party."""
