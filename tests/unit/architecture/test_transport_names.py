"""A weight transport is its own files plus the registries: no other module of the product
names a transport (`weight_transfer.type`) to branch on it; it calls the transport's methods
(rlcore.config.base.TransportConfig, rlcore.config.weight_transfer) instead."""

import ast
from pathlib import Path
from typing import get_args

from rlcore.config.base import WeightTransferConfig

REPO = Path(__file__).resolve().parents[3]
PACKAGES = ("rlcore", "launcher", "trainer", "orchestrator", "inference")
REGISTRIES = {
    "rlcore/config/base.py",
    "trainer/weights.py",
    "orchestrator/weights.py",
    "inference/weights.py",
}


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


def test_no_module_probes_a_transport_for_fields_of_one_kind():
    """`getattr(transfer, "dir", None)` is a hidden branch on the transport: ask a method."""
    probing = {}
    for package in PACKAGES:
        for path in sorted((REPO / package).rglob("*.py")):
            where = str(path.relative_to(REPO))
            for node in ast.walk(ast.parse(path.read_text())):
                is_probe = (
                    isinstance(node, ast.Call)
                    and isinstance(node.func, ast.Name)
                    and node.func.id in ("getattr", "hasattr")
                    and "transfer" in ast.unparse(node.args[0])
                )
                if is_probe and where not in REGISTRIES:
                    probing.setdefault(where, []).append(ast.unparse(node))
    assert probing == {}


def test_the_trainer_asks_the_transport_where_and_how_it_writes_policies(tmp_path):
    from rlcore.config.base import CollectiveTransferConfig, FilesystemTransferConfig

    assert FilesystemTransferConfig(dir=tmp_path).weights_root() == tmp_path
    assert FilesystemTransferConfig().weights_root() is None
    assert FilesystemTransferConfig(background=False).copies_in_background() is False
    assert FilesystemTransferConfig().copies_in_background() is True
    collective = CollectiveTransferConfig()
    assert collective.weights_root() is None and collective.copies_in_background() is False
