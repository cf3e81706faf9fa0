"""Every rank packs the same batch the same way: ranks are separate processes, so packing must
be a function of the batch alone, never of something a process draws for itself (the string
hash seed, set order, object ids). Two processes with different PYTHONHASHSEED split the
same batches for every rank of 1, 2 and 3 and must print one digest; each also checks the
property in-process (all ranks together hold every loss token exactly once). No vLLM, no model:
a few seconds."""

import os
import subprocess
import sys

import pytest

from tests.integration.helpers import REPO

pytestmark = pytest.mark.integration

PACK = """
import hashlib
from rlcore.contracts.protocol import BatchTensors
from trainer.data import split_for_ranks
from tests.unit.trainer.test_trainer_data import grouped_batch, random_batch

digest = hashlib.sha256()
cases = [(grouped_batch(seed), True) for seed in range(8)]
cases += [(random_batch(seed, num_samples=11), False) for seed in range(8)]
for batch, share in cases:
    tensors = BatchTensors.from_batch(batch)
    for world_size in (1, 2, 3):
        masked = 0
        for rank in range(world_size):
            for micro in split_for_ranks(tensors, 40, rank, world_size, share):
                masked += int(micro.loss_mask.sum())
                for name, value in sorted(vars(micro).items()):
                    if value is not None:
                        digest.update(name.encode() + value.numpy().tobytes())
            digest.update(b"/rank")
        assert masked == tensors.total_loss_tokens, (masked, tensors.total_loss_tokens)
print(digest.hexdigest())
"""


def test_two_processes_with_other_hash_seeds_pack_alike():
    procs = []
    for seed in ("1", "2"):
        env = {
            **os.environ,
            "PYTHONHASHSEED": seed,
            "PYTHONPATH": os.pathsep.join([str(REPO), str(REPO / "environments")]),
        }
        command = [sys.executable, "-c", PACK]
        procs.append(
            subprocess.Popen(
                command,
                cwd=REPO,
                env=env,
                stdout=subprocess.PIPE,
                stderr=subprocess.PIPE,
                text=True,
            )
        )
    answers = [proc.communicate(timeout=300) for proc in procs]
    for proc, (_, err) in zip(procs, answers, strict=True):
        assert proc.returncode == 0, err[-3000:]
    digests = [out.strip() for out, _ in answers]
    assert len(digests[0]) == 64 and digests[0] == digests[1], digests
