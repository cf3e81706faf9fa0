"""A run's rollouts and evaluations as pages read them.

Rollouts: `samples/step_<n>.parquet` (format 1: one row per rollout; see SAMPLE_COLUMNS), one
step at a time, only the columns a view needs, the token columns only for the groups shown.
Evaluations: `step_<n>/{summary.json,results.jsonl}` under a run's `evals/` or an `evals` output
folder, or `summary.json` and `results.jsonl` directly in an `evals` output folder (one
evaluation, shown as step "-"). A file that cannot be read is a clear error, never a traceback."""

import html
import json
import math
import re
from pathlib import Path
from typing import Any

from launcher.view import safe

SAMPLES = "samples"
SAMPLES_FORMAT = "1"
STEP_FILE = re.compile(r"^step_(\d+)\.parquet$")
STEP_DIR = re.compile(r"^step_(\d+)$")
ROW_COLUMNS = ("env", "group", "member", "example_id", "prompt", "completion", "reward",
               "reward_parts", "advantage", "kept", "num_prompt_tokens",
               "num_completion_tokens", "is_truncated", "error", "policy_step")  # fmt: skip
TOKEN_COLUMNS = ("token_text", "token_logprob", "token_mask")
GROUPS_PER_PAGE = 8
RESULTS_PER_PAGE = 50
MAX_RESULTS_BYTES = 512 * 2**20
SINGLE = -1
"""The step of an `evals` folder's one evaluation (no `step_<n>/`)."""


class Unreadable(Exception):
    """A file of the run that exists but cannot be read as what it should be."""


def sample_steps(run) -> list[int]:
    found = (STEP_FILE.match(name) for name in run.names(SAMPLES))
    return sorted(int(m.group(1)) for m in found if m)


def read_step(run, step: int, columns=ROW_COLUMNS) -> list[dict]:
    """The rows of one step's archive, only `columns` (those the file has)."""
    import pyarrow.parquet as pq

    path = run.file(SAMPLES, f"step_{step}.parquet")
    if path is None:
        raise safe.Missing(f"no rollouts archived for step {step}")
    try:
        handle = pq.ParquetFile(path)
        have = set(handle.schema_arrow.names)
        table = handle.read(columns=[c for c in columns if c in have])
    except Exception as err:  # pyarrow raises many kinds for a torn or foreign file
        raise Unreadable(f"{SAMPLES}/step_{step}.parquet is not a readable archive "
                         f"({err.__class__.__name__}: {str(err)[:200]})") from None  # fmt: skip
    return table.to_pylist()


def groups_page(run, step: int, env: str = "", low=None, high=None, page: int = 0,
                with_tokens: bool = False) -> dict:  # fmt: skip
    """One page of a step's groups (GROUPS_PER_PAGE), side by side: every member's prompt,
    turns, reward, advantage, token count and cut-off (`with_tokens`: each token with its
    logprob, read only then); only groups with a member in `env` and in the reward range
    [low, high] are listed."""
    rows = read_step(run, step)
    envs = sorted({str(r.get("env")) for r in rows})
    groups: dict[tuple, list[dict]] = {}
    for row in rows:
        groups.setdefault((row.get("env"), row.get("group")), []).append(row)
    keys = [k for k, members in groups.items() if wanted(members, env, low, high)]
    keys.sort(key=lambda k: (str(k[0]), k[1] if isinstance(k[1], int) else 0))
    num_pages = max(1, -(-len(keys) // GROUPS_PER_PAGE))
    page = min(max(page, 0), num_pages - 1)
    shown = keys[page * GROUPS_PER_PAGE : (page + 1) * GROUPS_PER_PAGE]
    tokens = token_rows(run, step, {k[1] for k in shown}) if with_tokens else {}
    cards = []
    for key in shown:
        members = sorted(groups[key], key=lambda r: r.get("member") or 0)
        cards.append({"env": key[0], "group": key[1], "prompt": turns(members[0].get("prompt")),
                      "members": [member_view(m, tokens) for m in members]})  # fmt: skip
    return {"step": step, "envs": envs, "groups": cards, "page": page, "num_pages": num_pages,
            "num_groups": len(keys), "num_rows": len(rows)}  # fmt: skip


def wanted(members: list[dict], env: str, low, high) -> bool:
    if env and str(members[0].get("env")) != env:
        return False
    rewards = [m.get("reward") for m in members if isinstance(m.get("reward"), int | float)]
    if low is not None and not any(r >= low for r in rewards):
        return False
    return high is None or any(r <= high for r in rewards)


def token_rows(run, step: int, groups: set) -> dict[tuple, dict]:
    """The token columns of the members of `groups` only, by (env, group, member)."""
    rows = read_step(run, step, ("env", "group", "member", *TOKEN_COLUMNS))
    return {(r.get("env"), r.get("group"), r.get("member")): r for r in rows
            if r.get("group") in groups}  # fmt: skip


def member_view(row: dict, tokens: dict) -> dict:
    found = tokens.get((row.get("env"), row.get("group"), row.get("member")), {})
    texts, logprobs = found.get("token_text") or [], found.get("token_logprob") or []
    mask = found.get("token_mask") or [True] * len(texts)
    return {
        "member": row.get("member"), "reward": row.get("reward"), "advantage": row.get("advantage"),
        "kept": row.get("kept"), "parts": loads(row.get("reward_parts")) or {},
        "prompt_tokens": row.get("num_prompt_tokens"),
        "completion_tokens": row.get("num_completion_tokens"),
        "truncated": bool(row.get("is_truncated")), "error": row.get("error"),
        "turns": turns(row.get("completion")),
        "tokens": [{"t": t, "lp": lp, "policy": bool(m), "shade": shade(lp) if m else None}
                   for t, lp, m in zip(texts, logprobs, mask, strict=False)],
        "tokens_html": tokens_html(texts, logprobs, mask),
    }  # fmt: skip


def tokens_html(texts: list, logprobs: list, mask: list) -> str:
    """A completion's tokens as spans, each policy token shaded by its logprob (built here:
    a template loop over a page's tens of thousands of tokens takes most of a second)."""
    spans = []
    for text, logprob, policy in zip(texts, logprobs, mask, strict=False):
        alpha = shade(logprob) if policy else None
        body = html.escape(str(text))
        if alpha is None:
            spans.append(f'<span class="tok{"" if policy else " env-tok"}">{body}</span>')
        else:
            spans.append(f'<span class="tok" style="background: rgba(230, 80, 60, {alpha})" '
                         f'title="{logprob:.3f}">{body}</span>')  # fmt: skip
    return "".join(spans)


def shade(logprob) -> float | None:
    """How strongly a policy token is shaded: 0 for a certain one, 1 for an unlikely one
    (1 - its probability)."""
    if not isinstance(logprob, int | float) or not math.isfinite(logprob):
        return None
    return round(1 - math.exp(min(logprob, 0.0)), 2)


def loads(text: Any) -> Any:
    if not isinstance(text, str):
        return text
    try:
        return json.loads(text)
    except ValueError:
        return text


def turns(text: Any) -> list[dict]:
    """Messages to show, one per turn: role, text, tool calls (name and arguments)."""
    value = loads(text)
    if value is None:
        return []
    if not isinstance(value, list):
        return [{"role": "text", "content": str(value), "tool_calls": []}]
    shown = []
    for message in value:
        if not isinstance(message, dict):
            shown.append({"role": "text", "content": str(message), "tool_calls": []})
            continue
        calls = []
        for call in message.get("tool_calls") or []:
            function = call.get("function", call) if isinstance(call, dict) else {}
            calls.append({"name": str(function.get("name", "?")),
                          "arguments": text_of(function.get("arguments", ""))})  # fmt: skip
        content = text_of(message.get("content", ""))
        shown.append({"role": str(message.get("role", "?")), "content": content,
                      "tool_calls": calls})  # fmt: skip
    return shown


def text_of(content: Any) -> str:
    if isinstance(content, str):
        return content
    if isinstance(content, list):  # content parts
        return "".join(p.get("text", "") if isinstance(p, dict) else str(p) for p in content)
    return json.dumps(content)


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
    found = (STEP_DIR.match(p.name) for p in run.listing(*base) if p.is_dir())
    steps = sorted(int(m.group(1)) for m in found if m)
    if run.kind() == "eval" and run.file("summary.json"):
        steps.insert(0, SINGLE)
    return steps


def step_parts(run, step: int) -> tuple[str, ...]:
    return eval_folder(run) if step == SINGLE else (*eval_folder(run), f"step_{step}")


def eval_summary(run, step: int) -> dict[str, dict]:
    """An evaluation's summary.json (orchestrator/evals/summary.py's format: per environment
    reward, pass@k, metrics, tokens); Unreadable when torn or missing."""
    path = run.file(*step_parts(run, step), "summary.json")
    if path is None:
        raise Unreadable(f"step {step}: no summary.json (the evaluation is not complete)")
    try:
        summary = json.loads(path.read_text())
    except (OSError, ValueError) as err:
        raise Unreadable(f"step {step}: summary.json does not parse ({err})") from None
    if not isinstance(summary, dict):
        raise Unreadable(f"step {step}: summary.json is not a JSON object")
    return {str(k): v for k, v in summary.items() if isinstance(v, dict)}


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
            passes = sorted((int(k[5:]), v) for k, v in figures.items()
                            if k.startswith("pass@") and k[5:].isdigit())  # fmt: skip
            rollouts = figures.get("num_rollouts")
            rows.append({"step": step, "env": env, "reward": figures.get("reward"),
                         "num_rollouts": rollouts, "passes": passes})  # fmt: skip
    return rows


def eval_samples(run, step: int, env: str = "", failed: bool = False, page: int = 0) -> dict:
    """One page of an evaluation's results.jsonl rows (RESULTS_PER_PAGE), torn lines skipped."""
    path = run.file(*step_parts(run, step), "results.jsonl")
    if path is None:
        raise safe.Missing(f"step {step}: no results.jsonl")
    if path.stat().st_size > MAX_RESULTS_BYTES:
        raise Unreadable(f"step {step}: results.jsonl is over {MAX_RESULTS_BYTES >> 20} MiB")
    rows, envs, skipped = [], set(), 0
    with path.open("rb") as f:
        for line in f:
            try:
                row = json.loads(line)
            except ValueError:
                skipped += 1
                continue
            if not isinstance(row, dict):
                continue
            envs.add(str(row.get("env")))
            if (env and str(row.get("env")) != env) or (failed and (row.get("reward") or 0) > 0):
                continue
            rows.append(row)
    num_pages = max(1, -(-len(rows) // RESULTS_PER_PAGE))
    page = min(max(page, 0), num_pages - 1)
    shown = rows[page * RESULTS_PER_PAGE : (page + 1) * RESULTS_PER_PAGE]
    return {"step": step, "envs": sorted(envs), "page": page, "num_pages": num_pages,
            "num_rows": len(rows), "skipped": skipped,
            "samples": [eval_view(r) for r in shown]}  # fmt: skip


def eval_view(row: dict) -> dict:
    return {"env": row.get("env"), "example": row.get("example"), "rollout": row.get("rollout"),
            "reward": row.get("reward"), "metrics": row.get("metrics") or {},
            "tokens": row.get("completion_tokens"), "error": row.get("error"),
            "prompt": turns(row.get("prompt")), "turns": turns(row.get("completion"))}  # fmt: skip
