"""Secrets: what counts as one, and how each is kept out of files, messages, logs and W&B.

Where a secret sits (`map_secrets` visits each; all redaction goes through it):
- a string under a secret-named key (`api_key = "sk-..."`), or the `static` value of a table
  under one (a workflow's `action_mappings.X.api_key: {static: sk-...}`);
- in a list (a server's or vLLM's args), the value of a secret-named flag: `--api-key VALUE`,
  `--api-key=VALUE`;
- in a URL, anywhere in a string: its user info (`user:password@`, or a lone `token@`) and the
  value of each secret-named query or fragment parameter (`?api_key=...`, `#access_token=...`;
  the name is compared percent-decoded).
A `$VAR` / `${VAR}` reference in such a place (a URL's user info may be `user:$VAR`) is no
secret: it stays as written and is resolved only inside the process that uses it, from its
environment and `.env` (`resolve`). Everything else in a config is written as given; a literal
secret shows as `***` in every resolved config (rlcore.config.toml_io), printed config, message, log
line (rlcore.reporting.logs) and the W&B config, and in a command line that is shown
(`redact_command`).

Secret names. A name is split into words at `_`, `-`, `.`, spaces and camelCase humps, lower-
cased, without trailing digits; a trailing `value`, `header`, `str`, `b64` or `pem` is dropped.
Its last word decides:
- a word of SECRET_WORDS (`key`, `token`, `secret`, `password`, `auth`, ...) is a secret's name,
  unless the word before it makes a common non-secret compound (NOT_SECRET_COMPOUNDS:
  `sort_key`, `primary_key`, `answer_key`, `pad_token`, ...);
- a run-together word ending in a secret word or compound is one too (RUN_TOGETHER:
  `clientsecret`, `dbpassword`, `apikey`, `accesstoken`, `authtoken`, `secretkey`, `privatekey`);
- any other last word is not: the secret words only qualify it (`token_budget`, `token_count`,
  `auth_type`, `auth_method`), or it names where a secret lives (`api_key_var`, `key_path`,
  `secret_name`); so are `max_tokens`, `tokenizer` and `monkey`.
What `rl` alone does with literal secrets (passing them by environment, refusing them in files it
writes) is in rlcore/config/literal_secrets.py."""

import os
import re
from collections.abc import Callable, Iterator
from typing import Any, NamedTuple
from urllib.parse import unquote, unquote_plus

from rlcore.errors import ConfigError

REDACTED = "***"
SECRET_WORDS = {
    "key",
    "token",
    "secret",
    "secrets",
    "password",
    "passwords",
    "passwd",
    "passphrase",
    "credential",
    "credentials",
    "auth",
    "authorization",
    "apikey",
    "signature",
    "sig",
}
"""Last words that make a name a secret's name."""
NOT_SECRET_COMPOUNDS = {
    "key": {
        "sort",
        "primary",
        "foreign",
        "answer",
        "partition",
        "cache",
        "dict",
        "lookup",
        "join",
        "group",
        "index",
        "input",
        "output",
        "label",
        "text",
        "prompt",
        "question",
        "target",
        "reward",
        "column",
        "field",
        "metric",
        "dataset",
        "data",
        "message",
        "content",
        "completion",
        "image",
        "hash",
        "shard",
        "rng",
        "prng",
        "seed",
        "hot",
        "row",
        "map",
        "unique",
        "composite",
        "natural",
        "range",
        "order",
        "task",
        "example",
        "response",
        "score",
        "split",
        "metadata",
    },
    "token": {
        "pad",
        "bos",
        "eos",
        "unk",
        "sep",
        "cls",
        "mask",
        "special",
        "stop",
        "start",
        "end",
        "first",
        "last",
        "next",
        "max",
        "min",
        "num",
        "image",
        "audio",
        "video",
        "think",
        "eot",
        "tool",
        "placeholder",
        "sentinel",
        "vision",
    },
}
"""Words before a last word of SECRET_WORDS that make a name no secret's (`sort_key`)."""
SECRET_QUALIFIERS = (
    "api",
    "access",
    "secret",
    "private",
    "auth",
    "refresh",
    "bearer",
    "session",
    "signing",
    "master",
    "client",
    "oauth",
)
RUN_TOGETHER = (
    "secret",
    "secrets",
    "password",
    "passwords",
    "passwd",
    "passphrase",
    "credential",
    "credentials",
    *(q + w for q in SECRET_QUALIFIERS for w in ("key", "token")),
)
"""Endings of one run-together word that make it a secret's name (`clientsecret`, `apikey`)."""
IGNORED_LAST_WORDS = {"value", "header", "str", "string", "b64", "base64", "hex", "pem"}
"""Trailing words that say how a secret is written, not what it is (`api_key_value`)."""
_WORD = re.compile(r"[A-Z]?[a-z0-9]+|[A-Z]+(?![a-z])")
_REFERENCE = re.compile(r"^\$\{(\w+)\}$|^\$(\w+)$")
_ANY_REFERENCE = re.compile(r"\$\{(\w+)\}|\$(\w+)")
_REF = r"(?:\$\{\w+\}|\$\w+)"
_USERINFO_REFERENCE = re.compile(rf"^(?:(?:[^:$]*|{_REF}):)?{_REF}$")
"""User info that holds no literal secret: `$VAR`, `user:$VAR`, `$USER:$VAR`."""
URL_IN_TEXT = re.compile(r"\b[A-Za-z][A-Za-z0-9+.-]*://[^\s'\"<>`]*[^\s'\"<>`.,:;)\]]")
"""A URL in free text (an error message), without the punctuation that ends a sentence."""
_SCHEME_CHARS = frozenset("abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ0123456789+.-")
_URL_STOP = frozenset("'\"<>`")
_URL_TRAILING = frozenset(".,:;)]")
_WHOLE_URL = re.compile(r"[A-Za-z][A-Za-z0-9+.-]*://\S*")
_URL_PARTS = re.compile(r"(?s)([^:/?#]+:)//([^/?#]*)([^?#]*)(?:\?([^#]*))?(?:#(.*))?")
_SLASHED_USERINFO = re.compile(r"(?s)([^:/?#]+:)//([^@\s?#/:]*:[^@\s?#]*/[^@\s?#]*)@(.*)")
"""`user:pass@` whose password holds a `/` (a base64 token typed as is, not percent-encoded):
by the RFC the `/` would end the authority, which would leave the password in a path. Read as
user info, the safe side for a secret (`http://host:8080/a/@b` is read so too)."""
"""RFC 3986 appendix B: scheme, authority, path, query, fragment."""
_COMMAND_WORD = re.compile(r"""(?:'[^']*'|"[^"]*"|[^\s'"])+""")
"""A word of a shown command line (quotes kept)."""
_ASSIGNMENT = re.compile(r"[A-Za-z_][\w.-]*")


def name_words(name: Any) -> list[str]:
    """The words of a name as the secret-name rule reads them (`apiKey_2` -> api, key)."""
    words = [re.sub(r"\d+$", "", w.lower()) for w in _WORD.findall(str(name))]
    words = [w for w in words if w]
    while words and words[-1] in IGNORED_LAST_WORDS:
        words.pop()
    return words


def is_secret_key(name: Any) -> bool:
    """Whether a key, flag, variable or query parameter named `name` holds a secret (the rule
    is in this module's docstring)."""
    words = name_words(name)
    if not words:
        return False
    last, before = words[-1], words[-2] if len(words) > 1 else ""
    if last in SECRET_WORDS:
        return before not in NOT_SECRET_COMPOUNDS.get(last, ())
    return last.endswith(RUN_TOGETHER)


def is_reference(value: Any) -> bool:
    return isinstance(value, str) and _REFERENCE.match(value) is not None


class Slot(NamedTuple):
    """One place that holds a secret (`map_secrets`)."""

    value: str
    """Its text as written (a URL's part percent-encoded, as in the URL)."""
    path: tuple
    """Where the string holding it sits in the data (keys and list indices)."""
    what: str
    """What it is, for messages: "a secret-named key's value", "the value of `--token`"."""
    name: str
    """A name for a variable to hold it (the key, the flag, `URL_USERINFO`, the query key)."""
    reference: bool
    """Whether it is a `$VAR` reference rather than a literal secret."""
    in_url: bool = False
    """Whether it is a part of a URL (where a reference is written `${VAR}`)."""


def map_secrets(data: Any, change: Callable[[Slot], str], path: tuple = ()) -> Any:
    """A copy of `data` (nested dicts and lists) with the text of every secret slot (see the
    module docstring; empty strings hold none) replaced by `change(slot)`."""
    if isinstance(data, dict):
        return {
            k: _under_secret(v, change, (*path, k), str(k))
            if is_secret_key(k)
            else map_secrets(v, change, (*path, k))
            for k, v in data.items()
        }
    if isinstance(data, list | tuple):
        return _map_list(list(data), change, path)
    if isinstance(data, str):
        return map_url_secrets(
            data, lambda what, name, raw, ref: change(Slot(raw, path, what, name, ref, in_url=True))
        )
    return data


def _under_secret(value: Any, change: Callable[[Slot], str], path: tuple, name: str) -> Any:
    if isinstance(value, str):
        if not value:
            return value
        return change(Slot(value, path, "a secret-named key's value", name, is_reference(value)))
    if isinstance(value, dict):  # a workflow's `api_key: {static: sk-...}`
        return {
            k: _under_secret(v, change, (*path, k), name if k == "static" else str(k))
            if k == "static" or is_secret_key(k)
            else map_secrets(v, change, (*path, k))
            for k, v in value.items()
        }
    return map_secrets(value, change, path)


def _map_list(items: list, change: Callable[[Slot], str], path: tuple) -> list:
    out, value_of = [], None  # value_of: the secret flag whose value this item is
    for index, item in enumerate(items):
        where = (*path, index)
        if value_of is not None and isinstance(item, str) and item and not item.startswith("--"):
            out.append(
                change(
                    Slot(
                        item,
                        where,
                        f"the value of `{value_of}`",
                        value_of.lstrip("-"),
                        is_reference(item),
                    )
                )
            )
            value_of = None
            continue
        value_of = None
        flag, eq, given = item.partition("=") if isinstance(item, str) else ("", "", "")
        if flag.startswith("-") and is_secret_key(flag.lstrip("-")):
            if not eq:
                value_of = flag  # `--api-key VALUE`: the next item
            elif given:
                slot = Slot(
                    given, where, f"the value of `{flag}`", flag.lstrip("-"), is_reference(given)
                )
                out.append(f"{flag}={change(slot)}")
                continue
        out.append(map_secrets(item, change, where))
    return out


def map_url_secrets(text: str, change: Callable[[str, str, str, bool], str]) -> str:
    """`text` with the secret parts of each URL in it (its user info, secret-named query and
    fragment values) replaced by `change(what, name, raw text, is a reference)`; a string that
    is one URL is read whole, so that user info may hold any character a URL allows."""
    if "://" not in text:
        return text
    if _WHOLE_URL.fullmatch(text):
        return _map_url(text, change)
    pieces, done = [], 0
    for start, end in urls_in_text(text):
        pieces += [text[done:start], _map_url(text[start:end], change)]
        done = end
    return "".join(pieces) + text[done:]


def urls_in_text(text: str) -> Iterator[tuple[int, int]]:
    """(start, end) of each URL in free text, as URL_IN_TEXT finds them, in one pass: the
    regex retried its scheme from every word start of a long run (`a.a.a...`), quadratic."""
    pos = 0
    while (sep := text.find("://", pos)) >= 0:
        start = _scheme_start(text, sep, pos)
        end = sep + 3
        while end < len(text) and text[end] not in _URL_STOP and not text[end].isspace():
            end += 1
        while end > sep + 3 and text[end - 1] in _URL_TRAILING:
            end -= 1
        if start is None or end == sep + 3:
            pos = sep + 1
            continue
        yield start, end
        pos = end


def _scheme_start(text: str, sep: int, pos: int) -> int | None:
    """Where the scheme before `text[sep:]` ("://") starts: the first letter at a word's start
    in the run of scheme characters before `sep` (not before `pos`); None if there is none."""
    first = sep
    while first > pos and text[first - 1] in _SCHEME_CHARS:
        first -= 1
    for start in range(first, sep):
        before = text[start - 1] if start else " "
        if text[start].isascii() and text[start].isalpha() and not _is_word_char(before):
            return start
    return None


def _is_word_char(char: str) -> bool:
    return char.isalnum() or char == "_"


def _map_url(url: str, change: Callable[[str, str, str, bool], str]) -> str:
    slashed = _SLASHED_USERINFO.fullmatch(url)
    if slashed is not None:
        scheme, userinfo, rest = slashed.groups()
        reference = _USERINFO_REFERENCE.match(userinfo) is not None
        userinfo = change(
            "its user info (user:password@) of a URL", "URL_USERINFO", userinfo, reference
        )
        mapped = _map_url(f"{scheme}//{rest}", change)
        return f"{scheme}//{userinfo}@{mapped[len(scheme) + 2 :]}"
    match = _URL_PARTS.fullmatch(url)
    if match is None:
        return url
    scheme, authority, rest, query, fragment = match.groups()
    userinfo, at, host = authority.rpartition("@")
    if at and userinfo:
        reference = _USERINFO_REFERENCE.match(userinfo) is not None
        userinfo = change(
            "its user info (user:password@) of a URL", "URL_USERINFO", userinfo, reference
        )
    url = f"{scheme}//{userinfo}{at}{host}{rest}"
    if query is not None:
        url += "?" + _map_parameters(query, change)
    if fragment is not None:
        url += "#" + (_map_parameters(fragment, change) if "=" in fragment else fragment)
    return url


def _map_parameters(text: str, change: Callable[[str, str, str, bool], str]) -> str:
    pieces = []
    for piece in text.split("&"):
        key, eq, value = piece.partition("=")
        name = unquote_plus(key)
        if eq and value and is_secret_key(name):
            value = change(f"its query value `{name}` of a URL", name, value, is_reference(value))
        pieces.append(f"{key}{eq}{value}")
    return "&".join(pieces)


def _hide(slot: Slot) -> str:
    return slot.value if slot.reference else REDACTED


def redact(data: Any) -> Any:
    """A copy of `data` with every literal secret replaced by `***` (references kept)."""
    return map_secrets(data, _hide)


def secret_leaves(data: Any) -> Iterator[tuple[tuple, str]]:
    """(path, value) of every literal secret in nested dicts and lists (a URL's secret parts
    as written in it)."""
    found: list[tuple[tuple, str]] = []

    def collect(slot: Slot) -> str:
        if not slot.reference:
            found.append((slot.path, slot.value))
        return slot.value

    map_secrets(data, collect)
    return iter(found)


def redact_url(url: str) -> str:
    """`url` with its user info and secret-named query and fragment values shown as `***`."""
    return _map_url(url, lambda what, name, raw, ref: raw if ref else REDACTED)


def redact_urls(text: str) -> str:
    """`text` (an error message, a log line) with every URL in it redacted (`redact_url`)."""
    return map_url_secrets(text, lambda what, name, raw, ref: raw if ref else REDACTED)


def redact_command(text: str) -> str:
    """A command line to show (a process's, a server's): the value of each secret-named flag
    (`--api-key V`, `--token=V`; the next word unless it is a `--flag`) or assignment
    (`HF_TOKEN=V`), and each URL's secrets, as `***`; `$VAR` references stay."""

    def hidden(value: str) -> str:
        return value if is_reference(value.strip("'\"")) else REDACTED

    text = redact_urls(text)
    out, end, flag = [], 0, None  # flag: the secret flag whose value the next word is
    for match in _COMMAND_WORD.finditer(text):
        word = match.group(0)
        name, eq, value = word.partition("=")
        if flag is not None and not word.startswith("--"):
            word, flag = hidden(word), None
        elif name.startswith("-") and is_secret_key(name.lstrip("-")):
            word, flag = (f"{name}={hidden(value)}", None) if eq else (word, name)
        else:
            flag = None
            if eq and value and _ASSIGNMENT.fullmatch(name) and is_secret_key(name):
                word = f"{name}={hidden(value)}"
        out.append(text[end : match.start()] + word)
        end = match.end()
    return "".join(out) + text[end:]


def resolve(data: Any, where: str, env: dict[str, str] | None = None) -> Any:
    """A copy of `data` with the `$VAR` references in secret slots (a secret-named key's value,
    a URL's user info or secret query value, a secret flag's value) replaced by their values
    from the environment (or `.env`); a variable that is not set is a ConfigError naming it."""

    def one(slot: Slot) -> str:
        if not slot.reference:
            return slot.value
        return _substitute(slot, where, {**dotenv(), **os.environ} if env is None else env)

    return map_secrets(data, one)


def _substitute(slot: Slot, where: str, env: dict[str, str]) -> str:
    def value_of(match: re.Match) -> str:
        name = match.group(1) or match.group(2)
        if name not in env:
            place = where + "".join(f"[{p}]" if isinstance(p, int) else f".{p}" for p in slot.path)
            raise ConfigError(
                f"{place} = {slot.value!r}: ${name} is not set: export it or put it in .env"
            )
        return env[name]

    return _ANY_REFERENCE.sub(value_of, slot.value)


def dotenv(path: str = ".env") -> dict[str, str]:
    """The variables `.env` in the working folder sets (never logged; rl_files.env_file reads
    it); a file that cannot be read, is not UTF-8 or has a bad line is a ConfigError naming it
    and the line (its contents never quoted)."""
    from rl_files.env_file import DotenvError, read_dotenv

    try:
        return read_dotenv(path)
    except DotenvError as err:
        raise ConfigError(str(err)) from None


def scrub(text: str, data: Any) -> str:
    """`text` with every secret value found in `data` replaced by `***` (for error messages
    that quote what a library said about its arguments)."""
    for _, value in secret_leaves(data):
        for shown in dict.fromkeys((value, unquote(value))):
            text = text.replace(shown, REDACTED)
    return text


_TEXT_NAME = re.compile(r"[A-Za-z_][\w.-]*")
"""A name in free text: a word that may hold `_`, `.` and `-` (`OPENAI_API_KEY`, `X-Api-Key`)."""
_TEXT_REFERENCE = re.compile(r"\$\{\w+\}|\$\w+")
_VALUE_STOP = frozenset("'\"`,;&<>)]}")
AUTH_SCHEMES = {"bearer", "basic", "token", "digest", "negotiate", "ntlm", "apikey"}
"""HTTP authorization schemes: in `Authorization: Bearer K` the word after one is the secret."""


def redact_text(text: str) -> str:
    """Free text (a log line, a library's error message) with every secret it shows as `***`:
    each URL's secrets (`redact_urls`); the value of a secret-named flag (`--wandb-api-key K`,
    `--api-key=K`; the next word unless it is a `--flag`); the value of each assignment or
    header whose name is a secret's (`is_secret_key`: `api_key=K`, `OPENAI_API_KEY=K`,
    `X-Api-Key: K`, `"token": "K"`, `password = K`), after the scheme in `Authorization: Bearer
    K` / `Basic K`; and the word after a lone `Bearer`. A value is one word, or a quoted string
    whole; `$VAR` references stay. One pass over the text (linear on any input: no pattern here
    can match one text two ways)."""
    text = redact_urls(text)
    pieces, done, pos = [], 0, 0
    while (name := _TEXT_NAME.search(text, pos)) is not None:
        span = _secret_value(text, name)
        if span is None:
            pos = name.end()
            continue
        start, end = span
        pieces += [text[done:start], REDACTED]
        done = pos = end
    return "".join(pieces) + text[done:] if pieces else text


def _secret_value(text: str, name: re.Match) -> tuple[int, int] | None:
    """The span of the secret the name `name` introduces in `text` (a flag's, an assignment's
    or a header's value, or the word after `Bearer`); None if it introduces none."""
    start, end = name.span()
    quote = text[start - 1] if start and text[start - 1] in "'\"" else ""
    after = end + 1 if quote and text.startswith(quote, end) else end
    gap = _skip_blanks(text, after)
    is_flag = text[max(0, start - 2) : start].endswith("-")
    if gap < len(text) and text[gap] in "=:" and not text.startswith("//", gap + 1):
        if not is_secret_key(name.group(0)):
            return None
        return _value_span(text, _skip_blanks(text, gap + 1), after_scheme=True)
    if gap > after and name.group(0).lower() == "bearer":
        return _value_span(text, gap, after_scheme=False)
    if gap > after and is_flag and not text.startswith("--", gap):
        return _value_span(text, gap, after_scheme=False) if is_secret_key(name.group(0)) else None
    return None


def _skip_blanks(text: str, pos: int) -> int:
    while pos < len(text) and text[pos] in " \t":
        pos += 1
    return pos


def _value_span(text: str, start: int, after_scheme: bool) -> tuple[int, int] | None:
    """The span of the value starting at `start` to hide: a quoted string's contents, or one
    word (with `after_scheme`, the word after an authorization scheme); None where there is
    none or it is a `$VAR` reference."""
    if start >= len(text) or text[start] in "\r\n":
        return None
    if text[start] in "'\"":
        close = text.find(text[start], start + 1)
        line_end = text.find("\n", start + 1)
        ends = [i for i in (close, line_end) if i >= 0]
        end = min(ends) if ends else len(text)
        inner = text[start + 1 : end]
        return None if not inner or is_reference(inner) else (start + 1, end)
    end = _word_end(text, start)
    word = text[start:end]
    if after_scheme and word.lower() in AUTH_SCHEMES:
        following = _skip_blanks(text, end)
        if following > end:
            return _value_span(text, following, after_scheme=False)
    reference = _TEXT_REFERENCE.match(text, start)
    if reference and (reference.end() == len(text) or text[reference.end()].isspace()):
        return None
    return (start, end) if end > start else None


def _word_end(text: str, start: int) -> int:
    end = start
    while end < len(text) and not text[end].isspace() and text[end] not in _VALUE_STOP:
        end += 1
    return end


MESSAGE_CHARS = 4000
"""The most of one error message printed or written: a value a user or a file gave (a 1 MiB key
name, a whole line) is cut in the middle, never quoted whole."""


def redact_message(text: str, given: Any = None, max_chars: int = MESSAGE_CHARS) -> str:
    """An error message as it may be printed or written: every secret of the user's input
    `given` (a value or nested data, as `scrub` reads it) hidden wherever the message repeats
    it, a library's rewriting of it included (datasets quotes `https://u:pw@h` as
    `/cwd/https:/u:pw@h`); then every secret free text shows (`redact_text`); then at most
    `max_chars` characters, cut in the middle."""
    if given is not None:
        text = scrub(text, given)
    text = redact_text(text)
    if len(text) > max_chars:
        half = max_chars // 2
        text = f"{text[:half]} ...[{len(text) - 2 * half:,} characters left out]... {text[-half:]}"
    return text
