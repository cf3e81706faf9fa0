"""Bad values are refused at the door: exit 2, one message naming the key (and the file or
flag), the value and the fix, never a traceback or validation-library wording."""

import pytest

from launcher.prepare import build_plan as make_plan
from launcher.rl_config import RLConfig
from launcher.slurm_config import SlurmConfig
from orchestrator.config import OrchestratorConfig
from rlcore.config.entry import parse_config
from rlcore.errors import ConfigError
from trainer.config import TrainerConfig

SECTIONS = ("trainer", "orchestrator", "inference")


def refused(model, argv, capsys) -> str:
    sections = SECTIONS if model is RLConfig else ()
    with pytest.raises(SystemExit) as exc:
        parse_config(model, "rl", argv, sections=sections)
    err = capsys.readouterr().err
    assert exc.value.code == 2, err
    assert "Traceback" not in err and "pydantic" not in err and "<lambda>" not in err, err
    return err


def toml(tmp_path, text: str, name: str = "c.toml") -> str:
    path = tmp_path / name
    path.write_bytes(text.encode() if isinstance(text, str) else text)
    return str(path)


@pytest.mark.parametrize("value", ["nan", "inf", "-inf"])
def test_non_finite_floats_are_refused_in_files_and_flags(tmp_path, capsys, value):
    err = refused(TrainerConfig, ["@", toml(tmp_path, f"[optim]\nlr = {value}\n")], capsys)
    assert "`optim.lr`" in err and "c.toml" in err and "finite" in err
    err = refused(TrainerConfig, ["--optim.lr", value], capsys)
    assert "`optim.lr`" in err and "--optim.lr" in err and "finite" in err


def test_non_finite_floats_are_refused_inside_free_form_tables(tmp_path, capsys):
    text = '[[orchestrator.env]]\nid = "rl-add-digits"\nargs = { weights = [1.0, nan] }\n'
    err = refused(RLConfig, ["@", toml(tmp_path, text)], capsys)
    assert "`orchestrator.env[0].args.weights[1]` = nan" in err and "finite" in err


def test_a_boolean_is_not_a_number(tmp_path, capsys):
    err = refused(TrainerConfig, ["@", toml(tmp_path, "max_steps = true\n")], capsys)
    assert "`max_steps` = true (" in err and "expected a number, got a boolean" in err
    err = refused(RLConfig, ["@", toml(tmp_path, "[orchestrator]\nbatch_size = false\n")], capsys)
    assert "`orchestrator.batch_size` = false" in err


@pytest.mark.parametrize("argv", [["--max-steps", "99999999999999999999"], ["--seed", "2" * 30]])
def test_integers_far_beyond_sane_ranges_are_refused(capsys, argv):
    err = refused(TrainerConfig, argv, capsys)
    assert "out of range" in err and argv[0] in err


def test_a_toml_file_that_is_not_utf8_names_the_file_and_byte(tmp_path, capsys):
    path = toml(tmp_path, b"seed = 1\n# caf\xe9\n")
    err = refused(TrainerConfig, ["@", path], capsys)
    assert f"{path}:2:6" in err and "0xe9" in err and "UTF-8" in err


def test_an_unknown_tagged_type_is_said_once_with_the_valid_ones(capsys):
    err = refused(RLConfig, ["--weight-transfer.type", "nccl"], capsys)
    assert err.count("\n") == 1, err
    assert "`weight_transfer.type` = 'nccl'" in err and "'filesystem'" in err
    err = refused(RLConfig, ["--trainer.weight-transfer.type", "nccl"], capsys)
    assert err.count("nccl") == 1, err


def test_a_shared_flag_error_is_said_once(capsys):
    err = refused(RLConfig, ["--max-steps", "-3"], capsys)
    assert err.count("max_steps") == 1, err


def test_one_rollout_per_example_gives_no_signal(capsys):
    err = refused(OrchestratorConfig, ["--rollouts-per-example", "1", "--batch-size", "4"], capsys)
    assert "rollouts_per_example = 1" in err and "2 or more" in err


def test_slurm_node_counts_must_add_up():
    for bad in (
        {"nodes": 1, "trainer_nodes": 2},
        {"nodes": 1, "inference_nodes": 2},
        {"nodes": 3, "inference_nodes": 1, "trainer_nodes": 1},
        {"nodes": 2, "trainer_nodes": 2},
    ):
        with pytest.raises(ValueError, match="slurm.nodes"):
            SlurmConfig.model_validate(bad)
    assert SlurmConfig.model_validate({"inference_nodes": 2}).nodes == 3


def test_inference_needs_gpus_when_the_trainer_has_them(capsys):
    err = refused(RLConfig, ["--inference-gpu-ids", "[]", "--trainer-gpu-ids", "0"], capsys)
    assert "--inference-gpu-ids is empty" in err
    config = RLConfig.model_validate({"trainer_gpu_ids": [3]})
    with pytest.raises(ConfigError, match="leaves no GPU for inference"):
        make_plan(config, dry_run=False)  # this machine has no GPU to give inference


def test_seq_len_fills_max_model_len_and_a_smaller_one_is_refused():
    plan = make_plan(RLConfig.model_validate({"seq_len": 1024}), dry_run=True)
    assert plan.config.inference.model.max_model_len == 1024
    config = RLConfig.model_validate(
        {"seq_len": 1024, "inference": {"model": {"max_model_len": 256}}}
    )
    with pytest.raises(ConfigError, match="max_model_len = 256 is below seq_len = 1024"):
        make_plan(config, dry_run=True)


def test_an_output_dir_that_is_a_file_is_refused_by_a_dry_run_too(tmp_path):
    from launcher.preflight import check_output_dir

    (tmp_path / "taken").write_text("a file\n")
    plan = make_plan(RLConfig.model_validate({"output_dir": str(tmp_path / "taken")}), True)
    with pytest.raises(ConfigError, match="is a file, not a folder"):
        check_output_dir(plan, clean=False)
    assert (tmp_path / "taken").read_text() == "a file\n"


DEEP = 100_000
NESTED_FILES = {
    "arrays": "a = " + "[" * DEEP + "]" * DEEP + "\n",
    "inline_tables": "a = " + "{b = " * DEEP + "1" + "}" * DEEP + "\n",
    "dotted_header": "[" + ".".join(["a"] * 50_000) + "]\n",
    "dotted_key": ".".join(["a"] * 50_000) + " = 1\n",
    "just_past_the_limit": "[inference.vllm_args]\nx = " + "[" * 70 + "]" * 70 + "\n",
    "a_few_hundred": "[inference.vllm_args]\nx = " + "[" * 500 + "]" * 500 + "\n",
}


@pytest.mark.timeout(60)
@pytest.mark.parametrize("text", NESTED_FILES.values(), ids=NESTED_FILES)
def test_a_file_nested_too_deeply_is_refused_naming_it_and_the_limit(tmp_path, capsys, text):
    path = toml(tmp_path, text)
    err = refused(RLConfig, ["@", path], capsys)
    assert path in err and "64 levels" in err and err.count("\n") == 1, err
    assert len(err) < 1000, err


def test_a_file_at_the_nesting_limit_is_read(tmp_path, capsys):
    text = "[inference.vllm_args]\nx = " + "[" * 61 + "1" + "]" * 61 + "\n"
    config, _ = parse_config(RLConfig, "rl", ["@", toml(tmp_path, text)], sections=SECTIONS)
    value = config.inference.vllm_args["x"]
    for _ in range(61):
        value = value[0]
    assert value == 1


@pytest.mark.timeout(60)
@pytest.mark.parametrize(
    "argv",
    [
        ["--" + ".".join(["a"] * 50_000), "1"],
        ["--inference.vllm-args." + ".".join(["a"] * 100), "1"],
        ["--inference.vllm-args", "{a = " * 5_000 + "1" + "}" * 5_000],
        ["--inference.vllm-args", '{"a": ' * 5_000 + "1" + "}" * 5_000],
        ["--trainer-gpu-ids", "[" * 5_000 + "]" * 5_000],
    ],
    ids=["key_parts", "key_parts_in_a_table", "toml_value", "json_value", "list_value"],
)
def test_a_flag_nested_too_deeply_is_refused_naming_it(capsys, argv):
    err = refused(RLConfig, argv, capsys)
    assert argv[0][:20] in err and "64 levels" in err and err.count("\n") == 1, err
    assert len(err) < 1000, err


def test_a_workflow_nested_too_deeply_is_refused_naming_it(tmp_path):
    from launcher.lockfile import read_yaml

    path = tmp_path / "w.yaml"
    path.write_text("job: {name: w}\nrl: " + "{a: " * 200 + "1" + "}" * 200 + "\n")
    with pytest.raises(ConfigError, match="64 levels") as err:
        read_yaml(path, "the workflow config")
    assert str(path) in str(err.value)


@pytest.mark.timeout(120)
@pytest.mark.parametrize("table", ["", "[optim]\n"], ids=["top_level", "in_a_table"])
def test_many_unknown_keys_are_one_short_message_found_fast(tmp_path, capsys, table):
    """20,000 unknown keys took over a minute and printed a line each: now the first few are
    named (with did-you-mean), then the count; linear time."""
    import time

    keys = "".join(f'unknown_key_{i} = "x"\n' for i in range(20_000))
    path = toml(tmp_path, table + "lrr = 1\n" * bool(table) + keys)
    started = time.monotonic()
    err = refused(RLConfig, ["--trainer", "@", path], capsys)
    assert time.monotonic() - started < 20, "unknown keys must be reported in linear time"
    assert err.count("\n") <= 12 and len(err) < 4000, err
    assert "unknown_key_0`" in err and "unknown_key_19999" not in err, err
    assert "and 19,99" in err and "more unknown keys" in err, err
    if table:
        assert "did you mean lr" in err, err


def test_a_few_unknown_keys_are_each_named(tmp_path, capsys):
    path = toml(tmp_path, "".join(f"key_{i} = 1\n" for i in range(3)))
    err = refused(TrainerConfig, ["@", path], capsys)
    assert [f"`key_{i}`" in err for i in range(3)] == [True] * 3 and "more" not in err, err


def test_many_bad_values_are_one_short_message(tmp_path, capsys):
    path = toml(tmp_path, "[vllm_args]\n" + "".join(f"k{i} = nan\n" for i in range(5_000)))
    err = refused(RLConfig, ["--inference", "@", path], capsys)
    assert err.count("\n") <= 12 and "and 4,990 more such values" in err, err
