"""Secrets are never written: every entry point (rl, orchestrator, inference, trainer, sft,
evals) writes its resolved config without a URL's password or token or a workflow's `static`
secret, and says none of them in what it prints or logs. Entry points that need no model run
for real in-process up to their first network wait (nothing listens on port 1); the others are
run through the function that writes their config, stopped right after it. `rl` hands the
secrets to its processes by environment, and each process gets the value back."""

import re
import sys
from pathlib import Path

import pytest
import yaml
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from launcher.commands import run_command
from launcher.launch import write_configs
from launcher.prepare import build_plan
from launcher.rl import main as rl_main
from launcher.rl_config import RLConfig
from launcher.workflow import load_workflow, workflow_layer
from rlcore.config.literal_secrets import externalize, literal_secrets
from rlcore.config.toml_io import dump_config, load_toml
from rlcore.errors import ConfigError
from rlcore.runs.rundir import RunDir
from rlcore.secrets import redact, resolve

REPO = Path(__file__).resolve().parents[3]
SERVER = REPO / "examples" / "mcp_tasks" / "server.py"
PASSWORD, KEY, STATIC = "pw-5f3a91", "key-9c1e77", "sk-live-0123456789abcdef"
SECRETS = (PASSWORD, KEY, STATIC)
URL = f"http://alice:{PASSWORD}@127.0.0.1:1/v1?x=1&api_key={KEY}"
SHOWN_URL = "http://***@127.0.0.1:1/v1?x=1&api_key=***"


class Stopped(Exception):
    """Raised in place of the step after the config is written."""


def stop(*args, **kwargs):
    raise Stopped


def assert_no_secret(*texts: str) -> None:
    for text in texts:
        assert not any(secret in text for secret in SECRETS), text


def written(folder: Path) -> str:
    """Every file under `folder`, as one text."""
    return "\n".join(p.read_text(errors="replace") for p in folder.rglob("*") if p.is_file())


# -- entry points that run here up to their first wait on a server ---------------------------


def test_evals_writes_and_says_no_secret_of_its_server_url(tmp_path, capsys, monkeypatch):
    from orchestrator.evals.main import main

    monkeypatch.setattr(sys, "excepthook", sys.excepthook)  # setup_logging sets it
    out = tmp_path / "eval"
    argv = [
        "--output-dir",
        str(out),
        "--client.base-url",
        URL,
        "--client.health-timeout-s",
        "1",
        "--eval.env",
        '[{"id": "rl-add-digits"}]',
    ]
    with pytest.raises(SystemExit) as exit_:
        main(argv)
    captured = capsys.readouterr()
    assert exit_.value.code == 1 and SHOWN_URL in captured.err, captured.err
    assert SHOWN_URL in (out / "eval.toml").read_text()
    assert_no_secret(captured.out, captured.err, written(out))


def test_the_orchestrator_alone_writes_and_says_no_secret_of_its_server_url(
    tmp_path, capsys, monkeypatch
):
    from orchestrator.main import main

    monkeypatch.setattr(sys, "excepthook", sys.excepthook)  # setup_logging sets it
    out = tmp_path / "run"
    argv = [
        "--output-dir",
        str(out),
        "--client.base-url",
        URL,
        "--client.health-timeout-s",
        "1",
        "--env",
        '[{"id": "rl-add-digits"}]',
    ]
    with pytest.raises(SystemExit) as exit_:
        main(argv)
    captured = capsys.readouterr()
    assert exit_.value.code == 1 and SHOWN_URL in captured.err, captured.err
    assert SHOWN_URL in RunDir(out).config_file("orchestrator").read_text()
    assert_no_secret(captured.out, captured.err, written(out))


def test_printed_configs_show_no_secret(capsys):
    from orchestrator.main import main

    with pytest.raises(SystemExit):
        main(["--client.base-url", URL, "--print-config"])
    out = capsys.readouterr().out
    assert SHOWN_URL in out
    assert_no_secret(out)


# -- entry points that need a model or a server: the function that writes their config -------


def test_inference_writes_no_secret(tmp_path):
    from inference.config import InferenceConfig
    from inference.server import write_resolved_config

    config = InferenceConfig.model_validate(
        {
            "output_dir": str(tmp_path / "run"),
            "vllm_args": {"otlp_traces_endpoint": URL, "api_key": STATIC},
        }
    )
    write_resolved_config(config)
    text = RunDir(tmp_path / "run").config_file("inference").read_text()
    assert SHOWN_URL in text
    assert_no_secret(text)


def test_the_trainer_writes_no_secret(
    tiny_model_dir, tmp_path, fake_config, cpu_world, monkeypatch
):
    import trainer.train

    config = fake_config(tiny_model_dir, tmp_path / "run", wandb={"name": URL, "tags": [URL]})
    monkeypatch.setattr(trainer.train, "load_model", stop)
    with pytest.raises(Stopped):
        trainer.train.setup_trainer(config, cpu_world)
    text = RunDir(tmp_path / "run").config_file("trainer").read_text()
    assert SHOWN_URL in text
    assert_no_secret(text)


def sft_config(tiny_model_dir, out: Path):
    from trainer.sft.config import SFTConfig

    return SFTConfig.model_validate(
        {
            "model": {"name": str(tiny_model_dir)},
            "output_dir": str(out),
            "data": {"name": "rows.jsonl"},
            "wandb": {"name": URL},
        }
    )


def test_sft_writes_no_secret(tiny_model_dir, tmp_path, cpu_world, monkeypatch):
    import trainer.sft.train

    monkeypatch.setattr(trainer.sft.train, "load_examples", lambda config, source: ([], []))
    monkeypatch.setattr(trainer.sft.train, "load_model", stop)
    with pytest.raises(Stopped):
        trainer.sft.train.setup_sft(sft_config(tiny_model_dir, tmp_path / "run"), cpu_world)
    text = RunDir(tmp_path / "run").config_file("sft").read_text()
    assert SHOWN_URL in text
    assert_no_secret(text)


def test_rl_sft_writes_no_secret(tiny_model_dir, tmp_path, monkeypatch):
    import launcher.sft_run
    from launcher.eta import RunClock

    monkeypatch.setattr(launcher.sft_run, "install_stop_handlers", lambda: None)
    monkeypatch.setattr(launcher.sft_run.children, "start", stop)
    run = RunDir(tmp_path / "run")
    config = sft_config(tiny_model_dir, run.root)
    with pytest.raises(Stopped):
        launcher.sft_run.run_attempt(run, config, None, RunClock(None, config.max_steps, ["sft"]))
    assert_no_secret(run.config_file("sft").read_text())


def test_the_evals_server_config_holds_no_secret(tmp_path, monkeypatch):
    import orchestrator.evals.server

    monkeypatch.setattr(orchestrator.evals.server.children, "start", stop)
    settings_ = {"vllm_args": {"otlp_traces_endpoint": URL}}
    with (
        pytest.raises(Stopped),
        orchestrator.evals.server.own_server("m", settings_, tmp_path, 64, 1.0),
    ):
        pass
    assert_no_secret((tmp_path / "inference.toml").read_text())


# -- rl: a workflow's `static` secret and a URL's, printed and written ----------------------

WORKFLOW = """\
job: {name: locker}
action_mappings:
  open:
    _tool: open
    _parser: {positional: [code]}
    code: {from_arg: code}
    api_key: {static: %s}
"""


@pytest.fixture
def project(tmp_path, monkeypatch):
    """A project folder (the working folder) with a tasks dataset `x` and a workflow whose
    action passes a literal `static` API key."""
    import json

    monkeypatch.chdir(tmp_path)
    task = {
        "id": "t0",
        "prompt": "Open the locker.",
        "mcp_config": {"locker": {"command": "python", "args": [str(SERVER)]}},
        "evaluate_tool": {"name": "evaluate", "arguments": {"expected": "apple"}},
    }
    Path("tasks.json").write_text(json.dumps([task]))
    assert run_command("tasks", ["tasks.json", "--name", "x"]) == 0
    Path("w.yaml").write_text(WORKFLOW % STATIC)
    return tmp_path


RL_ARGV = [
    "--config",
    "w.yaml",
    "--dataset",
    "data/tasks/x",
    "--inference.vllm-args",
    f'{{"otlp_traces_endpoint": "{URL}"}}',
]


def test_rl_dry_run_prints_no_secret(project, capsys):
    rl_main([*RL_ARGV, "--dry-run"])
    out = capsys.readouterr()
    assert 'static = "***"' in out.out and SHOWN_URL in out.out, out.out
    assert_no_secret(out.out, out.err)


def test_rl_writes_no_secret_and_its_processes_get_them_back(project, capsys):
    from rlcore.config.entry import parse_config

    layer = workflow_layer(Path("w.yaml"), "data/tasks/x")
    config, _ = parse_config(
        RLConfig,
        "rl",
        RL_ARGV[4:],
        ("trainer", "orchestrator", "inference"),
        first=[(layer, "w.yaml")],
    )
    plan = build_plan(config, dry_run=True)
    plan.run.claim()
    write_configs(plan)
    assert_no_secret(written(plan.run.configs), capsys.readouterr().out)
    orch = load_toml(plan.run.config_file("orchestrator"))
    args = resolve(orch["env"][0]["args"], "args", plan.env("orchestrator"))
    assert args["action_mappings"]["open"]["api_key"] == {"static": STATIC}
    inference = load_toml(plan.run.config_file("inference"))
    vllm_args = resolve(inference["vllm_args"], "vllm_args", plan.env("inference"))
    assert vllm_args == {"otlp_traces_endpoint": URL}


# -- generated `static` forms -----------------------------------------------------------------

SECRET_PARAMS = ["api_key", "token", "password", "X-Api-Key", "clientSecret", "authtoken"]
VALUES = st.text(
    st.characters(codec="utf-8", exclude_categories=["Cs", "Cc"]), min_size=1, max_size=20
).map(lambda v: "ZQX" + v)
STYLES = {
    "flow": "{name}: {{static: {value}}}",
    "block": "{name}:\n      static: {value}",
    "nested flow": "{name}: {{ static : {value} }}",
}


def scalar(value: str, quote: str) -> str:
    """`value` as a YAML scalar: double- or single-quoted, or plain where it can be."""
    if quote == "plain" and re.fullmatch(r"[\w+/-]+", value):
        return value
    return yaml.safe_dump(value, default_style=quote if quote != "plain" else '"', width=1000)


@settings(max_examples=60, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(
    name=st.sampled_from(SECRET_PARAMS),
    value=st.one_of(VALUES, st.from_regex(r"ZQX[\w+/-]{0,20}", fullmatch=True)),
    style=st.sampled_from(list(STYLES)),
    quote=st.sampled_from(['"', "'", "plain"]),
)
def test_generated_static_secrets_are_found_redacted_and_passed_by_environment(
    tmp_path_factory, name, value, style, quote
):
    quoted = scalar(value, quote).strip()
    path = tmp_path_factory.mktemp("w") / "w.yaml"
    mapping = STYLES[style].format(name=name, value=quoted)
    arg = "    x_api_token: {from_arg: token}\n"  # the model's argument: no secret of the file
    path.write_text(
        f"job: {{name: w}}\naction_mappings:\n  act:\n    _tool: t\n    {mapping}\n{arg}"
    )
    mappings = load_workflow(path).action_mappings
    assert mappings["act"][name] == {"static": value}
    assert redact(mappings)["act"]["x_api_token"] == {"from_arg": "token"}
    data = {"orchestrator": {"env": [{"id": "rl-tasks", "args": {"action_mappings": mappings}}]}}
    assert "ZQX" not in dump_config(data) and "ZQX" not in str(redact(data))
    if "$" not in value:  # `sk$x` has a `$VAR` to what `rl` refuses in files (rl_tasks expands it)
        assert [p[-1] for p, _, _ in literal_secrets(data)] == ["static"]
    written_, env = externalize(data, "")
    assert "ZQX" not in dump_config(written_)
    assert resolve(written_, "", env) == data


# -- a syntax error quotes its line, never a secret in it ------------------------------------
BROKEN_LINES = {
    "assignment": "{name} = {value}",
    "dotted": "client.{name} = {value}",
    "inline table": "client = {{ base = 1, {name} = {value}, x = oops }}",
    "array of tables": "x = [ {{ {name} = {value} }} ]",
    "url user info": "base_url = http://alice:{value}@host/v1",
    "url query": "base_url = http://host/v1?x=1&{name}={value}",
    "flag and value": 'args = [ "--{name}", {value}, "--port", 8 ]',
    "flag=value": 'args = [ "--{name}={value}", oops ]',
}


@settings(max_examples=80, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(
    name=st.sampled_from(["api_key", "token", "password", "clientSecret", "hf-token"]),
    value=st.from_regex(r"ZQX[\w+/.-]{0,20}", fullmatch=True),
    form=st.sampled_from(list(BROKEN_LINES)),
)
def test_a_syntax_error_never_quotes_a_secret(tmp_path_factory, name, value, form):
    path = tmp_path_factory.mktemp("t") / "t.toml"
    path.write_text("max_steps = 1\n" + BROKEN_LINES[form].format(name=name, value=value) + "\n")
    with pytest.raises(ConfigError) as err:
        load_toml(path)
    message = str(err.value)
    assert f"{path}:2:" in message and "TOML syntax error" in message, message
    assert "ZQX" not in message, message


def test_a_syntax_error_quotes_a_window_of_a_long_line(tmp_path):
    path = tmp_path / "t.toml"
    path.write_text("[" * 100_000 + "\n")
    message = str(pytest.raises(ConfigError, load_toml, path).value)
    assert f"{path}:1:" in message and len(message) < 400 and message.endswith("..."), message
    path.write_text(f"name = {'x' * 5000} oops\n")
    message = str(pytest.raises(ConfigError, load_toml, path).value)
    assert len(message) < 600 and 'e.g. `= "..."`' in message, message
    path.write_text("x = {" + " " * 20_000 + "oops\n")  # backtracking regexes took hours here
    message = str(pytest.raises(ConfigError, load_toml, path).value)
    assert f"{path}:1:" in message and len(message) < 400, message
    path.write_text("name = Qwen/Qwen3-0.6B\n")  # a plain value is still echoed in the hint
    assert '`= "Qwen/Qwen3-0.6B"`' in str(pytest.raises(ConfigError, load_toml, path).value)
