"""Fault injection for the fault, stall and timeout tests: the one place the product reads
`RL_FAULT_*` variables. Each hook does nothing unless its variable is set in the process's
environment; the product calls the hooks by name, so this module lists every way a test can
make a process misbehave on purpose."""

import asyncio
import logging
import os
import time

CKPT_SAVE_DELAY_ENV = "RL_FAULT_CKPT_SAVE_DELAY_S"
"""Seconds the trainer pauses inside every checkpoint save, after the data and before the DONE
marker, so that a kill lands mid-save deterministically."""

TRAINER_HANG_ENV = "RL_FAULT_HANG_AT_STEP"
"""The trainer step at which the trainer stops forever, before reading its batch."""

INFERENCE_HANG_ENV = "RL_FAULT_INFERENCE_HANG_AT_UPDATE"
"""The n-th weight update (counted from 1) at which inference blocks its event loop: /health
stops answering."""

RELOAD_DELAY_ENV = "RL_FAULT_RELOAD_DELAY_S"
"""Seconds inference sleeps before each weight reload reaches its workers."""


def delay_before_save() -> None:
    """Trainer, inside a checkpoint save before its DONE marker (RL_FAULT_CKPT_SAVE_DELAY_S)."""
    time.sleep(_seconds(CKPT_SAVE_DELAY_ENV))


def hang_at_step(step: int, logger: logging.Logger) -> None:
    """Trainer, at the start of `step`: never returns when RL_FAULT_HANG_AT_STEP is `step`."""
    if os.environ.get(TRAINER_HANG_ENV) == str(step):
        logger.info(f"{TRAINER_HANG_ENV}={step}: hanging on purpose")
        while True:  # the stall report names this function
            time.sleep(3600)


def hang_at_update(update: int, logger: logging.Logger) -> None:
    """Inference, on its `update`-th weight update: blocks the calling thread (the server's event
    loop) forever when RL_FAULT_INFERENCE_HANG_AT_UPDATE is `update`."""
    if os.environ.get(INFERENCE_HANG_ENV) == str(update):
        logger.info(f"{INFERENCE_HANG_ENV}={update}: blocking the server on purpose")
        while True:
            time.sleep(3600)


async def delay_before_reload() -> None:
    """Inference, before each weight reload (RL_FAULT_RELOAD_DELAY_S)."""
    delay_s = _seconds(RELOAD_DELAY_ENV)
    if delay_s:
        await asyncio.sleep(delay_s)


def _seconds(name: str) -> float:
    value = os.environ.get(name) or "0"
    try:
        return float(value)
    except ValueError:
        raise ValueError(f"{name}={value!r}: expected a number of seconds") from None
