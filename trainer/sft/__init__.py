"""Supervised fine-tuning (`sft @ sft.toml`, `rl sft`): config, data, loop and entrypoint."""
