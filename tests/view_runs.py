"""Run folders for `rl view`'s tests and benchmark, written as the launcher, the orchestrator and
the evals command write them: the `.rl-run` marker, run.json, configs/, logs/, metrics.jsonl,
checkpoints/, the rollout archive (written by its one writer, rlcore.contracts.samples_store) and
in-run evaluations (`evals/step_<n>/`)."""

import json
import os
import random
import time
from pathlib import Path

from rlcore.contracts import samples_store
from rlcore.processes import procs

WORDS = [
    "the",
    "sum",
    "is",
    "answer",
    "7",
    "12",
    "3",
    "+",
    "=",
    "ok",
    "so",
    "think",
    "<tool>",
    "call",
    "(",
    ")",
    "result",
    "9",
    "4",
    "done",
]


def write_json(path: Path, data) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(json.dumps(data, indent=2) + "\n")


def write_marker(root: Path, kind: str, entry: str) -> None:
    marker = {"run_id": os.urandom(8).hex(), "created": time.time(), "folder": str(root)}
    write_json(root / ".rl-run", {**marker, "kind": kind, "entry": entry})


def make_run(
    root: Path,
    steps: int = 6,
    status: str = "finished",
    live: bool = False,
    lr: float = 3e-5,
    envs=("rl-add-digits",),
    host: str | None = None,
    ckpt_every: int = 2,
) -> Path:
    """A finished (or, with `live`, running: this process stands in for its launcher) run of
    `steps` steps with every file a run has but the archive (add it with `write_samples`)."""
    root.mkdir(parents=True, exist_ok=True)
    write_marker(root, "rl", "rl")
    me = (
        procs.identity(os.getpid())
        if live
        else {
            "pid": 999_999,
            "host": host or "elsewhere",
            "create_time": 1.0,
            "cmdline_sha256": "0" * 16,
        }
    )
    write_json(
        root / "run.json",
        {
            "status": "running" if live else status,
            "launcher_pid": me["pid"],
            "attempt": "a1",
            "pids": {},
            "identities": {"launcher": me},
            "machine": {"model": "AMD EPYC", "isa": "avx2", "num_cpus": 2, "num_gpus": 0},
            **({"failed_component": "trainer", "exit_code": 1} if status == "failed" else {}),
        },
    )
    write_configs(root, steps, lr, envs)
    logs = root / "logs"
    logs.mkdir(exist_ok=True)
    for name in ("inference", "orchestrator", "trainer"):
        (logs / f"{name}.log").write_text(
            f"\n===== attempt 2026-11-27 10:00:00 : python -m {name}.main\n"
            + "".join(f"{name}: line {i}\n" for i in range(60))
        )
    append_metrics(root, range(steps))
    for step in range(ckpt_every, steps + 1, ckpt_every):
        folder = root / "checkpoints" / f"step_{step}"
        for part in ("trainer", "orchestrator"):
            (folder / part).mkdir(parents=True, exist_ok=True)
            (folder / part / "DONE").write_text(f"{step}\n")
        (folder / "MANIFEST").write_text(json.dumps({"step": step, "parts": []}) + "\n")
    return root


def write_configs(root: Path, steps: int, lr: float, envs) -> None:
    configs = root / "configs"
    configs.mkdir(exist_ok=True)
    env_lines = "".join(f'    {{ type = "verifiers", id = "{e}", args = {{}} }},\n' for e in envs)
    (configs / "orchestrator.toml").write_text(
        f"max_steps = {steps}\nbatch_size = 64\nrollouts_per_example = 8\nenv = [\n{env_lines}]\n"
        '[model]\nname = "tiny-qwen3"\n[client]\nbase_url = "http://user:hunter2@h/v1"\n'
    )
    (configs / "trainer.toml").write_text(
        f'max_steps = {steps}\n[model]\nname = "tiny-qwen3"\n[optim]\nlr = {lr}\n'
        '[ckpt]\ninterval = 2\nresume_step = "None"\n[wandb]\napi_key = "sk-secret-value"\n'
    )
    (configs / "inference.toml").write_text('[model]\nname = "tiny-qwen3"\n')


ORCHESTRATOR_EXTRA = (
    "metrics/correct_sum",
    "metrics/num_turns",
    "seq_len",
    "completion_len",
    "truncated_fraction",
    "num_split_rollouts",
    "num_dropped_rollouts",
    "num_errors",
    "mixed_reward_groups",
    "num_skipped_groups",
    "num_generation_rounds",
    "policy_step",
    "progress/num_tokens",
    "num_capped_requests",
)
TRAINER_EXTRA = (
    "clip_frac",
    "mask_frac",
    "lr",
    "num_tokens",
    "forward_s",
    "backward_s",
    "optimizer_s",
    "skipped_update",
    "transfer_wait_s",
    "transfer_send_s",
    "ckpt_wait_s",
    "ckpt_write_s",
    "ckpt_staging_wait_s",
    "ckpt_s",
)
"""The other fields the quick start's records carry (orchestrator/loop.py, trainer/train.py)."""


def metrics_lines(steps, seed: int = 0) -> str:
    """An orchestrator and a trainer record per step, with every field the quick start's
    records carry."""
    rng = random.Random(seed)
    lines = []
    for step in steps:
        now = 1_795_780_000.0 + 4 * step
        orchestrator = {
            "component": "orchestrator",
            "step": step,
            "time": now,
            "reward": min(1.0, 0.1 + step / 20 + rng.random() / 10),
            "num_samples": 64,
            "num_tokens": 4000,
            "time/step_s": 3.0,
            "time/generate_s": 2.5,
            "time/wait_weights_s": 0.4,
            "throughput_tokens_per_s": 1300.0,
            "rss_mib": 250.0,
            **{name: round(rng.random(), 4) for name in ORCHESTRATOR_EXTRA},
        }
        trainer = {
            "component": "trainer",
            "step": step + 1,
            "time": now + 2,
            "loss": 0.1 / (step + 1),
            "entropy": 2.0 - step / 100,
            "mismatch_kl": 1e-3,
            "grad_norm": 0.5,
            "tokens_per_s": 900.0,
            "peak_memory_gib": 1.0,
            "step_time_s": 2.0,
            "data_wait_s": 0.3,
            "publish_s": 0.2,
            "rss_mib": 900.0,
            **{name: round(rng.random(), 4) for name in TRAINER_EXTRA},
        }
        lines += [json.dumps(orchestrator), json.dumps(trainer)]
    return "".join(line + "\n" for line in lines)


def append_metrics(root: Path, steps, seed: int = 0) -> None:
    with (root / "metrics.jsonl").open("a") as f:
        f.write(metrics_lines(steps, seed))


def sample_rows(
    step: int,
    groups: int = 2,
    members: int = 8,
    tokens: int = 12,
    envs=("rl-add-digits",),
    seed: int = 0,
) -> dict[str, list]:
    """One step's archive rows as columns: `groups` groups of `members` rollouts per env; the
    group's first member right (reward 1), one cut off, one a two-turn tool call."""
    rng = random.Random(seed * 100_003 + step)
    cols: dict[str, list] = {name: [] for name in samples_store.COLUMNS}
    for env_index, env in enumerate(envs):
        for g in range(groups):
            group = env_index * groups + g
            prompt = [{"role": "user", "content": f"What is {g} + {step}? (group {group})"}]
            for m in range(members):
                words = [rng.choice(WORDS) for _ in range(tokens)]
                completion = [{"role": "assistant", "content": " ".join(words)}]
                if m == 2:
                    completion = [
                        {
                            "role": "assistant",
                            "content": "let me check",
                            "tool_calls": [
                                {
                                    "id": "c1",
                                    "type": "function",
                                    "function": {
                                        "name": "add",
                                        "arguments": json.dumps({"a": g, "b": step}),
                                    },
                                }
                            ],
                        },
                        {"role": "tool", "content": str(g + step), "tool_call_id": "c1"},
                        {"role": "assistant", "content": f"the answer is {g + step}"},
                    ]
                reward = 1.0 if m == 0 else round(rng.random() / 2, 3)
                row = {
                    "step": step,
                    "policy_step": max(0, step - 1),
                    "env": env,
                    "group": group,
                    "member": m,
                    "example_id": 1000 * step + group,
                    "prompt": json.dumps(prompt),
                    "completion": json.dumps(completion),
                    "reward": reward,
                    "reward_parts": json.dumps({"correct": reward}),
                    "advantage": None if m == members - 1 else reward - 0.3,
                    "kept": m != members - 1,
                    "num_prompt_tokens": 20,
                    "num_completion_tokens": tokens,
                    "is_truncated": m == 1,
                    "error": "tool server timed out" if m == members - 1 else None,
                    "token_text": [w + " " for w in words],
                    "token_logprob": [-rng.random() * 3 for _ in words],
                    "token_mask": [i % 5 != 4 for i in range(len(words))],
                }
                for name, value in row.items():
                    cols[name].append(value)
    return cols


def write_step(root: Path, step: int, columns: dict[str, list]) -> Path:
    """samples/step_<n>.parquet as the orchestrator writes it: through samples_store.write_step
    (`columns`: one list per column of the format, as `sample_rows` makes them)."""
    names = list(columns)
    rows = [dict(zip(names, values, strict=True)) for values in zip(*columns.values(), strict=True)]
    folder = root / samples_store.SAMPLES_DIR
    samples_store.write_step(folder, step, max(0, step - 1), rows)
    return samples_store.step_file(folder, step)


def forge_step(root: Path, step: int, edit) -> Path:
    """Rewrite a step file the writer wrote as `edit(table)` makes it (its metadata kept unless
    `edit` changes it): what a damaged run folder, or one from another version, may hold."""
    import pyarrow.parquet as pq

    path = samples_store.step_file(root / samples_store.SAMPLES_DIR, step)
    table = edit(pq.read_table(path))
    with path.open("wb") as f:  # a file object: pyarrow takes only UTF-8 paths
        pq.write_table(table, f, compression="zstd")
    return path


def renamed(column: str):
    """An edit for `forge_step`: `column` renamed (as a writer that renamed it would write)."""
    return lambda table: table.rename_columns(
        [f"{name}_v2" if name == column else name for name in table.column_names]
    ).replace_schema_metadata(table.schema.metadata)


def write_samples(root: Path, steps, **kwargs) -> None:
    for step in steps:
        write_step(root, step, sample_rows(step, **kwargs))


def write_eval(
    root: Path, step: int, envs=("rl-add-digits",), examples: int = 3, rollouts: int = 4
) -> Path:
    """`step_<n>/{results.jsonl,summary.json}` as orchestrator/evals/summary.py writes them."""
    folder = root / f"step_{step}"
    folder.mkdir(parents=True, exist_ok=True)
    rows, summary = [], {}
    for env in envs:
        env_rows = []
        for example in range(examples):
            for rollout in range(rollouts):
                reward = 1.0 if (example + rollout) % 2 == 0 else 0.0
                env_rows.append(
                    {
                        "env": env,
                        "example": example,
                        "rollout": rollout,
                        "prompt": [{"role": "user", "content": f"What is {example} + 5?"}],
                        "completion": [
                            {
                                "role": "assistant",
                                "content": f"eval answer {example + 5} try {rollout}",
                            }
                        ],
                        "reward": reward,
                        "metrics": {"correct": reward},
                        "completion_tokens": 6,
                        "error": None,
                    }
                )
        rows += env_rows
        mean = sum(r["reward"] for r in env_rows) / len(env_rows)
        summary[env] = {
            "num_examples": examples,
            "num_rollouts": len(env_rows),
            "num_errors": 0,
            "reward": mean,
            "pass@1": mean,
            "pass@2": 0.833,
            f"pass@{rollouts}": 1.0,
            "completion_tokens": 6.0,
        }
    (folder / "results.jsonl").write_text("".join(json.dumps(r) + "\n" for r in rows))
    (folder / "summary.json").write_text(json.dumps(summary, indent=2) + "\n")
    return folder


def make_evals_folder(root: Path) -> Path:
    """An `evals` command's output folder: marked as a run of kind eval, one evaluation."""
    root.mkdir(parents=True, exist_ok=True)
    write_marker(root, "eval", "evals")
    (root / "eval.toml").write_text(
        '[model]\nname = "tiny-qwen3"\n[[eval.env]]\nid = "rl-add-digits"\n'
    )
    write_eval(root, 0)
    for name in ("results.jsonl", "summary.json"):
        (root / name).write_bytes((root / "step_0" / name).read_bytes())
    return root


def snapshot(root: Path) -> dict[str, tuple]:
    """Every entry below `root` (links not followed) with its bytes' hash, mode and mtime."""
    import hashlib

    found = {}
    for parent, dirs, files in os.walk(root):
        for name in dirs + files:
            path = Path(parent, name)
            st = path.lstat()
            digest = (
                hashlib.sha256(path.read_bytes()).hexdigest()
                if path.is_file() and not path.is_symlink()
                else ""
            )
            found[str(path.relative_to(root))] = (digest, st.st_mode, st.st_mtime_ns)
    st = root.lstat()
    found["."] = ("", st.st_mode, st.st_mtime_ns)
    return found
