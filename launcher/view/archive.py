"""A run's rollouts and evaluations as pages show them, bounded whatever the files hold.

Rollouts: `samples/step_<n>.parquet`, one step at a time. The format, its version check and the
bounded reading are rlcore.contracts.samples_store's (the one reader): this module opens the file
through rlcore.files.readback, asks the reader for the row columns of a step (once per change of its
file) and for the texts and token lists of the rows a page shows, and cuts each value in Arrow
before it becomes Python (texts at MAX_TEXT_CHARS a message and MAX_PARSE_BYTES a stored value,
token lists at MAX_TOKENS a rollout; `text_page` reads the rest of a stored value, TEXT_PAGE_BYTES
at a time, and `token_start` pages through the tokens). A file of another format is a page saying
so; a column the file lacks (or holds with a foreign type) is shown empty and named on the page.
Evaluations: `step_<n>/{summary.json,results.jsonl}` under a run's `evals/` or an `evals` output
folder, or `summary.json` and `results.jsonl` directly in an `evals` output folder (one
evaluation, shown as step "-"). results.jsonl is indexed once per change (where each line
starts, its env, whether it failed), and a page parses only its own lines.
Every file is opened through rlcore.files.readback; what cannot be read is Unreadable (a page with
422), never a traceback."""

import codecs
import json
import math
import os
import re
from array import array
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

from launcher.view import safe
from launcher.view.curves import is_number
from rlcore.contracts import samples_store
from rlcore.contracts.samples_store import SamplesError
from rlcore.files import readback
from rlcore.files.readback import KIB, MIB, Bound, Damaged

SAMPLES = samples_store.SAMPLES_DIR
STEP_DIR = re.compile(r"^step_(\d+)$")
ROW_COLUMNS = ("env", *samples_store.SCALAR_COLUMNS)
"""The columns a step's listing reads for every row (texts and tokens only for a page's rows)."""
TOKEN_COLUMNS = samples_store.TOKEN_COLUMNS
GROUPS_PER_PAGE = 8
RESULTS_PER_PAGE = 50
MAX_TEXT_CHARS = 20_000
"""A message's text (and a tool call's arguments, an error) is shown up to this many characters;
the page says how many more there are and links to the stored value (`text_page`)."""
MAX_PARSE_BYTES = 256 * KIB
"""A stored prompt or completion up to this size is read as messages; a longer one is shown as
its first MAX_TEXT_CHARS characters of text."""
TEXT_PAGE_BYTES = 64 * KIB
"""How much of a stored value one page of `text_page` shows."""
MAX_TOKENS = 2_000
"""Tokens shown per rollout; `token_start` pages through the rest."""
MAX_TOKEN_BYTES = 256
MAX_NAME_CHARS = 200
CACHED_STEPS = 4
RESULTS = Bound("an eval's results.jsonl", 256 * MIB)
RESULT_LINE = Bound("a line of results.jsonl", 16 * MIB)
EVAL_SUMMARY = Bound("an eval summary", MIB)
SINGLE = -1
"""The step of an `evals` folder's one evaluation (no `step_<n>/`)."""


class Unreadable(Exception):
    """A file of the run that exists but cannot be read as what it should be."""


def sample_steps(run) -> list[int]:
    found = (samples_store.STEP_FILE.match(name) for name in run.names(SAMPLES))
    return sorted(int(m.group(1)) for m in found if m)


# -- reading a step's archive (through rlcore.contracts.samples_store)
# -------------------------------------
@contextmanager
def opened_step(run, step: int) -> Iterator[Any]:
    """The step's archive, opened by the one reader (samples_store.open_step: its format
    checked) over a descriptor proved a regular file inside the run (rlcore.files.readback), within
    readback.ARCHIVE's size; Unreadable otherwise, and for any error the reading raises."""
    name = f"{SAMPLES}/step_{step}.parquet"
    try:
        path = run.real(SAMPLES, f"step_{step}.parquet")
    except Damaged as err:
        raise Unreadable(str(err)) from None
    if path is None:
        raise safe.Missing(f"no rollouts archived for step {step}")
    try:
        fd = readback.open_file(path, run.root)
    except (Damaged, FileNotFoundError) as err:
        raise Unreadable(f"{name}: {getattr(err, 'why', 'gone')}") from None
    with os.fdopen(fd, "rb") as f:
        size = os.fstat(fd).st_size
        if size > readback.ARCHIVE.max_bytes:
            raise Unreadable(
                f"{name}: {size:,} bytes, over the {readback.ARCHIVE.max_bytes:,}-"
                "byte bound for an archive file"
            )
        try:
            yield samples_store.open_step(f, name)
        except (Unreadable, safe.Missing):
            raise
        except SamplesError as err:
            raise Unreadable(str(err)) from None
        except Exception as err:  # pyarrow raises many kinds for a torn or forged file
            raise unreadable(name, err) from None


def unreadable(name: str, err: Exception) -> Unreadable:
    why = readback.shown(str(err), 200)
    kind = err.__class__.__name__
    return Unreadable(f"{name} is not a readable rollout archive step ({kind}: {why})")


def step_rows(run, step: int) -> tuple[list[dict], dict[str, str]]:
    """The row columns of every rollout of a step (ROW_COLUMNS, and `row`: its index in the
    file), and the format's columns the file lacks (samples_store.column_problems), read once
    per change of the file (cached by its identity)."""
    try:
        key = (step, run.identity(SAMPLES, f"step_{step}.parquet"))
    except Damaged as err:
        raise Unreadable(str(err)) from None
    with run.lock:
        cached = run.step_cache.get(key)
        if cached is None:
            with opened_step(run, step) as parquet:
                cached = (row_values(parquet, step), samples_store.column_problems(parquet))
            run.step_cache[key] = cached
            while len(run.step_cache) > CACHED_STEPS:
                run.step_cache.popitem(last=False)
    return cached


def row_values(parquet, step: int) -> list[dict]:
    """ROW_COLUMNS of every row as Python values (env as printable names, numbers JSON-safe)."""
    columns = samples_store.read_scalars(parquet, ROW_COLUMNS, f"step {step}")
    values: dict[str, list | None] = {}
    for name, column in columns.items():
        if column is None:
            values[name] = None
        elif name == "env":
            values[name] = env_names(column)
        else:
            values[name] = readback.json_safe(column.to_pylist())
    return [
        {"row": i, **{n: (v[i] if v is not None else None) for n, v in values.items()}}
        for i in range(parquet.metadata.num_rows)
    ]


def env_names(column) -> list:
    """The env column (bytes, samples_store.conform) as printable names, each cut at
    MAX_NAME_CHARS in Arrow."""
    import pyarrow.compute as pc

    heads = pc.binary_slice(column, 0, 4 * MAX_NAME_CHARS).to_pylist()
    return [None if h is None else readback.shown(h, MAX_NAME_CHARS) for h in heads]


def cut_texts(name: str, column) -> list:
    """A text column as (text, size in bytes): whole up to MAX_PARSE_BYTES, else its first
    MAX_TEXT_CHARS characters' worth."""
    import pyarrow.compute as pc

    if column is None:
        return _nones()
    sizes = pc.binary_length(column).to_pylist()
    heads = pc.binary_slice(column, 0, MAX_PARSE_BYTES).to_pylist()
    out: list[tuple[str, int] | None] = []
    for head, size in zip(heads, sizes, strict=True):
        if head is None:
            out.append(None)
        elif size > MAX_PARSE_BYTES:
            out.append((readback.decode(head[: 4 * MAX_TEXT_CHARS])[:MAX_TEXT_CHARS], size))
        else:
            out.append((readback.decode(head), size))
    return out


def cut_tokens(token_start: int):
    """A token column's cut: MAX_TOKENS from `token_start`, each text at most MAX_TOKEN_BYTES;
    the text column gives (texts, the list's whole length)."""

    def cut(name: str, column) -> list:
        import pyarrow.compute as pc

        if column is None:
            return _nones()
        sliced = pc.list_slice(column, token_start, token_start + MAX_TOKENS)
        if name != "token_text":
            return [readback.json_safe(v) for v in sliced.to_pylist()]
        lengths = pc.list_value_length(column).to_pylist()
        flat = pc.binary_slice(pc.list_flatten(sliced), 0, MAX_TOKEN_BYTES).to_pylist()
        offsets = sliced.offsets.to_pylist()
        out = []
        for i, length in enumerate(lengths):
            first, last = offsets[i] - offsets[0], offsets[i + 1] - offsets[0]
            texts = [readback.decode(v or b"") for v in flat[first:last]]
            out.append(None if length is None else (texts, length))
        return out

    return cut


class _Nones(list):
    """A column that is missing: None at every row."""

    def __getitem__(self, index):
        return None


def _nones() -> list:
    return _Nones()


# -- a page of groups ----------------------------------------------------------------------------
def groups_page(
    run,
    step: int,
    env: str = "",
    low=None,
    high=None,
    page: int = 0,
    with_tokens: bool = False,
    token_start: int = 0,
) -> dict:
    """One page of a step's groups (GROUPS_PER_PAGE), side by side: every member's prompt,
    turns, reward, advantage, token count and cut-off (`with_tokens`: MAX_TOKENS of its tokens
    from `token_start`, each with its logprob); only groups with a member in `env` and in the
    reward range [low, high] are listed. `missing`: the format's columns the file lacks or
    holds with a foreign type (shown empty), for the page to name."""
    rows, problems = step_rows(run, step)
    envs = sorted({str(r["env"]) for r in rows})
    groups: dict[tuple, list[dict]] = {}
    for row in rows:
        groups.setdefault((row["env"], row["group"]), []).append(row)
    keys = [k for k, members in groups.items() if wanted(members, env, low, high)]
    keys.sort(key=lambda k: (str(k[0]), k[1] if isinstance(k[1], int) else 0))
    num_pages = max(1, -(-len(keys) // GROUPS_PER_PAGE))
    page = min(max(page, 0), num_pages - 1)
    shown = [
        sorted(groups[k], key=lambda r: r["member"] if isinstance(r["member"], int) else 0)
        for k in keys[page * GROUPS_PER_PAGE : (page + 1) * GROUPS_PER_PAGE]
    ]
    texts, tokens = page_values(run, step, shown, with_tokens, max(0, token_start))
    cards = []
    for members in shown:
        first = members[0]
        prompt = stored_turns(texts[first["row"]].get("prompt"), link(step, first["row"], "prompt"))
        views = [member_view(m, step, texts, tokens) for m in members]
        cards.append(
            {"env": first["env"], "group": first["group"], "prompt": prompt, "members": views}
        )
    return {
        "step": step,
        "envs": envs,
        "groups": cards,
        "page": page,
        "num_pages": num_pages,
        "num_groups": len(keys),
        "num_rows": len(rows),
        "token_start": token_start,
        "max_tokens": MAX_TOKENS,
        "missing": samples_store.problems_text(problems),
    }


def page_values(run, step: int, shown: list[list[dict]], with_tokens: bool, token_start: int):
    """The texts (and tokens) of the rows a page shows, read from the step's file."""
    rows = {m["row"] for members in shown for m in members}
    firsts = {members[0]["row"] for members in shown}
    read = samples_store.read_rows
    with opened_step(run, step) as parquet:
        texts = read(parquet, rows, ("completion", "reward_parts", "error"), cut_texts)
        for row, values in read(parquet, firsts, ("prompt",), cut_texts).items():
            texts[row]["prompt"] = values["prompt"]
        tokens = read(parquet, rows, TOKEN_COLUMNS, cut_tokens(token_start)) if with_tokens else {}
    return texts, tokens


def link(step: int, row: int, part: str, source: str = "rollouts") -> str:
    return f"source={source}&step={step}&row={row}&part={part}"


def wanted(members: list[dict], env: str, low, high) -> bool:
    if env and str(members[0]["env"]) != env:
        return False
    rewards = [m["reward"] for m in members if is_number(m["reward"])]
    if low is not None and not any(r >= low for r in rewards):
        return False
    return high is None or any(r <= high for r in rewards)


def member_view(row: dict, step: int, texts: dict, tokens: dict) -> dict:
    text, found = texts.get(row["row"], {}), tokens.get(row["row"], {})
    token_text: tuple[list, int | None] = found.get("token_text") or ([], None)
    texts_shown, num_tokens = token_text
    logprobs = found.get("token_logprob") or []
    mask = found.get("token_mask") or [True] * len(texts_shown)
    parts = loads(text["reward_parts"][0]) if text.get("reward_parts") else None
    error = text["error"][0] if text.get("error") else None
    return {
        "row": row["row"],
        "member": row["member"],
        "reward": row["reward"],
        "advantage": row["advantage"],
        "kept": row["kept"],
        "parts": readback.json_safe(parts) if isinstance(parts, dict) else {},
        "prompt_tokens": row["num_prompt_tokens"],
        "completion_tokens": row["num_completion_tokens"],
        "truncated": bool(row["is_truncated"]),
        "error": cut(error)[0] if error else None,
        "turns": stored_turns(text.get("completion"), link(step, row["row"], "completion")),
        "tokens": [
            {"t": t, "lp": lp, "policy": bool(m), "shade": shade(lp) if m else None}
            for t, lp, m in zip(texts_shown, logprobs, mask, strict=False)
        ],
        "tokens_html": tokens_html(texts_shown, logprobs, mask),
        "num_tokens": num_tokens,
    }


def tokens_html(texts: list, logprobs: list, mask: list) -> str:
    """A completion's tokens as spans, each policy token shaded by its logprob (built here:
    a template loop over a page's tens of thousands of tokens takes most of a second)."""
    spans = []
    for text, logprob, policy in zip(texts, logprobs, mask, strict=False):
        alpha = shade(logprob) if policy else None
        body = html_escape(str(text))
        if alpha is None:
            spans.append(f'<span class="tok{"" if policy else " env-tok"}">{body}</span>')
        else:
            spans.append(
                f'<span class="tok" style="background: rgba(230, 80, 60, {alpha})" '
                f'title="{logprob:.3f}">{body}</span>'
            )
    return "".join(spans)


def html_escape(text: str) -> str:
    import html

    return html.escape(readback.clean_text(text))


def shade(logprob) -> float | None:
    """How strongly a policy token is shaded: 0 for a certain one, 1 for an unlikely one
    (1 - its probability)."""
    if not is_number(logprob):
        return None
    return round(1 - math.exp(min(logprob, 0.0)), 2)


# -- messages ------------------------------------------------------------------------------------
MAX_MESSAGES = 200
"""Messages (and tool calls of one message) shown per stored value; the rest is in the stored
text (`text_page`)."""


def loads(text: Any) -> Any:
    """A stored JSON text as data (depth-bounded, rlcore.files.readback); the text itself when it is
    not JSON."""
    if not isinstance(text, str):
        return text
    try:
        return readback.parse_json(text, "a stored value")
    except Damaged:
        return text


def stored_turns(stored: tuple[str, int] | None, where: str) -> list[dict]:
    """A stored prompt or completion (its text cut at MAX_PARSE_BYTES, its size) as turns; one
    too long to read as messages is its first MAX_TEXT_CHARS characters, as text."""
    if stored is None:
        return []
    text, size = stored
    if size > MAX_PARSE_BYTES:
        more = f"{size - len(text.encode('utf-8', 'replace')):,} more bytes"
        return [{"role": "text", "content": text, "tool_calls": [], "more": more, "link": where}]
    return turns(loads(text), where)


def turns(value: Any, where: str = "") -> list[dict]:
    """Messages to show, one per turn: role, text, tool calls (name and arguments), each text
    cut at MAX_TEXT_CHARS (`more` says what is left, `link` where the stored value is read).
    `value` is a stored value: messages as JSON text, or already parsed."""
    value = loads(value)
    if value is None:
        return []
    if not isinstance(value, list):
        return [message("text", value, [], where)]
    shown = [message_of(item, where) for item in value[:MAX_MESSAGES]]
    if len(value) > MAX_MESSAGES:
        shown.append(
            {
                "role": "text",
                "content": "",
                "tool_calls": [],
                "link": where,
                "more": f"{len(value) - MAX_MESSAGES:,} more messages",
            }
        )
    return shown


def message_of(item: Any, where: str) -> dict:
    if not isinstance(item, dict):
        return message("text", item, [], where)
    calls = []
    raw_calls = item.get("tool_calls")
    for call in raw_calls[:MAX_MESSAGES] if isinstance(raw_calls, list) else []:
        function = call.get("function", call) if isinstance(call, dict) else {}
        function = function if isinstance(function, dict) else {}
        calls.append(
            {
                "name": cut(str(function.get("name", "?")))[0],
                "arguments": cut(text_of(function.get("arguments", "")))[0],
            }
        )
    return message(item.get("role", "?"), item.get("content", ""), calls, where)


def message(role: Any, content: Any, calls: list, where: str) -> dict:
    text, more = cut(text_of(content))
    return {
        "role": readback.shown(str(role), MAX_NAME_CHARS),
        "content": text,
        "tool_calls": calls,
        "more": f"{more:,} more characters" if more else "",
        "link": where,
    }


def cut(text: str) -> tuple[str, int]:
    """`text` cut at MAX_TEXT_CHARS (lone surrogates repaired), and how many characters were
    left out."""
    return readback.clean_text(text[:MAX_TEXT_CHARS]), max(0, len(text) - MAX_TEXT_CHARS)


def text_of(content: Any) -> str:
    if isinstance(content, str):
        return content
    if isinstance(content, list):  # content parts
        parts, size = [], 0
        for part in content:
            text = part.get("text", "") if isinstance(part, dict) else part
            parts.append(text if isinstance(text, str) else json.dumps(readback.json_safe(text)))
            size += len(parts[-1])
            if size > MAX_TEXT_CHARS:
                break
        return "".join(parts)
    return json.dumps(readback.json_safe(content))


# -- a stored value, a page at a time --------------------------------------------------------------
TEXT_PARTS = tuple(name for name in samples_store.TEXT_COLUMNS if name != "env")
"""A stored value `text_page` reads: a rollout's text column, an evaluation result's field."""


def text_page(run, source: str, step: int, row: int, part: str, start: int = 0) -> dict:
    """TEXT_PAGE_BYTES of one stored value from byte `start`: a rollout's text column (`row`:
    its index in the step's file) or an evaluation result's field (`row`: where its line
    starts in results.jsonl); `next` is where the following page starts (None at the end)."""
    if part not in TEXT_PARTS:
        raise safe.Refused(f"part must be one of {', '.join(TEXT_PARTS)}")
    start = max(0, start)
    if source == "evals":
        data, size = eval_value(run, step, row, part, start)
    elif source == "rollouts":
        data, size = rollout_value(run, step, row, part, start)
    else:
        raise safe.Refused("source must be rollouts or evals")
    text, used = window(data)
    end = start + used
    return {
        "source": source,
        "step": step,
        "row": row,
        "part": part,
        "start": start,
        "text": text,
        "size": size,
        "next": end if end < size else None,
    }


def rollout_value(run, step: int, row: int, part: str, start: int) -> tuple[bytes, int]:
    import pyarrow.compute as pc

    def piece(name: str, column) -> list:
        if column is None:
            return _nones()
        sizes = pc.binary_length(column).to_pylist()
        data = pc.binary_slice(column, start, start + TEXT_PAGE_BYTES).to_pylist()
        return [None if d is None else (d, s) for d, s in zip(data, sizes, strict=True)]

    with opened_step(run, step) as parquet:
        if not 0 <= row < parquet.metadata.num_rows:
            raise safe.Missing(f"step {step} has no row {row}")
        found = samples_store.read_rows(parquet, {row}, (part,), piece)[row][part]
    return found if found is not None else (b"", 0)


def window(data: bytes) -> tuple[str, int]:
    """`data` (a piece of UTF-8 cut anywhere) as text, and how many of its bytes that text
    covers: leading continuation bytes skipped, a character cut at the end left for the next
    page."""
    lead = 0
    while lead < min(3, len(data)) and 0x80 <= data[lead] < 0xC0:
        lead += 1
    decoder = codecs.getincrementaldecoder("utf-8")("replace")
    text = decoder.decode(data[lead:], final=False)
    pending = decoder.getstate()[0]
    used = len(data) - len(pending)
    return text, used if used > 0 else len(data)


# -- evaluations --------------------------------------------------------------------------------
def eval_root(run) -> Path | None:
    """Where a run's evaluations are: `evals/` in a training run, the folder itself for an
    `evals` output folder."""
    if run.kind() == "eval":
        return run.root
    return run.file_dir("evals")


def eval_folder(run) -> tuple[str, ...]:
    return () if run.kind() == "eval" else ("evals",)


def eval_steps(run) -> list[int]:
    base = eval_folder(run)
    if eval_root(run) is None:
        return []
    found = (STEP_DIR.match(name) for name in run.names(*base))
    steps = sorted(int(m.group(1)) for m in found if m and run.file_dir(*base, m.group(0)))
    if run.kind() == "eval" and run.file("summary.json"):
        steps.insert(0, SINGLE)
    return steps


def step_parts(run, step: int) -> tuple[str, ...]:
    return eval_folder(run) if step == SINGLE else (*eval_folder(run), f"step_{step}")


def eval_summary(run, step: int) -> dict[str, dict]:
    """An evaluation's summary.json (orchestrator/evals/summary.py's format: per environment
    reward, pass@k, metrics, tokens); Unreadable when torn or missing."""
    parts = (*step_parts(run, step), "summary.json")
    try:
        summary = run.read(parts, lambda path: readback.read_json(path, EVAL_SUMMARY, run.root))
    except Damaged as err:
        raise Unreadable(f"step {step}: {err}") from None
    if summary is None:
        raise Unreadable(f"step {step}: no summary.json (the evaluation is not complete)")
    if not isinstance(summary, dict):
        raise Unreadable(f"step {step}: summary.json is not a JSON object")
    summary = readback.json_safe(summary)
    return {readback.shown(k, MAX_NAME_CHARS): v for k, v in summary.items() if isinstance(v, dict)}


def eval_table(run) -> list[dict]:
    """Per evaluated step and environment: reward and every pass@k."""
    rows = []
    for step in eval_steps(run):
        try:
            summary = eval_summary(run, step)
        except Unreadable as err:
            rows.append({"step": step, "env": "", "error": str(err)})
            continue
        for env, figures in summary.items():
            passes = sorted(
                (int(k[5:]), v)
                for k, v in figures.items()
                if k.startswith("pass@") and k[5:].isascii() and k[5:].isdigit() and len(k) < 12
            )
            rows.append(
                {
                    "step": step,
                    "env": env,
                    "reward": figures.get("reward"),
                    "num_rollouts": figures.get("num_rollouts"),
                    "passes": passes,
                }
            )
    return rows


class ResultsIndex:
    """Where each line of a results.jsonl starts and ends, its env and whether it failed (reward
    0 or none): built once per change of the file, a few bytes a line."""

    def __init__(self):
        self.starts, self.ends, self.env_of = array("q"), array("q"), array("l")
        self.failed, self.envs, self.skipped = bytearray(), {}, 0

    def add(self, start: int, line: bytes) -> None:
        try:
            row = readback.parse_json(line, "results.jsonl")
        except Damaged:
            row = None
        if not isinstance(row, dict):
            self.skipped += bool(line.strip())
            return
        env = readback.shown(str(row.get("env")), MAX_NAME_CHARS)
        reward = row.get("reward")
        self.starts.append(start)
        self.ends.append(start + len(line))
        self.env_of.append(self.envs.setdefault(env, len(self.envs)))
        self.failed.append(not (is_number(reward) and reward > 0))


def results_index(run, step: int) -> tuple[Path, ResultsIndex]:
    parts = (*step_parts(run, step), "results.jsonl")
    try:
        path = run.real(*parts)
        key = (step, run.identity(*parts))
    except Damaged as err:
        raise Unreadable(f"step {step}: {err}") from None
    if path is None:
        raise safe.Missing(f"step {step}: no results.jsonl")
    with run.lock:
        index = run.results_cache.get(key)
        if index is None:
            try:
                index = build_index(path, run.root)
            except Damaged as err:
                raise Unreadable(f"step {step}: {err}") from None
            run.results_cache[key] = index
            while len(run.results_cache) > CACHED_STEPS:
                run.results_cache.popitem(last=False)
    return path, index


def build_index(path: Path, root: Path) -> ResultsIndex:
    """Read results.jsonl once, 4 MiB at a time (RESULTS bounds the file, RESULT_LINE a line:
    a longer one is skipped as torn)."""
    index, fd = ResultsIndex(), readback.open_file(path, root)
    try:
        size = os.fstat(fd).st_size
        if size > RESULTS.max_bytes:
            raise Damaged(
                path,
                f"{size:,} bytes, over the {RESULTS.max_bytes:,}-byte bound for {RESULTS.kind}",
            )
        pending, start, offset = b"", 0, 0
        while chunk := readback.read_at_most(fd, 4 * MIB, path):
            offset += len(chunk)
            lines = (pending + chunk).split(b"\n")
            pending = lines.pop()
            for line in lines:
                index.add(start, line)
                start += len(line) + 1
            if len(pending) > RESULT_LINE.max_bytes:
                index.skipped += 1
                start, pending = offset, b""  # the rest of this line is skipped too
            if offset >= RESULTS.max_bytes:
                break
        if pending.strip():
            index.add(start, pending)
    finally:
        os.close(fd)
    return index


def eval_samples(run, step: int, env: str = "", failed: bool = False, page: int = 0) -> dict:
    """One page of an evaluation's results.jsonl rows (RESULTS_PER_PAGE), torn lines skipped."""
    path, index = results_index(run, step)
    env_id = index.envs.get(env, -1)
    chosen = [
        i
        for i in range(len(index.starts))
        if (not env or index.env_of[i] == env_id) and (not failed or index.failed[i])
    ]
    num_pages = max(1, -(-len(chosen) // RESULTS_PER_PAGE))
    page = min(max(page, 0), num_pages - 1)
    samples = []
    for i in chosen[page * RESULTS_PER_PAGE : (page + 1) * RESULTS_PER_PAGE]:
        row = result_row(path, run.root, index.starts[i], index.ends[i])
        samples.append(eval_view(row, step, index.starts[i]))
    return {
        "step": step,
        "envs": sorted(index.envs),
        "page": page,
        "num_pages": num_pages,
        "num_rows": len(chosen),
        "skipped": index.skipped,
        "samples": samples,
    }


def result_row(path: Path, root: Path, start: int, end: int) -> dict:
    bound = Bound(RESULT_LINE.kind, end - start)
    try:
        row = readback.parse_json(readback.read_from(path, start, bound, root), path)
    except Damaged:
        row = None
    return row if isinstance(row, dict) else {"error": "this line changed since it was read"}


def eval_view(row: dict, step: int, start: int) -> dict:
    row = readback.json_safe(row)
    error = row.get("error")
    return {
        "env": row.get("env"),
        "example": row.get("example"),
        "rollout": row.get("rollout"),
        "reward": row.get("reward"),
        "metrics": row.get("metrics") if isinstance(row.get("metrics"), dict) else {},
        "tokens": row.get("completion_tokens"),
        "error": cut(str(error))[0] if error is not None else None,
        "prompt": turns(row.get("prompt"), link(step, start, "prompt", "evals")),
        "turns": turns(row.get("completion"), link(step, start, "completion", "evals")),
    }


def eval_value(run, step: int, row: int, part: str, start: int) -> tuple[bytes, int]:
    """Bytes of one result's `part` (as JSON text unless it is a string) from `start`."""
    path, index = results_index(run, step)
    import bisect

    i = bisect.bisect_left(index.starts, row)
    if i >= len(index.starts) or index.starts[i] != row:
        raise safe.Missing(f"step {step}: no result starts at byte {row}")
    value = result_row(path, run.root, index.starts[i], index.ends[i]).get(part)
    if value is None:
        return b"", 0
    text = value if isinstance(value, str) else json.dumps(readback.json_safe(value))
    data = readback.clean_text(text).encode()
    return data[start : start + TEXT_PAGE_BYTES], len(data)
