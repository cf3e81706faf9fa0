"""`rl plot RUN`: a PNG of a run's curves from metrics.jsonl, no W&B account needed: reward,
loss, entropy, mismatch_kl and throughput against step (an SFT run: its loss, held-out loss,
gradient norm, learning rate and throughput). `evals --watch` rewards join the reward panel."""

from pathlib import Path
from typing import Any

from rlcore.files.readback import shown
from rlcore.reporting.metrics import is_training_step, read_all_records
from rlcore.runs.rundir import RunDir

PLOT_FILE = "plot.png"
# (title, component, metric key); the orchestrator's `reward` only from training records.
PANELS = (
    ("reward", "orchestrator", "reward"),
    ("loss", "trainer", "loss"),
    ("entropy", "trainer", "entropy"),
    ("mismatch_kl", "trainer", "mismatch_kl"),
    ("trainer tokens/s", "trainer", "tokens_per_s"),
    ("rollout tokens/s", "orchestrator", "throughput_tokens_per_s"),
)
SFT_PANELS = (
    ("loss", "trainer", "loss"),
    ("val/loss", "trainer", "val/loss"),
    ("grad_norm", "trainer", "grad_norm"),
    ("lr", "trainer", "lr"),
    ("trainer tokens/s", "trainer", "tokens_per_s"),
    ("loss tokens per step", "trainer", "num_loss_tokens"),
)


def series(records: list[dict[str, Any]], component: str, key: str) -> tuple[list, list]:
    """(steps, values) of one metric, the last record per step winning (a resumed run)."""
    by_step: dict[int, float] = {}
    for record in records:
        if record.get("component") != component or not isinstance(record.get(key), int | float):
            continue
        if component == "orchestrator" and key == "reward" and not is_training_step(record):
            continue
        by_step[int(record["step"])] = float(record[key])
    steps = sorted(by_step)
    return steps, [by_step[s] for s in steps]


def watched_rewards(records: list[dict[str, Any]]) -> dict[str, tuple[list, list]]:
    """`evals --watch` rewards per environment: 'eval <env>' -> (steps, values)."""
    keys = {k for r in records if r.get("component") == "evals" for k in r if k.endswith("/reward")}
    return {f"eval {key[: -len('/reward')]}": series(records, "evals", key) for key in sorted(keys)}


def plot_run(run: RunDir, out: Path | None = None) -> Path:
    """Write the run's curves to `out` (default: plot.png in the run directory)."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt
    from matplotlib.ticker import MaxNLocator

    records = read_all_records(run.metrics, run.root)
    out = out or run.root / PLOT_FILE
    fig, axes = plt.subplots(2, 3, figsize=(15, 8), constrained_layout=True)
    panels = SFT_PANELS if run.config_file("sft").is_file() else PANELS
    for ax, (title, component, key) in zip(axes.flat, panels, strict=True):
        steps, values = series(records, component, key)
        if steps:
            ax.plot(steps, values, marker="o", markersize=3, linewidth=1.5, label="training")
        evals = watched_rewards(records) if title == "reward" else {}
        for name, (eval_steps, eval_values) in evals.items():
            ax.plot(eval_steps, eval_values, marker="s", markersize=4, linewidth=1.5, label=name)
        if evals:
            ax.legend(fontsize=9)
        if not steps and not evals:
            ax.text(0.5, 0.5, "not logged", ha="center", va="center", transform=ax.transAxes)
        ax.set_title(title, fontsize=13)
        ax.set_xlabel("step")
        ax.xaxis.set_major_locator(MaxNLocator(integer=True))
        ax.grid(alpha=0.3)
    fig.suptitle(shown(run.root), fontsize=14)  # a folder name that is not UTF-8 too
    fig.savefig(out, dpi=100)
    plt.close(fig)
    return out
