"""Configs: the base class and the sub-configs several processes share (`base.py`), walking
schemas (`schema.py`), the `@` command line (`cli.py`), TOML in and out (`toml_io.py`), what
every entry point does first (`entry.py`), literal secrets kept out of written configs
(`literal_secrets.py`) and the weight-transfer seam the configs choose (`weight_transfer.py`).
Light: pydantic and the standard library, never torch, vLLM or verifiers.

Imports: rlcore.errors, rlcore.secrets, rlcore.files, rlcore.host, rlcore.processes."""
