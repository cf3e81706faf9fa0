"""The foundation every process imports (docs/architecture.md). Its concerns, bottom to top; each
subpackage's docstring names what it may import, and tests/unit/architecture holds it:

- `errors.py`, `faults.py` (the test fault hooks), `secrets.py` (what counts as a secret and how
  it is kept out of files, messages and logs): import nothing above them;
- `files/`: paths, atomic writes, bounded reads;
- `host/`: this machine and what is installed on it;
- `processes/`: pids, children, deadlines, health, ports;
- `config/`: the configs and the command line;
- `runs/`: the run folder, its lock and lifecycle;
- `contracts/`: what the processes exchange (batches, routes, the rollout archive);
- `reporting/`: logs, metrics.jsonl, W&B;
- `forecast/`: what a run will cost.

Nothing here imports a role (trainer, orchestrator, inference), the launcher or a bundled
environment; `rl_files` (environments/) is the one first-party package below it."""

import os

# pydantic looks for plugins by scanning every installed distribution's entry points the first
# time a model class is built: about 0.1 s of each command's start (`rl --help` included) for
# plugins this project never uses. Set the variable to "" to have them loaded.
os.environ.setdefault("PYDANTIC_DISABLE_PLUGINS", "__all__")
