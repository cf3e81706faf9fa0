"""Secrets in configs never reach a resolved config, a printed config, an error message or the
W&B config; `$VAR` references are resolved only inside the process, and `rl` passes a literal
secret to the processes by environment."""

import string

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from launcher.launch import write_configs
from launcher.prepare import build_plan
from launcher.rl_config import RLConfig
from orchestrator.config import OrchestratorConfig
from rlcore.config.toml_io import dump_config, load_toml
from rlcore.errors import ConfigError
from rlcore.reporting.wandb_run import start_wandb
from rlcore.runs.rundir import RunDir
from rlcore.secrets import (
    is_secret_key,
    redact,
    redact_command,
    redact_url,
    redact_urls,
    resolve,
    scrub,
)

SECRET = "sk-live-0123456789abcdef"


def test_secret_names_are_told_from_ordinary_ones():
    secret = ["api_key", "apiKey", "hf_token", "OPENAI_API_KEY", "password", "client_secret"]
    plain = ["max_tokens", "num_tokens", "tokenizer", "api_key_var", "key_path", "keep", "monkey"]
    assert all(is_secret_key(k) for k in secret)
    assert not any(is_secret_key(k) for k in plain)


def test_literals_are_redacted_and_references_kept():
    data = {"args": {"api_key": SECRET, "auth": [{"token": SECRET}], "hf_token": "$HF_TOKEN"}}
    assert redact(data) == {
        "args": {"api_key": "***", "auth": [{"token": "***"}], "hf_token": "$HF_TOKEN"}
    }
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
    config = RLConfig.model_validate(
        {
            "output_dir": str(tmp_path / "run"),
            "orchestrator": {"env": [{"id": "rl-add-digits", "args": {"api_key": SECRET}}]},
            "inference": {"vllm_args": {"api_key": SECRET}},
        }
    )
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
NAMES = sorted(
    {
        style(template.format(word))
        for word in WORDS
        for style in STYLES
        for template in ("{}", "hf_{}", "{}-value", "X-{}", "my.{}", "client_{}")
    }
    | {"client" + word[:1].upper() + word[1:] for word in WORDS}
)
VALUES = [SECRET, "p@ss:w/rd?&=", "ÿ-unicode-☃", "a" * 300]


@pytest.mark.parametrize("name", NAMES)
def test_generated_secret_names_are_found_refused_and_never_quoted(name):
    from rlcore.config.literal_secrets import literal_secrets, refuse_literal_secrets

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

    from rlcore.config.literal_secrets import literal_secrets
    from rlcore.secrets import redact_urls

    token, password = quote(value, safe=""), quote(value + "!", safe="")
    url = f"https://user:{password}@example.com:8443/mcp?a=1&{name}={token}"
    message = f"server {url} failed: 401 (retry {url})."
    shown = redact_urls(message)
    assert token not in shown and password not in shown and "user" not in shown
    assert shown.count("https://***@example.com:8443/mcp?a=1&") == 2 and shown.endswith(").")
    assert len(list(literal_secrets({"url": url}))) == 2
    assert list(literal_secrets({"url": f"https://$U@example.com/mcp?{name}=$T"})) == []


# -- properties over generated forms -----------------------------------------------------------
# A literal secret below always carries MARK, which nothing else generated can contain (lower
# case and digits only), so "MARK is not in what is shown" is "no secret is shown".
MARK = "ZQX"
PROPERTY = settings(max_examples=150, deadline=None)


def case_styles(words: list[str]) -> st.SearchStrategy[str]:
    """`words` written as snake, kebab, dotted, SCREAMING, camel and Pascal case."""
    return st.sampled_from(
        [
            "_".join(words),
            "-".join(words),
            ".".join(words),
            "_".join(words).upper(),
            "-".join(w.capitalize() for w in words),
            words[0] + "".join(w.capitalize() for w in words[1:]),
            "".join(w.capitalize() for w in words),
        ]
    )


SECRET_LAST = [
    "key",
    "token",
    "secret",
    "password",
    "passwd",
    "credentials",
    "auth",
    "authorization",
    "apikey",
    "passphrase",
    "signature",
]
QUALIFIERS = ["", "hf", "openai", "api", "client", "x", "my", "access", "wandb", "db", "aws"]
SECRET_NAMES = st.builds(
    lambda words, digit, value: words + ([digit] if digit else []) + (["value"] if value else []),
    st.tuples(st.sampled_from(QUALIFIERS), st.sampled_from(SECRET_LAST)).map(
        lambda pair: [w for w in pair if w]
    ),
    st.sampled_from(["", "2"]),
    st.booleans(),
).flatmap(case_styles)
NOT_SECRET_COMPOUNDS = [
    ["sort", "key"],
    ["primary", "key"],
    ["answer", "key"],
    ["foreign", "key"],
    ["label", "key"],
    ["pad", "token"],
    ["eos", "token"],
    ["max", "token"],
    ["token", "budget"],
    ["token", "count"],
    ["num", "tokens"],
    ["max", "tokens"],
    ["auth", "type"],
    ["auth", "method"],
    ["api", "key", "var"],
    ["key", "path"],
    ["hf", "token", "env"],
    ["secret", "name"],
    ["password", "file"],
    ["tokenizer"],
    ["monkey"],
    ["keep"],
    ["keyboard"],
    ["passthrough"],
]
RUN_TOGETHER_SECRETS = [
    "clientsecret",
    "apikey",
    "authtoken",
    "accesstoken",
    "secretkey",
    "privatekey",
    "dbpassword",
    "refreshtoken",
    "xapikey",
]


@PROPERTY
@given(name=SECRET_NAMES)
def test_generated_secret_names_are_secret(name):
    assert is_secret_key(name), name


@PROPERTY
@given(name=st.sampled_from(NOT_SECRET_COMPOUNDS).flatmap(case_styles))
def test_common_non_secret_compounds_are_not(name):
    assert not is_secret_key(name), name


@PROPERTY
@given(word=st.sampled_from(RUN_TOGETHER_SECRETS), upper=st.booleans(), rest=st.booleans())
def test_run_together_secret_names_are_secret(word, upper, rest):
    name = (word.upper() if upper else word) + ("_2" if rest else "")
    assert is_secret_key(name), name


def pieces(alphabet: str, escapes: list[str], max_size: int = 8) -> st.SearchStrategy[str]:
    """Text of `alphabet`'s characters and percent-escapes, starting with MARK."""
    one = st.one_of(st.sampled_from(list(alphabet)), st.sampled_from(escapes))
    return st.lists(one, max_size=max_size).map(lambda p: MARK + "".join(p))


UNRESERVED = string.ascii_letters + string.digits + "-._~"
ESCAPES = ["%40", "%3A", "%2F", "%25", "%20", "%23", "%26", "%E2%98%83"]
USER = pieces(UNRESERVED + "!$&()*+,;=", ESCAPES)  # user info: no `@`, `/`, `?`, `#`, quote
PASSWORD = pieces(UNRESERVED + "!$&()*+,;=:", ESCAPES)
QUERY_VALUE = pieces(UNRESERVED + "!$()*+,;=:@/?", ESCAPES)  # no `&`, `#`
SECRET_PARAMS = [
    "api_key",
    "apiKey",
    "access_token",
    "token",
    "client_secret",
    "password",
    "X-Amz-Signature",
    "api%5Fkey",
    "authtoken",
    "sig",
]
PLAIN_PARAMS = ["sort_key", "page", "token_count", "auth_type", "max_tokens", "q", "answer_key"]


@st.composite
def urls(draw) -> tuple[str, dict]:
    """A URL with user info (or not), query parameters secret and plain in any order and a
    fragment (plain, or `#access_token=...`); and what must survive redaction."""
    host = draw(st.sampled_from(["example.com", "127.0.0.1:8443", "[::1]:80", "h.io"]))
    path = draw(st.sampled_from(["", "/", "/v1", "/mcp/x", "/a%20b"]))
    userinfo = draw(st.one_of(st.just(""), USER, st.builds("{}:{}".format, USER, PASSWORD)))
    secret = [
        (name, draw(QUERY_VALUE))
        for name in draw(st.lists(st.sampled_from(SECRET_PARAMS), max_size=3))
    ]
    plain = [
        (name, draw(st.text("abc123", max_size=4)))
        for name in draw(st.lists(st.sampled_from(PLAIN_PARAMS), max_size=3))
    ]
    params = draw(st.permutations(secret + plain))
    fragment = draw(st.sampled_from(["", "#sec-2", "#access_token={}&token_type=bearer"]))
    fragment = fragment.format(draw(QUERY_VALUE))
    url = f"https://{userinfo + '@' if userinfo else ''}{host}{path}"
    url += ("?" + "&".join(f"{k}={v}" for k, v in params) if params else "") + fragment
    kept = [host + path, *(f"{k}={v}" for k, v in plain)]
    kept += ["token_type=bearer"] if "access_token" in fragment else [fragment]
    count = bool(userinfo) + len(secret) + ("access_token" in fragment)
    return url, {"kept": kept, "count": count, "userinfo": bool(userinfo)}


@PROPERTY
@given(case=urls())
def test_generated_urls_lose_their_secrets_and_keep_the_rest(case):
    from rlcore.config.literal_secrets import literal_secrets

    url, facts = case
    shown = redact_url(url)
    assert MARK not in shown and all(part in shown for part in facts["kept"]), shown
    assert shown.startswith("https://***@") == facts["userinfo"]
    if "$" not in url:  # `pa$word` is a `$VAR` to what `rl` refuses (MCP servers expand it)
        assert len(list(literal_secrets({"url": url}))) == facts["count"]
    assert MARK not in dump_config({"server": {"url": url, "urls": [url]}})
    assert MARK not in str(redact({"args": [url, {"endpoint": url}]}))


@PROPERTY
@given(case=urls())
def test_generated_urls_in_messages_lose_their_secrets(case):
    url, _ = case
    if "'" not in url:  # a message ends a URL at a quote (it is quoted in `repr`s)
        message = f"server {url} failed: 401 (retry `{url}`, or see <{url}>)."
        shown = redact_urls(message)
        assert MARK not in shown and shown.endswith(">).")


@PROPERTY
@given(case=urls())
def test_rl_passes_a_urls_secrets_by_environment_and_the_process_gets_the_url_back(case):
    from rlcore.config.literal_secrets import externalize

    url, _ = case
    written, env = externalize({"args": {"endpoint": url, "list": ["x", url]}}, "orchestrator")
    assert MARK not in dump_config(written) and all(MARK in v for v in env.values())
    assert resolve(written, "args", env) == {"args": {"endpoint": url, "list": ["x", url]}}


@pytest.mark.parametrize(
    "url",
    [
        "https://$MCP_USER@example.com/mcp?token=$MCP_TOKEN",
        "https://bob:${MCP_PASSWORD}@example.com/mcp?a=1&api_key=${K}#access_token=$T",
    ],
)
def test_references_in_urls_are_kept_and_resolved_in_the_process(url):
    assert redact_url(url) == url and dump_config({"url": url}) == f'url = "{url}"\n'
    env = {"MCP_USER": "u:p", "MCP_TOKEN": "t", "MCP_PASSWORD": "p", "K": "k", "T": "t"}
    resolved = resolve({"url": url}, "args", env)["url"]
    assert "$" not in resolved and "@example.com/mcp?" in resolved


FLAG_STYLES = ["--{}", "-{}", "--{}={}"]


@PROPERTY
@given(
    name=SECRET_NAMES,
    style=st.sampled_from(FLAG_STYLES),
    value=pieces(UNRESERVED + "/:+=", ["%40"]),
    before=st.lists(
        st.sampled_from(["python", "-m", "launcher.rl", "--sort-key", "k"]), max_size=4
    ),
)
def test_generated_secret_flags_are_hidden_in_command_lines(name, style, value, before):
    flag = style.format(name, value) if "=" in style else style.format(name)
    argv = [*before, flag, *([] if "=" in style else [value]), "--max-tokens", "8"]
    shown = redact_command(" ".join(argv))
    assert MARK not in shown and shown.endswith("--max-tokens 8"), shown
    assert MARK not in str(redact({"args": argv})) and "--max-tokens" in str(redact(argv))
    references = f"x --{name} $VAR --{name}=${{VAR}}"
    assert redact_command(references) == references


def test_non_secret_flags_and_assignments_are_shown_as_given():
    line = "rl --sort-key k --token-budget 9 AUTH_TYPE=none --answer-key a http://h/p?sort_key=s"
    assert redact_command(line) == line
    assert redact(["--sort-key", "k", "AUTH_TYPE=none"]) == ["--sort-key", "k", "AUTH_TYPE=none"]
    assert (
        redact_command("env HF_TOKEN=abc OPENAI_API_KEY='x y' python -m x --token=t")
        == "env HF_TOKEN=*** OPENAI_API_KEY=*** python -m x --token=***"
    )


def test_log_lines_and_uncaught_tracebacks_show_no_url_secret(monkeypatch, capsys):
    import io
    import sys

    from rlcore.reporting.logs import setup_logging

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


@PROPERTY
@given(case=urls())
def test_a_child_config_file_holds_no_secret_and_the_child_reads_it_back(case, tmp_path_factory):
    """rl sft's `sft` and evals' own server read the file their launcher wrote: it names the
    secret, the environment given with it holds the value (not the `***` of a redacted file)."""
    from rlcore.config.literal_secrets import write_for_child

    url, _ = case
    config = {"data": {"name": url}, "vllm_args": ["--api-key", MARK]}
    path = tmp_path_factory.mktemp("child") / "sft.toml"
    env = write_for_child(config, path, "inference")
    text = path.read_text()
    assert MARK not in text and "***" not in text
    assert resolve(load_toml(path), "sft", env) == config


def test_a_password_with_a_slash_is_user_info_not_a_path():
    """`user:pass@` whose password holds a `/` typed as is (Hypothesis found `ZQX/` quoted by a
    TOML syntax error's hint): hidden in messages, and passed whole by environment."""
    from rlcore.config.literal_secrets import externalize
    from rlcore.secrets import redact_text, redact_url

    assert redact_url("http://alice:ab/cd@host/v1?x=1") == "http://***@host/v1?x=1"
    hint = 'hint: strings must be quoted in TOML, e.g. `= "http://alice:ZQX/@host/v1"`'
    assert "ZQX" not in redact_text(hint)
    assert redact_url("http://host/users/@me") == "http://host/users/@me"  # no user:pass
    data, env = externalize({"client": {"base_url": "http://alice:ab/cd@host/v1"}}, "")
    written = data["client"]["base_url"]
    assert "ab/cd" not in written and list(env.values()) == ["alice:ab/cd"]
    assert written.replace(f"${{{next(iter(env))}}}", "alice:ab/cd") == "http://alice:ab/cd@host/v1"
