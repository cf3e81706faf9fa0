"""`rlcore.secrets.redact_text`: secrets in free text (log lines, library messages) hidden by
flag, header, assignment and URL; references and look-alike names kept; one pass on any input
(adversarial lines of 100,000 characters, where a pattern that matched one text two ways or
retried from every word took seconds); the URL finder agrees with URL_IN_TEXT everywhere."""

import time

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from rlcore.secrets import URL_IN_TEXT, redact_text, redact_urls, urls_in_text

SECRET = "K9sEcReT"


@pytest.mark.parametrize(
    "line",
    [
        f"python -m trainer --wandb-api-key {SECRET} --lr 1",
        f"--api-key={SECRET}",
        f"--hf-token '{SECRET}'",
        f"Authorization: Bearer {SECRET}",
        f"authorization: Basic {SECRET}==",
        f"Proxy-Authorization: Token {SECRET}",
        f"X-Api-Key: {SECRET}",
        f"curl -H 'Authorization: Bearer {SECRET}' http://h/v1",
        f"headers={{'Authorization': 'Bearer {SECRET}', 'Accept': 'json'}}",
        f"api_key={SECRET}, model=qwen",
        f"OPENAI_API_KEY={SECRET}",
        f"export HF_TOKEN={SECRET}",
        f"password = {SECRET}",
        f"client_secret: {SECRET}",
        f'{{"api_key": "{SECRET}", "max_tokens": 5}}',
        f"Namespace(api_key='{SECRET}', lr=1)",
        f"request failed: Bearer {SECRET} rejected",
        f"GET https://user:{SECRET}@host/v1?x=1",
        f"see http://host/v1?api_key={SECRET}&b=2.",
        f"dbPassword={SECRET};",
    ],
)
def test_a_secret_in_a_line_is_hidden(line):
    shown = redact_text(line)
    assert SECRET not in shown and "***" in shown, shown


@pytest.mark.parametrize(
    "line",
    [
        "max_tokens: 512",
        "pad_token: <|endoftext|>",
        "token_count=5 sort_key=reward",
        "error: token expired",
        "api_key=$OPENAI_API_KEY",
        "--api-key ${KEY}",
        "--api-key --lr 1",
        "see https://example.com/a: fine",
        "Authorization:",
        "step 3: loss=0.25 reward=1.0",
    ],
)
def test_what_is_no_secret_stays_as_written(line):
    assert redact_text(line) == line


def test_what_surrounds_a_hidden_value_stays():
    assert redact_text("a --api-key K b") == "a --api-key *** b"
    assert redact_text("x: 1\nAuthorization: Bearer K\ny: 2") == (
        "x: 1\nAuthorization: Bearer ***\ny: 2"
    )
    assert redact_text('{"token": "K", "n": 1}') == '{"token": "***", "n": 1}'


ADVERSARIAL = [
    " " * 100_000,
    "api_key" + " " * 100_000 + "x",
    "api_key=" + " " * 100_000,
    "a." * 50_000 + " x://y",
    "a-" * 50_000 + "@ x://y",
    "x://" + ":" * 100_000,
    "api_key='" * 10_000,
    'token="' + "a" * 100_000,
    "--api-key " * 10_000,
    "Bearer " * 15_000,
    "Authorization: Basic " * 5_000,
    "k=" * 50_000,
    "a:" * 50_000 + "//",
    "http://a " * 12_000,
    "$" * 100_000,
    "A" * 100_000 + "=1",
]


@pytest.mark.parametrize("text", ADVERSARIAL, ids=range(len(ADVERSARIAL)))
def test_it_is_linear_on_adversarial_lines(text):
    started = time.perf_counter()
    redact_text(text)
    assert time.perf_counter() - started < 2.0  # quadratic: tens of seconds at this length


def test_the_url_finder_was_quadratic_and_is_not():
    text = "a." * 50_000 + " x://y"  # URL_IN_TEXT retries its scheme from each `a`
    started = time.perf_counter()
    assert redact_urls(text) == text
    assert time.perf_counter() - started < 1.0


TEXT_CHARS = st.sampled_from(list("ab1_.-+:/ ?#@=&'\"<>`,;)]\n\u00e9\u3000"))


@settings(max_examples=400, deadline=None)
@given(st.text(TEXT_CHARS, max_size=40))
def test_the_url_finder_finds_what_url_in_text_finds(text):
    expected = [m.span() for m in URL_IN_TEXT.finditer(text)]
    assert list(urls_in_text(text)) == expected


@settings(max_examples=300, deadline=None)
@given(st.text(TEXT_CHARS, max_size=60))
def test_redacting_again_changes_nothing(text):
    once = redact_text(text)
    assert redact_text(once) == once
