"""Checks `rl` runs before it starts anything, and the run-directory preparation for a start
or a resume. A failed check is a ConfigError: one message, exit 2, nothing started."""

import os
import shutil
from pathlib import Path

from launcher.plan import Plan
from launcher.rl_config import COMPONENTS
from launcher.slurm import check_no_job
from orchestrator.config import EnvConfig, EvalEnvConfig
from rlcore.errors import ConfigError
from rlcore.files.paths import nearest_existing
from rlcore.host.environments import check_envs
from rlcore.host.models import model_folder
from rlcore.runs.ownership import read_run_id, remove_run_files, verified_run
from rlcore.runs.run_json import changed_choices, recorded_choices
from rlcore.runs.runguard import RL, check_run, hold
from rlcore.secrets import dotenv, redact_command, resolve


def check_environments(plan: Plan, announce: bool = True) -> None:
    """Every `[[env]]` and `[[eval.env]]` installed and its MCP task servers runnable; with
    `announce`, the local programs they start said once (a start, not a dry run)."""
    orch = plan.config.orchestrator
    check_envs(orch.env, "orchestrator [[env]]")
    if orch.eval:
        check_envs(orch.eval.env, "orchestrator [[eval.env]]")
    programs = check_task_servers(plan)
    if announce:
        announce_local_programs(programs)


def check_task_servers(plan: Plan) -> list[str]:
    """MCP tasks (`rl-tasks`): every server's `$VAR` (url, headers, env) set here or in .env
    and every server command on PATH, as `rl tasks` and `rl init` check them; a dry run too.
    Returns the local programs they start; each tasks file or dataset is read once."""
    from rl_tasks.taskfile import TaskError, check_runnable, local_commands, tasks_in_args

    orch = plan.config.orchestrator
    envs: list[EnvConfig | EvalEnvConfig] = [*orch.env, *(orch.eval.env if orch.eval else [])]
    programs: list[str] = []
    for env in envs:
        if env.id == "rl-tasks":
            source = env.args.get("tasks") or env.args.get("dataset")
            tasks = tasks_in_args(env.args)
            try:
                check_runnable(tasks, source)
            except TaskError as err:
                raise ConfigError(str(err)) from None
            programs += local_commands(tasks)
    return programs


def check_references(plan: Plan) -> None:
    """`.env` readable (no bad line) and every `$VAR` in a secret slot of the three configs
    set in the environment or .env, as `rl init` checks them: the processes resolve them only
    once started, and would fail one by one; a dry run too."""
    env = {**dotenv(), **os.environ}
    for name in COMPONENTS:
        resolve(getattr(plan.config, name).model_dump(mode="json"), name, env)


def announce_local_programs(programs: list[str]) -> None:
    """MCP tasks whose servers are local commands start programs on this machine: say which,
    once, before anything starts."""
    if programs:
        listed = "\n".join(f"    {redact_command(p)}" for p in dict.fromkeys(programs))
        print(
            f"rl: the tasks start these local programs on this machine (their MCP servers, "
            f"one per rollout):\n{listed}",
            flush=True,
        )


def check_model(plan: Plan) -> None:
    """A model named by a local path exists and is a model folder (rlcore.host.models); a hub
    name is left to the processes."""
    model_folder(plan.config.inference.model.name)


def check_disk(plan: Plan) -> None:
    """The run folder's fullest (`plan.disk_need`, from the estimate's disk figures) against the
    free space where it is made."""
    holds = "checkpoints, policy folders, the rollout archive and logs"
    check_room(plan.run.root, plan.disk_need, holds)


def check_room(root: Path, need: float | None, holds: str) -> None:
    """`need` bytes (what the run folder `root` holds at its fullest: `holds`) against the free
    space where it is made, for `rl` and `rl sft` alike; no check without a figure or where the
    free space cannot be read."""
    if not need:
        return
    try:
        free = shutil.disk_usage(nearest_existing(root)).free
    except OSError:
        return
    if need > free:
        raise ConfigError(
            f"{root} needs about {need / 2**30:.1f} GiB at its fullest ({holds}) but only "
            f"{free / 2**30:.1f} GiB is free: lower --ckpt.keep, raise --ckpt.interval, or use "
            "another --output-dir"
        )


def prepare_run_dir(plan: Plan, clean: bool) -> int | None:
    """Resolve the resume step once for every process and clear what the new attempt must not
    see (rlcore.runs.rundir owns the rules). Never deletes checkpoints unless `clean` is set, and
    then only what a verified run created (rlcore.runs.ownership)."""
    run = plan.run
    resume_step = plan.config.trainer.ckpt.resume_step
    check_run(run.root, RL)  # an rl run, or new or empty; nobody else in it; no link out of it
    if read_run_id(run.root) is not None:
        hold(run.root, RL)  # a run that another rl is running is left alone (rlcore.runs.runguard)
        check_no_job(run, "output_dir")  # nor one a SLURM job may still be writing
    if clean and run.root.exists():
        if resume_step is not None:
            raise ConfigError("--clean deletes the checkpoints --ckpt.resume-step would load")
        clean_run(run.root)
    recorded = recorded_choices(run.root) if resume_step is not None else {}
    step = run.prepare_attempt(resume_step, ("rollouts", "weights"), RL)  # claimed and held
    changed = changed_choices(recorded, plan.numeric_choices) if step else []
    if changed:
        print(
            f"rl: note: resuming step {step} with other numerics than the run had "
            f"({'; '.join(changed)}): the numbers will not match an uninterrupted run's bit "
            "for bit",
            flush=True,
        )
    return step


def clean_run(root: Path) -> None:
    """--clean: delete what the run in `root` created; anything else stays (and is named)."""
    if root.is_dir() and read_run_id(root) is None and not any(root.iterdir()):
        return  # an empty folder: nothing to clean
    verified_run(root, "--clean: output_dir")
    removal = remove_run_files(root, keep_marker=True)
    print(f"rl: --clean removed {', '.join(removal.removed) or 'nothing'} from {root}")
    for line in removal.kept_lines(root, "--clean"):
        print(f"rl: --clean {line}")


def check_output_dir(plan: Plan, clean: bool) -> None:
    """What a start would refuse about output_dir, without writing (dry runs)."""
    root = plan.run.root
    if clean and root.is_dir() and (read_run_id(root) is not None or any(root.iterdir())):
        verified_run(root, "--clean: output_dir")
    check_run(root, RL)  # its kind, its holders, links, or a new or empty folder
    if read_run_id(root) is not None:
        check_no_job(plan.run, "output_dir")


def dry_run_checks(plan: Plan, clean: bool) -> None:
    """Every check `run_checks` makes before a start, writing nothing (`--dry-run`): what a
    start would refuse about output_dir, the environments installed, the `$VAR` references set
    and the disk space; a dry run that passes is a start that passes them too."""
    check_output_dir(plan, clean)
    check_environments(plan, announce=False)
    check_references(plan)
    check_model(plan)
    check_disk(plan)


def run_checks(plan: Plan, clean: bool) -> int | None:
    """Every check before anything starts (the inference ports were checked and reserved as
    the plan was built: launcher.prepare.settle_ports); returns the resolved resume step. The
    estimate's new measurement of this machine is cached only once the run starts
    (launcher.supervisor, when inference is healthy): a refused start writes nothing."""
    check_environments(plan)
    check_references(plan)
    check_model(plan)
    check_disk(plan)
    return prepare_run_dir(plan, clean)
