"""A weight transport is its own files plus the registries: no other module of the product
names a transport (`weight_transfer.type`) to branch on it; it calls the transport's methods
(rlcore.config.TransportConfig, rlcore.weight_transfer) instead."""

import ast
from pathlib import Path
from typing import get_args

from rlcore.config import WeightTransferConfig

REPO = Path(__file__).resolve().parents[3]
PACKAGES = ("rlcore", "launcher", "trainer", "orchestrator", "inference")
REGISTRIES = {"rlcore/config.py", "trainer/weights.py", "orchestrator/weights.py",
              "inference/weights.py"}  # fmt: skip


def transport_tags() -> set[str]:
    union = get_args(WeightTransferConfig)[0]
    return {get_args(member)[1].tag for member in get_args(union)}


def test_only_the_registries_name_a_transport():
    tags = transport_tags()
    assert tags == {"filesystem", "collective"}
    naming = {}
    for package in PACKAGES:
        for path in sorted((REPO / package).rglob("*.py")):
            where = str(path.relative_to(REPO))
            tree = ast.parse(path.read_text())
            found = [
                node.value
                for node in ast.walk(tree)
                if isinstance(node, ast.Constant) and node.value in tags
            ]
            if found and where not in REGISTRIES:
                naming[where] = found
    assert naming == {}
