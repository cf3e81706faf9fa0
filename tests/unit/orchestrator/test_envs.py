"""The bundled environments load through verifiers by id, build seeded datasets in code and
score answers; unknown ids fail before anything starts."""

import asyncio

import pytest

from orchestrator.envs.classic import VerifiersEnv
from orchestrator.evals.main import main as evals_main
from orchestrator.main import main
from rlcore.errors import ConfigError
from rlcore.host.environments import check_classic as check_installed
from rlcore.host.environments import module_name
from rlcore.runs.ownership import RUN_MARKER

BUNDLED = ["rl-add-digits", "rl-repeat-word", "rl-guess-number"]


def test_ids_map_to_modules_like_verifiers():
    assert module_name("rl-add-digits") == "rl_add_digits"
    assert module_name("harleycooper/dakota1890") == "dakota1890"
    check_installed(BUNDLED + ["someone/rl-add-digits"])


def test_missing_env_names_id_and_install_command():
    with pytest.raises(ConfigError) as err:
        check_installed(["rl-add-digits", "harleycooper/dakota1890"])
    message = str(err.value)
    assert "'harleycooper/dakota1890'" in message and "uv pip install dakota1890" in message
    assert "rl-add-digits'" not in message


def test_unknown_env_exits_2_before_writing_anything(tmp_path, capsys):
    config = tmp_path / "orch.toml"
    config.write_text('[[env]]\nid = "no-such-env"\n')
    with pytest.raises(SystemExit) as exit_:
        main(["@", str(config), "--output-dir", str(tmp_path / "run")])
    assert exit_.value.code == 2
    err = capsys.readouterr().err
    assert "'no-such-env' (module `no_such_env`)" in err and "not installed" in err
    assert not (tmp_path / "run").exists()


@pytest.mark.parametrize("entry", ["evals", "watch"])
def test_evals_refuses_an_unknown_env_before_starting_a_server(tmp_path, capsys, entry):
    """It exited 2 only when loading the environment, after its vLLM server had started
    (minutes); a unit test may start no process (tests/unit/conftest.py), so reaching the
    server (or `rl export` for --watch) fails this test."""
    run = tmp_path / "run"
    run.mkdir()
    (run / RUN_MARKER).write_text('{"id": "r1", "kind": "rl"}')
    config = tmp_path / "eval.toml"
    config.write_text(
        '[model]\nname = "some/model"\n[[eval.env]]\nid = "rl-add-digits"\n'
        '[[eval.env]]\nid = "no-such-env"\n'
    )
    flags = ["--watch", str(run)] if entry == "watch" else []
    with pytest.raises(SystemExit) as exit_:
        evals_main(["@", str(config), "--output-dir", str(tmp_path / "out"), *flags])
    assert exit_.value.code == 2
    err = capsys.readouterr().err
    assert err.startswith("evals: error: eval.env: environment not installed:")
    assert "'no-such-env' (module `no_such_env`)" in err and "rl-add-digits'" not in err
    assert not (tmp_path / "out").exists()


@pytest.fixture(scope="module")
def envs():
    return {env_id: VerifiersEnv(env_id, {}) for env_id in BUNDLED}


def test_datasets_are_seeded_and_shaped(envs):
    add = envs["rl-add-digits"]
    assert add.num_examples == 80 and len(add.eval_examples(100)) == 20
    first = add.example(0)
    assert first["prompt"][-1]["content"].startswith("What is ")
    assert first["prompt"][-1]["content"].endswith("? Answer with just the number.")
    assert VerifiersEnv("rl-add-digits", {"seed": 1}).example(0) != first
    assert VerifiersEnv("rl-add-digits", {}).example(0) == first


def test_rewards():
    import rl_add_digits
    import rl_guess_number
    import rl_repeat_word

    say = lambda text: [{"role": "assistant", "content": text}]  # noqa: E731
    assert rl_add_digits.correct_sum(say(" 7."), "7") == 1.0
    assert rl_add_digits.correct_sum(say("3 + 4 = 7."), "7") == 1.0
    assert rl_add_digits.correct_sum(say("8"), "7") == 0.0
    assert rl_add_digits.correct_sum(say("seven"), "7") == 0.0
    assert rl_repeat_word.exact_word(say("Apple"), "apple") == 1.0
    assert rl_repeat_word.exact_word(say('The word is "apple".'), "apple") == 0.5
    assert rl_repeat_word.exact_word(say("pear"), "apple") == 0.0
    game = say("2") + [{"role": "user", "content": "Higher."}] + say("I guess 3.")
    assert rl_guess_number.guessed(game, "3") == 0.5
    assert rl_guess_number.guessed(say("3"), "3") == 1.0
    assert rl_guess_number.guessed(say("4"), "3") == 0.0


def test_guess_env_answers_each_guess(envs):
    env = envs["rl-guess-number"].env
    state = {"answer": "3"}
    reply = lambda text: asyncio.run(  # noqa: E731
        env.env_response([{"role": "assistant", "content": text}], state)
    )
    assert reply("1")[0].content == "Higher."
    assert reply("5")[0].content == "Lower."
    assert "not a number" in reply("maybe")[0].content
    assert reply("3")[0].content == "Correct!" and state["final_env_response"]


def test_env_type_selects_the_adapter():
    from orchestrator.config import EnvConfig, OrchestratorConfig
    from orchestrator.envs import ENV_TYPES, load_env
    from rlcore.host.environments import INSTALL_CHECKS, check_envs

    assert set(INSTALL_CHECKS) == set(ENV_TYPES)  # every type can be checked before it loads

    assert EnvConfig(id="rl-add-digits").type == "verifiers"
    env = load_env(EnvConfig(id="rl-add-digits", args={"num_eval_examples": 4}))
    assert isinstance(env, ENV_TYPES["verifiers"]) and env.num_examples > 0
    with pytest.raises(ConfigError, match="not installed"):
        check_envs([EnvConfig(id="no-such-env")], "env")
    with pytest.raises(ValueError, match="type"):
        OrchestratorConfig.model_validate({"env": [{"id": "rl-add-digits", "type": "gym"}]})
