"""The parity guard judges an attempt's first on-policy step, names the causes the trainer can
tell, and the knob for each."""

import json
import shutil

import pytest

from trainer.config import DataConfig
from trainer.train import TrainingError, check_parity, setup_trainer


def real_data(trainer):
    """The check is skipped on synthetic batches: pretend these came from an orchestrator."""
    trainer.config = trainer.config.model_copy(update={"data": DataConfig()})
    return trainer


def test_no_known_cause_lists_the_usual_suspects(tiny_model_dir, tmp_path, fake_config, cpu_world):
    trainer = real_data(setup_trainer(fake_config(tiny_model_dir, tmp_path), cpu_world))
    assert trainer.parity_causes == []
    check_parity(trainer, 1, 0, {"mismatch_kl": 5e-4})  # fp32: limit 1e-3
    check_parity(trainer, 2, 1, {"mismatch_kl": 3.0})  # only the attempt's first step
    trainer.parity_pending = True  # a new attempt
    with pytest.raises(TrainingError, match=r"mismatch_kl 2\.25 > 0\.001.*no known cause"):
        check_parity(trainer, 1, 0, {"mismatch_kl": 2.25})


def test_a_resume_at_async_1_is_judged_on_its_first_on_policy_batch(
    tiny_model_dir, tmp_path, fake_config, cpu_world
):
    """Resumed from step 2 at async_level 1, batch 2 comes from policy 1 while the trainer
    holds step 2: its mismatch_kl (0.0446 in a real run, the uninterrupted run's value too)
    measures staleness, not parity. Batch 3 from policy 3 is the one judged."""
    trainer = real_data(setup_trainer(fake_config(tiny_model_dir, tmp_path), cpu_world))
    trainer.start_step = 2
    check_parity(trainer, 3, 1, {"mismatch_kl": 0.0446})
    assert trainer.parity_pending
    with pytest.raises(TrainingError, match="parity check failed at step 4"):
        check_parity(trainer, 4, 3, {"mismatch_kl": 0.0446})


def test_a_batch_that_names_no_policy_is_judged_at_the_first_step_only(
    tiny_model_dir, tmp_path, fake_config, cpu_world
):
    trainer = real_data(setup_trainer(fake_config(tiny_model_dir, tmp_path), cpu_world))
    trainer.start_step = 2
    check_parity(trainer, 4, None, {"mismatch_kl": 3.0})  # not the first step: not judged
    trainer.parity_pending = True
    with pytest.raises(TrainingError):
        check_parity(trainer, 3, None, {"mismatch_kl": 3.0})


def test_sampling_defaults_and_dtype_are_named_with_their_knobs(
    tiny_model_dir, tmp_path, fake_config, cpu_world
):
    folder = tmp_path / "model"
    shutil.copytree(tiny_model_dir, folder)
    generation = json.loads((folder / "generation_config.json").read_text())
    generation |= {"do_sample": True, "top_k": 3, "repetition_penalty": 1.3, "top_p": 1.0}
    (folder / "generation_config.json").write_text(json.dumps(generation))
    model = {"name": str(folder), "dtype": "bfloat16", "serving_dtype": "float32"}
    config = fake_config(folder, tmp_path / "run", model=model)
    trainer = real_data(setup_trainer(config, cpu_world))
    with pytest.raises(TrainingError) as failure:
        check_parity(trainer, 1, 0, {"mismatch_kl": 2.25})
    message = str(failure.value)
    assert "mismatch_kl 2.25 > 0.01" in message  # bf16 compute: limit 1e-2
    assert "(1) dtype: the trainer computes in bfloat16 while inference serves float32" in message
    assert "set trainer.model.dtype = float32" in message
    assert "generation_config.json sets {'top_k': 3, 'repetition_penalty': 1.3}" in message
    assert "--generation-config vllm" in message


def test_an_attention_kernel_without_softcapping_is_named(tmp_path, fake_config, cpu_world):
    """A Gemma2 model (attention-logit softcapping) trained with sdpa, which cannot softcap:
    the trainer finds the cause itself and the parity failure names it with the fix."""
    from tests.families import build_family_model

    build_family_model("gemma2").save_pretrained(tmp_path / "gemma2")
    model = {"name": str(tmp_path / "gemma2"), "dtype": "float32", "attn_implementation": "sdpa"}
    config = fake_config(tmp_path / "gemma2", tmp_path / "run", model=model)
    trainer = real_data(setup_trainer(config, cpu_world))
    with pytest.raises(TrainingError) as failure:
        check_parity(trainer, 1, 0, {"mismatch_kl": 0.97})
    message = str(failure.value)
    assert message.startswith("parity check failed at step 1: mismatch_kl 0.97 > 0.001"), message
    assert (
        "Causes found: (1) the trainer's attention kernel sdpa lacks attention-logit softcapping "
        "at 10, which Gemma2ForCausalLM uses: set trainer.model.attn_implementation = auto (or "
        "eager)"
    ) in message, message
