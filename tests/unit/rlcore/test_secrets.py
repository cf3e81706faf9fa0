"""Secrets in configs never reach a resolved config, a printed config, an error message or the
W&B config; `$VAR` references are resolved only inside the process, and `rl` passes a literal
secret to the processes by environment."""

import pytest

from launcher.launch import write_configs
from launcher.prepare import build_plan
from launcher.rl_config import RLConfig
from orchestrator.config import OrchestratorConfig
from rlcore.errors import ConfigError
from rlcore.rundir import RunDir
from rlcore.secrets import is_secret_key, redact, resolve, scrub
from rlcore.toml_io import dump_config, load_toml
from rlcore.wandb_run import start_wandb

SECRET = "sk-live-0123456789abcdef"


def test_secret_names_are_told_from_ordinary_ones():
    secret = ["api_key", "apiKey", "hf_token", "OPENAI_API_KEY", "password", "client_secret"]
    plain = ["max_tokens", "num_tokens", "tokenizer", "api_key_var", "key_path", "keep", "monkey"]
    assert all(is_secret_key(k) for k in secret)
    assert not any(is_secret_key(k) for k in plain)


def test_literals_are_redacted_and_references_kept():
    data = {"args": {"api_key": SECRET, "auth": [{"token": SECRET}], "hf_token": "$HF_TOKEN"}}
    assert redact(data) == {"args": {"api_key": "***", "auth": [{"token": "***"}],
                                     "hf_token": "$HF_TOKEN"}}  # fmt: skip
    assert scrub(f"bad key {SECRET}!", data) == "bad key ***!"


def test_references_resolve_from_the_environment_only_in_the_process(monkeypatch):
    monkeypatch.setenv("MY_KEY", SECRET)
    args = {"api_key": "$MY_KEY", "other": "$NOT_A_SECRET_KEY_VALUE"}
    assert resolve(args, "args") == {"api_key": SECRET, "other": "$NOT_A_SECRET_KEY_VALUE"}
    monkeypatch.delenv("MY_KEY")
    with pytest.raises(ConfigError, match=r"args.api_key = '\$MY_KEY': \$MY_KEY is not set"):
        resolve(args, "args", env={})


def test_resolved_and_printed_configs_show_no_literal_secret():
    config = OrchestratorConfig.model_validate(
        {"env": [{"id": "rl-add-digits", "args": {"api_key": SECRET, "n": 3}}]}
    )
    text = dump_config(config)
    assert SECRET not in text and 'api_key = "***"' in text and "n = 3" in text


def test_rl_writes_references_and_hands_the_value_to_the_processes(tmp_path):
    config = RLConfig.model_validate({
        "output_dir": str(tmp_path / "run"),
        "orchestrator": {"env": [{"id": "rl-add-digits", "args": {"api_key": SECRET}}]},
        "inference": {"vllm_args": {"api_key": SECRET}},
    })  # fmt: skip
    plan = build_plan(config, dry_run=True)
    plan.run.claim()
    write_configs(plan)
    for path in RunDir(tmp_path / "run").configs.glob("*.toml"):
        assert SECRET not in path.read_text(), path
    orch = load_toml(plan.run.config_file("orchestrator"))
    name = orch["env"][0]["args"]["api_key"].removeprefix("$")
    assert name.startswith("RL_SECRET_") and plan.secret_env[name] == SECRET
    assert plan.env("orchestrator")[name] == SECRET and plan.env("inference")[name] == SECRET
    assert SECRET not in plan.command("orchestrator") + plan.command("inference")


def test_the_wandb_config_is_redacted(tmp_path, fake_wandb):
    config = OrchestratorConfig.model_validate(
        {"wandb": {"project": "p"}, "env": [{"id": "rl-add-digits", "args": {"token": SECRET}}]}
    )
    start_wandb(config.wandb, RunDir(tmp_path), None, {"orchestrator": config.model_dump()})
    assert SECRET not in repr(fake_wandb.inits) and "***" in repr(fake_wandb.inits)


# Generated cases: every secret word, in every case and separator style (a word is split at
# `_`, `-`, `.` and camelCase humps), alone or with other words; values URLs must escape.
WORDS = ["key", "apiKey", "token", "secret", "password", "passwd", "credential", "auth"]
STYLES = [str.lower, str.upper, lambda w: w[:1].upper() + w[1:]]
NAMES = sorted({
    style(template.format(word)) for word in WORDS for style in STYLES
    for template in ("{}", "hf_{}", "{}-value", "X-{}", "my.{}", "client_{}")
} | {"client" + word[:1].upper() + word[1:] for word in WORDS})  # fmt: skip
VALUES = [SECRET, "p@ss:w/rd?&=", "ÿ-unicode-☃", "a" * 300]


@pytest.mark.parametrize("name", NAMES)
def test_generated_secret_names_are_found_refused_and_never_quoted(name):
    from launcher.literal_secrets import literal_secrets, refuse_literal_secrets

    for value in VALUES:
        data = {"server": {"env": {name: value}, "args": [f"--{name}", value, f"--{name}={value}"]}}
        assert len(list(literal_secrets(data))) == 3, (name, value)
        with pytest.raises(ConfigError) as err:
            refuse_literal_secrets(data, "tasks.json", "rl.lock.yaml")
        assert value not in str(err.value) and ".env" in str(err.value)
        references = {"env": {name: "$X"}, "args": [f"--{name}", "${X}", f"--{name}=Bearer $X"]}
        assert list(literal_secrets(references)) == []


@pytest.mark.parametrize("name", [n for n in NAMES if n.isidentifier()])
@pytest.mark.parametrize("value", VALUES)
def test_generated_urls_are_redacted_in_messages(name, value):
    from urllib.parse import quote

    from launcher.literal_secrets import literal_secrets
    from rlcore.secrets import redact_urls

    token, password = quote(value, safe=""), quote(value + "!", safe="")
    url = f"https://user:{password}@example.com:8443/mcp?a=1&{name}={token}"
    message = f"server {url} failed: 401 (retry {url})."
    shown = redact_urls(message)
    assert token not in shown and password not in shown and "user" not in shown
    assert shown.count("https://***@example.com:8443/mcp?a=1&") == 2 and shown.endswith(").")
    assert len(list(literal_secrets({"url": url}))) == 2
    assert list(literal_secrets({"url": f"https://$U@example.com/mcp?{name}=$T"})) == []


def test_log_lines_and_uncaught_tracebacks_show_no_url_secret(monkeypatch, capsys):
    import io
    import sys

    from rlcore.logs import setup_logging

    monkeypatch.setattr(sys, "excepthook", sys.excepthook)  # put back after the test
    url = f"http://alice:{SECRET}@host:1/v1?api_key={SECRET}"
    stream = io.StringIO()
    logger = setup_logging("orchestrator", stream=stream)
    try:
        raise ConnectionError(f"cannot reach {url}")
    except ConnectionError as err:
        logger.exception(f"inference server {url} failed a request")
        sys.excepthook(type(err), err, err.__traceback__)
    logged, printed = stream.getvalue(), capsys.readouterr().err
    assert "http://***@host:1/v1?api_key=***" in logged and "cannot reach http://***@" in printed
    assert SECRET not in logged + printed
