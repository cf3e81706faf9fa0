"""The `@` config system: precedence, shared keys, round trips and user-error messages."""

from pathlib import Path

import pytest

from inference.config import InferenceConfig
from launcher.rl_config import RLConfig
from orchestrator.config import OrchestratorConfig
from rlcore.config.entry import parse_config
from rlcore.config.toml_io import dump_config
from rlcore.errors import ConfigError
from trainer.config import TrainerConfig

REPO = Path(__file__).resolve().parents[3]
SECTIONS = ("trainer", "orchestrator", "inference")
MODELS = {"trainer": TrainerConfig, "orchestrator": OrchestratorConfig}
MODELS["inference"] = InferenceConfig


def parse(model, argv, prog="test"):
    sections = SECTIONS if model is RLConfig else ()
    return parse_config(model, prog, argv, sections=sections)[0]


def user_error(model, argv, capsys) -> str:
    with pytest.raises(SystemExit) as exc:
        parse(model, argv)
    assert exc.value.code == 2
    return capsys.readouterr().err


def write(tmp_path: Path, name: str, text: str) -> str:
    path = tmp_path / name
    path.write_text(text)
    return str(path)


# -- precedence and syntax ----------------------------------------------------------------------
def test_files_merge_left_to_right_and_flags_win(tmp_path):
    a = write(tmp_path, "a.toml", "max_steps = 5\n[optim]\nlr = 1e-3\nwarmup_steps = 2\n")
    b = write(tmp_path, "b.toml", "[optim]\nlr = 2e-3\n")
    config = parse(TrainerConfig, ["@", a, f"@{b}", "--optim.warmup-steps", "7"])
    assert (config.max_steps, config.optim.lr, config.optim.warmup_steps) == (5, 2e-3, 7)


def test_flag_forms(tmp_path):
    config = parse(
        TrainerConfig,
        ["--model.activation-checkpointing", "--optim.max_norm", "None", "--ckpt.resume-step=-1"],
    )
    assert config.model.activation_checkpointing is True
    assert config.optim.max_norm is None and config.ckpt.resume_step == -1
    off = parse(TrainerConfig, ["--no-model.activation-checkpointing"])
    assert off.model.activation_checkpointing is False
    off = parse(TrainerConfig, ["--model.activation-checkpointing", "false"])
    assert off.model.activation_checkpointing is False


@pytest.mark.parametrize("ids", [["0,1,2"], ["0", "1", "2"], ["[0,1,2]"]])
def test_gpu_id_list_forms(ids):
    config = parse(RLConfig, ["--inference-gpu-ids", *ids, "--trainer-gpu-ids", "3"])
    assert config.inference_gpu_ids == [0, 1, 2] and config.trainer_gpu_ids == [3]


def test_rl_sections_repeat_and_deep_merge(tmp_path):
    t1 = write(tmp_path, "t1.toml", "[optim]\nlr = 1e-4\nwarmup_steps = 3\n")
    t2 = write(tmp_path, "t2.toml", "[optim]\nlr = 5e-5\n")
    config = parse(RLConfig, ["--trainer", "@", t1, "--trainer", "@", t2])
    assert (config.trainer.optim.lr, config.trainer.optim.warmup_steps) == (5e-5, 3)


@pytest.mark.parametrize("form", [["@", "T2"], ["@T2"], ["--trainer", "@", "T2"]])
def test_rl_section_takes_every_file_that_follows_it(tmp_path, form):
    """`--trainer @ t1.toml @ t2.toml` layers both into the trainer, as `trainer @ t1 @ t2`
    does alone; a file after another flag is top-level again."""
    t1 = write(tmp_path, "t1.toml", "[optim]\nlr = 1e-4\nwarmup_steps = 3\n")
    t2 = write(tmp_path, "t2.toml", "[optim]\nlr = 5e-5\n")
    argv = ["--trainer", "@", t1, *(t.replace("T2", str(t2)) for t in form)]
    config = parse(RLConfig, argv)
    assert (config.trainer.optim.lr, config.trainer.optim.warmup_steps) == (5e-5, 3)
    top = write(tmp_path, "top.toml", "max_steps = 4\n")
    config = parse(RLConfig, [*argv, "--seed", "1", "@", top])
    assert config.trainer.max_steps == config.orchestrator.max_steps == 4


def test_rl_single_file_with_tables_and_shared_keys(tmp_path):
    rl = write(
        tmp_path,
        "rl.toml",
        'max_steps = 7\n[model]\nname = "m"\n[ckpt]\ninterval = 2\n'
        "[trainer.optim]\nlr = 1e-4\n[orchestrator]\nbatch_size = 8\nrollouts_per_example = 4\n",
    )
    config = parse(RLConfig, ["@", rl, "--inference.parallel.dp", "1"])
    assert config.trainer.max_steps == config.orchestrator.max_steps == 7
    assert {config.trainer.model.name, config.orchestrator.model.name} == {"m"}
    assert config.inference.model.name == "m"
    assert config.trainer.ckpt.interval == config.orchestrator.ckpt.interval == 2


def test_one_sided_shared_value_fills_the_other_side(tmp_path):
    t = write(tmp_path, "t.toml", "max_steps = 9\n[ckpt]\ninterval = 3\nkeep = 1\n")
    config = parse(RLConfig, ["--trainer", "@", t])
    assert config.orchestrator.max_steps == 9 and config.orchestrator.ckpt.keep == 1


def test_top_level_flag_outranks_section_files(tmp_path):
    t = write(tmp_path, "t.toml", "max_steps = 30\n[ckpt]\ninterval = 10\n")
    argv = ["--trainer", "@", t, "--max-steps", "50", "--ckpt.interval", "5"]
    config = parse(RLConfig, argv)
    assert config.trainer.max_steps == config.orchestrator.max_steps == 50
    assert config.trainer.ckpt.interval == config.orchestrator.ckpt.interval == 5


def test_falsy_values_are_values():
    config = parse(RLConfig, ["--seed", "0", "--async-level", "0", "--ckpt.enabled", "false"])
    assert config.trainer.async_level == 0 == config.orchestrator.async_level
    assert config.trainer.ckpt.enabled is False and config.orchestrator.ckpt.enabled is False


# -- round trips -------------------------------------------------------------------------------
@pytest.mark.parametrize("name", ["trainer", "orchestrator", "inference"])
def test_component_round_trip_keeps_none_zero_false(tmp_path, name):
    argv = {
        "trainer": ["--optim.max-norm", "None", "--seed", "0", "--no-ckpt.enabled"],
        "orchestrator": [
            "--client.base-url",
            "http://h:1/v1",
            "--async-level",
            "0",
            "--eval",
            "None",
        ],
        "inference": ["--model.max-model-len", "None", "--enforce-eager", "false", "--seed", "0"],
    }[name]
    model = MODELS[name]
    config = parse(model, argv)
    path = write(tmp_path, "resolved.toml", dump_config(config))
    assert parse(model, ["@", path]) == config


def test_rl_round_trip(tmp_path):
    config = parse(
        RLConfig,
        ["--ckpt.interval", "2", "--trainer.optim.max-norm", "None", "--async-level", "0"],
    )
    path = write(tmp_path, "rl.toml", dump_config(config))
    assert parse(RLConfig, ["@", path]) == config


SHIPPED = [*(REPO / "configs").rglob("*.toml"), *(REPO / "examples").rglob("*.toml")]


@pytest.mark.parametrize("path", sorted(str(p) for p in SHIPPED))
def test_every_shipped_config_parses(path):
    name = Path(path).stem
    if name == "rl":
        parse(RLConfig, ["@", path])
        return
    from orchestrator.evals.config import EvalsConfig
    from trainer.sft.config import SFTConfig

    model = {
        "train": TrainerConfig,
        "orch": OrchestratorConfig,
        "infer": InferenceConfig,
        "sft": SFTConfig,
        "eval": EvalsConfig,
    }[name]
    parse(model, ["@", path])


# -- user errors -------------------------------------------------------------------------------
def test_unknown_flag_did_you_mean(capsys):
    err = user_error(TrainerConfig, ["--optim.lrr", "1"], capsys)
    assert "--optim.lrr" in err and "did you mean --optim.lr" in err


def test_unknown_key_in_file_names_file_and_key(tmp_path, capsys):
    path = write(tmp_path, "t.toml", "[optim]\nlearning_rate = 1\n")
    err = user_error(TrainerConfig, ["@", path], capsys)
    assert "t.toml" in err and "optim.learning_rate" in err and " lr," in err


def test_wrong_type_names_flag(capsys):
    err = user_error(TrainerConfig, ["--max-steps", "ten"], capsys)
    assert "--max-steps" in err and "'ten'" in err


def test_wrong_type_names_file_and_key(tmp_path, capsys):
    path = write(tmp_path, "o.toml", '[sampling]\ntemperature = "hot"\n')
    err = user_error(OrchestratorConfig, ["@", path], capsys)
    assert "o.toml" in err and "sampling.temperature" in err


def test_missing_file(capsys):
    err = user_error(TrainerConfig, ["@", "nope/train.toml"], capsys)
    assert "nope/train.toml" in err and "does not exist" in err


def test_syntax_error_has_position_and_unquoted_hint(tmp_path, capsys):
    path = write(tmp_path, "i.toml", "[model]\nname = Qwen/Qwen3-0.6B\n")
    err = user_error(InferenceConfig, ["@", path], capsys)
    assert "i.toml:2:" in err and '"Qwen/Qwen3-0.6B"' in err


def test_overlapping_gpu_ids(capsys):
    err = user_error(RLConfig, ["--inference-gpu-ids", "0,1", "--trainer-gpu-ids", "1,2"], capsys)
    assert "--inference-gpu-ids" in err and "--trainer-gpu-ids" in err and "[1]" in err


def test_inference_gpu_count_must_match_dp_tp(capsys):
    argv = ["--inference-gpu-ids", "0,1,2", "--inference.parallel.dp", "2"]
    err = user_error(RLConfig, argv, capsys)
    assert "--inference-gpu-ids" in err and "dp" in err and "tp" in err


def test_disagreeing_shared_values_name_both_places(tmp_path, capsys):
    t = write(tmp_path, "t.toml", "max_steps = 10\n")
    err = user_error(RLConfig, ["--trainer", "@", t, "--orchestrator.max-steps", "20"], capsys)
    assert "t.toml" in err and "--orchestrator.max-steps" in err


def test_top_level_disagrees_with_section(capsys):
    err = user_error(RLConfig, ["--seq-len", "512", "--trainer.seq-len", "1024"], capsys)
    assert "--seq-len" in err and "--trainer.seq-len" in err


def test_max_tokens_may_equal_seq_len():
    config = parse(OrchestratorConfig, ["--sampling.max-tokens", "2048", "--seq-len", "2048"])
    assert config.sampling.max_tokens == config.seq_len == 2048


@pytest.mark.parametrize(
    ("argv", "words"),
    [
        (["--sampling.temperature", "-1"], ["sampling.temperature", "greater than 0"]),
        (["--sampling.temperature", "0"], ["sampling.temperature = 0", "greedy", "> 0"]),
        (["--sampling.top-p", "0.9"], ["'top_p': 0.9", "sampling.top_p = 1.0", "biased"]),
        (["--sampling.top-k", "20"], ["'top_k': 20", "sampling.top_k = 0"]),
        (["--batch-size", "10", "--rollouts-per-example", "4"], ["batch_size", "divisible"]),
        (["--sampling.max-tokens", "4096", "--seq-len", "2048"], ["max_tokens", "above seq_len"]),
        (["--ckpt.interval", "0"], ["ckpt.interval", "greater than 0"]),
    ],
)
def test_orchestrator_validation(argv, words, capsys):
    err = user_error(OrchestratorConfig, argv, capsys)
    assert all(word in err for word in words), err


def test_a_rule_across_keys_names_its_keys_not_the_first_key_of_the_file(tmp_path, capsys):
    """A validator of the whole [orchestrator] table was blamed on the first key the file set in
    it (`orchestrator.batch_size`), whatever the rule was about."""
    config = write(
        tmp_path,
        "rl.toml",
        "[orchestrator]\nbatch_size = 8\n[orchestrator.eval]\n"
        "interval = 2\n[[orchestrator.eval.env]]\nid = 'rl-add-digits'\n",
    )
    argv = [
        "@",
        config,
        "--deterministic",
        "--async-level",
        "2",
        "--orchestrator.weight-transfer.type",
        "collective",
    ]
    err = user_error(RLConfig, argv, capsys)
    assert "batch_size" not in err, err
    assert err.startswith("test: error: `orchestrator`: weight_transfer.type = 'collective' "), err
    assert "async_level = 2" in err and "Set --weight-transfer.type filesystem" in err
    sources = err[err.rindex(" [") :]
    assert "`orchestrator.weight_transfer.type` = collective from flag --orchestrator." in sources
    assert "`deterministic` = true from flag --deterministic" in sources
    assert "`async_level` = 2 from flag --async-level" in sources
    assert f"`orchestrator.eval` from {config}" in sources


def test_a_rule_names_where_each_of_its_keys_was_set(tmp_path, capsys):
    config = write(tmp_path, "o.toml", "seed = 3\nbatch_size = 10\n")
    err = user_error(OrchestratorConfig, ["@", config, "--rollouts-per-example", "4"], capsys)
    assert "seed" not in err and "divisible" in err
    assert f"`batch_size` = 10 from {config}, key `batch_size`" in err
    assert "`rollouts_per_example` = 4 from flag --rollouts-per-example" in err


def test_positional_without_at(capsys):
    err = user_error(TrainerConfig, ["train.toml"], capsys)
    assert "@ train.toml" in err


# -- the commands --------------------------------------------------------------------------------
def test_a_dry_run_names_a_hub_environment_that_is_not_installed(tmp_path, capsys):
    """The shipped prime-rl-shaped files name a hub environment: before it is installed the
    dry run refuses as a start would, naming it and how to install it."""
    from launcher.rl import main

    with pytest.raises(SystemExit) as end:
        main(
            [
                "--trainer",
                "@",
                str(REPO / "configs/examples/train.toml"),
                "--orchestrator",
                "@",
                str(REPO / "configs/examples/orch.toml"),
                "--inference",
                "@",
                str(REPO / "configs/examples/infer.toml"),
                "--output-dir",
                str(tmp_path / "run"),
                "--dry-run",
            ]
        )
    assert end.value.code == 2
    err = capsys.readouterr().err
    assert "'harleycooper/dakota1890' (module `dakota1890`)" in err
    assert "uv pip install dakota1890" in err and not (tmp_path / "run").exists()


def test_dry_run_prints_plan_and_writes_nothing(tmp_path, capsys, hub_environments):
    from launcher.rl import main

    out = tmp_path / "run"
    main(
        [
            "--trainer",
            "@",
            str(REPO / "configs/examples/train.toml"),
            "--orchestrator",
            "@",
            str(REPO / "configs/examples/orch.toml"),
            "--inference",
            "@",
            str(REPO / "configs/examples/infer.toml"),
            "--inference-gpu-ids",
            "0,1,2,3,4,5",
            "--trainer-gpu-ids",
            "6,7",
            "--inference.parallel.dp",
            "6",
            "--output-dir",
            str(out),
            "--dry-run",
        ]
    )
    stdout = capsys.readouterr().out
    assert "CUDA_VISIBLE_DEVICES='0,1,2,3,4,5'" in stdout
    assert "CUDA_VISIBLE_DEVICES='6,7'" in stdout
    assert not out.exists()


def test_json_schema(capsys):
    """The printed schema is what an editor checks a config against: it accepts the defaults,
    flags an unknown key and an out-of-range value, and shows each field's docstring."""
    import json

    import jsonschema

    with pytest.raises(SystemExit) as exc:
        parse(TrainerConfig, ["--json-schema"])
    assert exc.value.code == 0
    schema = json.loads(capsys.readouterr().out)
    validator = jsonschema.Draft202012Validator(schema)
    assert not list(validator.iter_errors(TrainerConfig().model_dump(mode="json")))
    assert validator.is_valid({"optim": {"lr": 3e-4}, "max_steps": 5})
    assert not validator.is_valid({"optim": {"lrr": 3e-4}})  # a typo
    assert not validator.is_valid({"optim": {"lr": -1.0}})  # PositiveFloat
    assert not validator.is_valid({"max_steps": "ten"})
    optim = schema["$defs"][schema["properties"]["optim"]["$ref"].split("/")[-1]]
    assert optim["properties"]["lr"]["description"] == "Peak learning rate of AdamW."
    assert set(schema["properties"]) == set(TrainerConfig.model_fields)


# -- configs users bring -----------------------------------------------------------------------
SEEDS = REPO / "tests" / "fixtures" / "seed_configs"


def test_hosted_single_file_is_mapped(capsys):
    config = parse(RLConfig, ["@", str(SEEDS / "hosted_single_file.toml")])
    o = config.orchestrator
    assert {config.trainer.model.name, o.model.name, config.inference.model.name} == {
        "PrimeIntellect/Qwen3-0.6B-Reverse-Text-SFT"
    }
    assert (o.batch_size, o.rollouts_per_example, o.max_steps) == (8, 2, 500)
    assert (o.sampling.max_tokens, o.sampling.temperature) == (128, 0.8)
    assert o.env[0].name == "training-with-eval" and o.env[0].args["dataset_split"] == "train"
    assert o.eval.interval == 50 and o.eval.env[0].num_examples == 10
    assert config.trainer.wandb.project == o.wandb.project == "my-rl-project"
    assert "batch_size -> orchestrator.batch_size" in capsys.readouterr().err


def test_hosted_key_disagreeing_with_its_section_names_both(tmp_path, capsys):
    rl = write(tmp_path, "rl.toml", "batch_size = 8\n[orchestrator]\nbatch_size = 16\n")
    err = user_error(RLConfig, ["@", rl], capsys)
    assert "`batch_size` = 8 (top level)" in err and "`orchestrator.batch_size` = 16" in err
    assert "rl.toml" in err and "set it in one place" in err


def test_unknown_key_inside_a_list_table_suggests_its_keys(tmp_path, capsys):
    orch = write(tmp_path, "o.toml", '[[env]]\nid = "rl-add-digits"\nwieght = 2\n')
    err = user_error(OrchestratorConfig, ["@", orch], capsys)
    assert "unknown key `env.wieght`" in err and "did you mean weight" in err


def test_prime_rl_names_are_read_with_a_note(capsys):
    argv = [
        "--trainer",
        "@",
        str(SEEDS / "prime_rl_train.toml"),
        "--orchestrator",
        "@",
        str(SEEDS / "prime_rl_orch.toml"),
    ]
    config = parse(RLConfig, argv)
    assert config.trainer.model.attn_implementation == "sdpa"
    assert config.trainer.ckpt.keep == config.orchestrator.ckpt.keep == 2
    assert config.orchestrator.eval.interval == 5
    assert [(e.id, e.num_examples) for e in config.orchestrator.eval.env] == [("rl-add-digits", 8)]
    err = capsys.readouterr().err
    assert "`attn` is read as `attn_implementation`" in err and "`val` is read as `eval" in err
    assert "`keep_last` is read as `keep`" in err


def test_prime_rl_flags_are_read_with_a_note(capsys):
    config = parse(RLConfig, ["--trainer.model.attn", "eager", "--ckpt", "--ckpt.keep-last", "3"])
    assert config.trainer.model.attn_implementation == "eager"
    assert config.trainer.ckpt.enabled and config.orchestrator.ckpt.keep == 3
    assert "`trainer.model.attn` is read as `trainer.model.attn_implementation`" in (
        capsys.readouterr().err
    )


def test_both_names_of_one_key_is_an_error(tmp_path, capsys):
    t = write(tmp_path, "t.toml", '[model]\nattn = "sdpa"\nattn_implementation = "eager"\n')
    err = user_error(TrainerConfig, ["@", t], capsys)
    assert "two names for one key" in err and "attn_implementation" in err


def dry_run(argv, capsys) -> str:
    from launcher.rl import main

    main([*argv, "--dry-run"])
    return capsys.readouterr().out


@pytest.mark.parametrize(
    "extra",
    [
        [],
        ["--ckpt"],
        ["--ckpt.resume-step", "-1"],
        ["--trainer.ckpt.resume-step", "100", "--orchestrator.ckpt.resume-step", "100"],
    ],
)
def test_seed_guide_commands_pass_dry_run(extra, tmp_path, capsys, hub_environments):
    import shlex

    eight = shlex.split((SEEDS / "dakota_8gpu.args").read_text().replace("~", str(tmp_path)))
    out = dry_run([*eight, *extra], capsys)
    assert "CUDA_VISIBLE_DEVICES='0,1,2,3'" in out and "CUDA_VISIBLE_DEVICES='4,5,6,7'" in out
    two = [
        "--trainer",
        "@",
        str(SEEDS / "guide_train.toml"),
        "--orchestrator",
        "@",
        str(SEEDS / "guide_orch.toml"),
        "--inference",
        "@",
        str(SEEDS / "guide_infer.toml"),
        "--inference-gpu-ids",
        "0",
        "--trainer-gpu-ids",
        "1",
        "--output-dir",
        str(tmp_path / "two"),
    ]
    out = dry_run([*two, *extra], capsys)
    assert "CUDA_VISIBLE_DEVICES='0'" in out and "CUDA_VISIBLE_DEVICES='1'" in out
    assert not (tmp_path / "two").exists()


def test_inference_replicas_get_their_own_ports_gpus_and_urls():
    from launcher.plan import assign_gpus, derive, replica_config

    given = {"replicas": 2, "server": {"port": 8000}}  # unset, rl chooses it (test_ports.py)
    config = derive(RLConfig.model_validate({"inference": given}))
    assert config.orchestrator.client.base_url == [
        "http://127.0.0.1:8000/v1",
        "http://127.0.0.1:8001/v1",
    ]
    assert replica_config(config, "inference-1").server.port == 8001
    gpus = {"inference_gpu_ids": [0, 1, 2, 3], "trainer_gpu_ids": [4]}
    config = derive(RLConfig.model_validate({"inference": {"replicas": 2}, **gpus}))
    gpu_map, _ = assign_gpus(config, [0, 1, 2, 3, 4], dry_run=False)
    assert gpu_map["inference"] == [0, 1] and gpu_map["inference-1"] == [2, 3]
    assert config.inference.parallel.dp == 2
    with pytest.raises(ValueError, match="replicas × parallel.dp × tp = 3 × 1 × 1"):
        RLConfig.model_validate({"inference": {"replicas": 3}, **gpus})


def test_shared_key_of_a_union_member_fills_every_component():
    """`--weight-transfer.bucket-mb` is a key of the collective transport only: with that type
    chosen it reaches all three processes."""
    argv = ["--weight-transfer.type", "collective", "--weight-transfer.bucket-mb", "16"]
    config = parse(RLConfig, argv)
    for component in (config.trainer, config.orchestrator, config.inference):
        assert component.weight_transfer.type == "collective"
        assert component.weight_transfer.bucket_mb == 16


def test_key_of_another_union_member_names_the_type_it_needs(tmp_path, capsys):
    path = write(tmp_path, "t.toml", "[weight_transfer]\nbucket_mb = 16\n")
    err = user_error(TrainerConfig, ["@", path], capsys)
    assert "t.toml" in err and "weight_transfer.bucket_mb" in err
    assert "'collective' only" in err and "did you mean" not in err


# -- auto dtypes: chosen for the machine, inference's CPU linear layers follow the trainer ----
AVX2 = "avx2 fma"
NATIVE = "avx2 fma avx512f avx512bw avx512vl avx512dq avx512_bf16"
CPU_ONLY = {"trainer": [], "orchestrator": [], "inference": []}


def cpu_machine(flags: str):
    from rlcore.host.machine import read_machine

    return read_machine(f"flags\t: {flags}\n", {}, "x86_64")


@pytest.mark.parametrize(
    ("flags", "trainer_dtype", "served", "given", "want"),
    [
        (NATIVE, "auto", "auto", "auto", ("bfloat16", "float32", "bfloat16")),  # quick start
        (AVX2, "auto", "auto", "auto", ("float32", "float32", "model")),  # quick start on AVX2
        (NATIVE, "float32", "float32", "auto", ("float32", "float32", "model")),
        (NATIVE, "bfloat16", "bfloat16", "auto", ("bfloat16", "bfloat16", "model")),
        (NATIVE, "bfloat16", "float32", "model", ("bfloat16", "float32", "model")),  # stands
        (NATIVE, "float32", "float32", "bfloat16", ("float32", "float32", "bfloat16")),
        (AVX2, "bfloat16", "auto", "auto", ("bfloat16", "float32", "model")),  # kept, warned
    ],
)
def test_auto_dtypes_are_chosen_for_the_machine(flags, trainer_dtype, served, given, want):
    from launcher.plan import derive_dtypes

    config = parse(
        RLConfig,
        [
            "--trainer.model.dtype",
            trainer_dtype,
            "--inference.model.dtype",
            served,
            "--inference.cpu.matmul-dtype",
            given,
        ],
    )
    notes, warnings = derive_dtypes(config, CPU_ONLY, cpu_machine(flags))
    model, cpu = config.inference.model, config.inference.cpu
    assert (config.trainer.model.dtype, model.dtype, cpu.matmul_dtype) == want
    assert config.trainer.model.serving_dtype == model.dtype  # publishes what inference serves
    assert any("trainer.model.dtype" in n for n in notes)
    slow = flags == AVX2 and trainer_dtype == "bfloat16"
    assert [w for w in warnings if w.startswith("trainer.model.dtype")] == (
        [w for w in warnings if "4x slower" in w] if slow else []
    )
    assert bool(warnings) == slow


def test_auto_dtypes_on_gpus_are_bf16():
    from launcher.plan import derive_dtypes

    config = parse(RLConfig, [])
    gpus = {"trainer": [1], "orchestrator": [], "inference": [0]}
    derive_dtypes(config, gpus, cpu_machine(AVX2))
    assert (config.trainer.model.dtype, config.inference.model.dtype) == ("bfloat16", "bfloat16")


def test_bf16_linear_layers_on_avx2_are_refused_before_start():
    from launcher.plan import derive_dtypes

    config = parse(RLConfig, ["--inference.cpu.matmul-dtype", "bfloat16"])
    with pytest.raises(ConfigError, match="inference.cpu.matmul_dtype = bfloat16"):
        derive_dtypes(config, CPU_ONLY, cpu_machine(AVX2))


def test_bf16_matmuls_of_an_fp16_model_are_refused(capsys):
    err = user_error(
        InferenceConfig, ["--model.dtype", "float16", "--cpu.matmul-dtype", "bfloat16"], capsys
    )
    assert "cpu.matmul_dtype = bfloat16" in err and "model.dtype = float16" in err
    assert "Traceback" not in err
