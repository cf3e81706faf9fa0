"""Workflow YAMLs: the shipped one loads and becomes an rl-tasks environment with its solved
example before the task; a malformed few_shot is refused naming the message and the shape."""

from pathlib import Path

import pytest
from rl_tasks import check_few_shot

from launcher.workflow import load_workflow
from rlcore.errors import ConfigError

REPO = Path(__file__).resolve().parents[3]
SHIPPED = sorted((REPO / "examples").rglob("*.yaml"))


@pytest.mark.parametrize("path", SHIPPED, ids=lambda p: p.name)
def test_every_shipped_workflow_loads(path):
    workflow = load_workflow(path)
    roles = [m.role for m in workflow.few_shot]
    assert roles == ["user", "assistant"] * (len(roles) // 2)
    assert any("<tool>" in m.content for m in workflow.few_shot if m.role == "assistant")


def test_a_bad_few_shot_message_names_the_key_and_the_shape(tmp_path):
    path = tmp_path / "w.yaml"
    path.write_text("job: {name: w}\nfew_shot:\n- {role: robot, content: hi}\n")
    with pytest.raises(ConfigError, match=r"w.yaml: `few_shot.0.role`: Input should be 'user'"):
        load_workflow(path)
    path.write_text("job: {name: w}\nfew_shot:\n- {role: user, content: ''}\n")
    with pytest.raises(ConfigError, match=r"`few_shot.0.content`"):
        load_workflow(path)


def test_few_shot_given_as_env_args_is_checked():
    good = [
        {"role": "user", "content": "task"},
        {"role": "assistant", "content": "<tool>x()</tool>"},
    ]
    assert check_few_shot(good) == good
    for bad in (
        ["text"],
        [{"role": "system", "content": "x"}],
        [{"role": "user"}],
        [{"role": "user", "content": "x", "name": "y"}],
    ):
        with pytest.raises(ValueError, match=r"few_shot\[0\] is .*role: user\|assistant"):
            check_few_shot(bad)
