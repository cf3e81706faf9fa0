"""`rl`: compose the three configs, check everything, start and supervise the processes.

rl --trainer @ train.toml --orchestrator @ orch.toml --inference @ infer.toml [--flags]
rl @ rl.toml [--flags]
rl run @ config.toml [--flags]            (the same as `rl @ config.toml`)
rl sft @ sft.toml [--flags]               (supervised fine-tuning: launcher/sft_run.py)
rl SUBCOMMAND ...                         (run management: launcher/commands/, see --help)
"""

import os
import sys
import time
from pathlib import Path

from launcher.commands import COMMANDS, commands_help, run_command
from launcher.rl_config import RLConfig
from launcher.shared import shared_help
from rlcore.config.entry import entry_point, exit_with, parse_config
from rlcore.config.toml_io import dump_config
from rlcore.errors import ConfigError
from rlcore.host import wheel_tags
from rlcore.secrets import redact_message

USAGE = (
    "rl [@ rl.toml] [--trainer @ train.toml] [--orchestrator @ orch.toml] "
    "[--inference @ infer.toml] [--KEY VALUE ...] [--dry-run] [--clean] [--wandb-api-key KEY]\n"
    "       rl --config workflow.yaml [--dataset ORG/NAME] [--model M] [--gpus NxTYPE] ...\n"
    "       rl run @ config.toml ...  |  rl SUBCOMMAND [RUN] ...  |  rl  (interactive)"
)
EXTRA_HELP = """\
  --trainer @ FILE ...  load FILE (and each @ FILE right after it) into [trainer] (also
                        --orchestrator @, --inference @)
  --dry-run             print the resolved configs, GPU map and commands (with [slurm]: the
                        sbatch script); start and write nothing; reports what a start would
                        refuse, every holder of the run included
  --clean               start over: delete what the earlier run in output_dir created
                        (checkpoints too; only in a folder rl marked as a run, never other
                        files, never through a link, never while another rl, a trainer or
                        orchestrator started alone, or an unfinished SLURM job holds it)
  --wandb-api-key KEY   W&B key for this run (or WANDB_API_KEY / .env); passed to the processes
                        in their environment, never written to a config or log
  --config FILE.yaml    a workflow config (`rl init TARGET` writes one): train the rl-tasks
                        environment on --dataset with its prompt, action mappings and rubric;
                        flags and @ files override its settings
  --dataset NAME        a tasks dataset `rl hf` wrote (ORG/NAME) or its folder; default: the
                        primary dataset of rl.lock.yaml
  --model NAME          the same as --model.name NAME
  rl (nothing else)     interactive: finds a workflow config, a dataset and rl.lock.yaml, offers
                        `rl init` / `rl hf` for what is missing and asks before starting; without
                        a terminal it says what is missing and exits 2

subcommands (`rl SUBCOMMAND --help` for each; RUN: a run's name under outputs/, or its path):
  run @ FILE ...  the same as `rl @ FILE ...`
  sft @ FILE ...  supervised fine-tuning as a run (`rl sft --help`; `sft @ FILE` alone)
  eval @ FILE ... evaluate a model, a server or a run's step (`evals @ FILE`; --help)
{commands}

Shared keys: set once (top level, or in one sub-config) they fill every component that carries
them; two places with different values are an error naming both.
{shared}"""

API_KEY_FLAG = "--wandb-api-key"
FLAG_EXAMPLES = {
    API_KEY_FLAG: "KEY",
    "--config": "configs/my-env.yaml",
    "--dataset": "my-org/my-tasks",
}


def take_flag(argv: list[str], flag: str) -> tuple[list[str], str | None]:
    """argv without `flag VALUE` (or `flag=VALUE`), and the value (None when absent)."""
    out, value, i = [], None, 0
    while i < len(argv):
        token = argv[i]
        if token == flag or token.startswith(flag + "="):
            value = token.partition("=")[2] or (argv[i + 1] if i + 1 < len(argv) else "")
            if not value or value.startswith("-"):
                exit_with(f"{flag} needs a value, e.g. {flag} {FLAG_EXAMPLES[flag]}", "rl")
            i += 1 if "=" in token else 2
            continue
        out.append(token)
        i += 1
    return out, value


@entry_point("rl")
def main(argv: list[str] | None = None) -> None:
    wheel_tags.repair()  # so the next `uv run` reinstalls nothing (rlcore/host/wheel_tags.py)
    argv, api_key = take_flag(sys.argv[1:] if argv is None else argv, API_KEY_FLAG)
    if api_key:  # the processes inherit it; it never reaches a config, a log or W&B's config
        os.environ["WANDB_API_KEY"] = api_key
    if argv and argv[0] == "run":
        argv = argv[1:]
    if argv and argv[0] in COMMANDS:
        sys.exit(run_command(argv[0], argv[1:]))
    if argv and argv[0] == "sft":
        from launcher.sft_run import main as sft_main

        sys.exit(sft_main(argv[1:]))
    if argv and argv[0] == "eval":  # the `evals` command (orchestrator/evals), as it is
        os.execv(sys.executable, [sys.executable, "-m", "orchestrator.evals.main", *argv[1:]])
    if not argv:
        from launcher.interactive import bare_rl

        answer = bare_rl()  # an exit code, or the run the user agreed to
        if isinstance(answer, int):
            sys.exit(answer)
        argv = answer
    argv, workflow = take_flag(argv, "--config")
    argv, dataset = take_flag(argv, "--dataset")
    first = []
    if workflow is not None or dataset is not None:
        from launcher.workflow import workflow_layer

        try:
            layer = workflow_layer(Path(workflow) if workflow else None, dataset)
        except ConfigError as err:
            exit_with(str(err), "rl")
        first = [(layer, workflow or f"--dataset {dataset}")]
    config, parsed = parse_config(
        RLConfig,
        "rl",
        argv,
        sections=("trainer", "orchestrator", "inference"),
        usage=USAGE,
        extra_help=EXTRA_HELP.format(shared=shared_help(), commands=commands_help()),
        first=first,
    )
    code = start(config, dry_run="dry_run" in parsed.flags, clean="clean" in parsed.flags)
    if code:
        sys.exit(code)


def start(config: RLConfig, dry_run: bool, clean: bool) -> int:
    """Plan, check and run (or print, or submit) the run; the exit code."""
    from launcher.plan import describe
    from launcher.prepare import build_plan

    try:
        plan = build_plan(config, dry_run=dry_run)
        if dry_run:
            from launcher.preflight import dry_run_checks

            dry_run_checks(plan, clean)  # every check a start runs, environments included
    except ConfigError as err:
        exit_with(str(err), "rl")
    for warning in plan.warnings:
        print(f"rl: warning: {warning}", file=sys.stderr)
    if plan.config.slurm is not None:
        return run_slurm(plan, dry_run, clean)
    if dry_run:
        from launcher.plan import as_given

        print(f"# resolved config (rl @ this file reproduces it)\n{dump_config(as_given(plan))}")
        print(describe(plan))
        return 0
    from launcher.launch import launch

    started = time.monotonic()
    code = launch(plan, clean)
    print(f"rl: finished in {time.monotonic() - started:.0f} s with exit code {code}")
    return code


def run_slurm(plan, dry_run: bool, clean: bool) -> int:
    """[slurm]: print or submit the job script; inside the job, place the components on the
    job's nodes and supervise them here."""
    from launcher import slurm
    from launcher.launch import launch, write_configs
    from launcher.slurm_config import inside_job

    try:
        if dry_run:
            print(slurm.job_script(plan, plan.run.config_file("rl")), end="")
            return 0
        if not inside_job():
            return slurm.submit(plan, write_configs)
        slurm.place_in_job(plan)
    except ConfigError as err:
        print(f"rl: error: {redact_message(str(err))}", file=sys.stderr)
        return 2
    started = time.monotonic()
    code = launch(plan, clean=clean)
    print(f"rl: finished in {time.monotonic() - started:.0f} s with exit code {code}")
    return code


if __name__ == "__main__":
    main()
