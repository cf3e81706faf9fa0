"""`rl` with a LoRA trainer: inference is told to serve adapters of that rank."""

import pytest

from launcher.plan import derive
from launcher.rl_config import RLConfig
from rlcore.errors import ConfigError


def rl_config(**sections) -> RLConfig:
    return RLConfig.model_validate(sections)


@pytest.mark.parametrize(("rank", "max_rank"), [(4, 8), (8, 8), (16, 16), (33, 64)])
def test_inference_lora_is_filled_from_the_trainer(rank, max_rank):
    config = derive(rl_config(trainer={"lora": {"rank": rank}}))
    assert config.inference.lora is not None
    assert config.inference.lora.max_rank == max_rank


def test_full_fine_tuning_leaves_inference_alone():
    assert derive(rl_config()).inference.lora is None


def test_too_small_a_serving_rank_is_refused():
    config = rl_config(trainer={"lora": {"rank": 32}}, inference={"lora": {"max_rank": 16}})
    with pytest.raises(ConfigError, match="inference.lora.max_rank = 16.*to 32 or more"):
        derive(config)
    with pytest.raises(ConfigError, match="up to rank 512"):
        derive(rl_config(trainer={"lora": {"rank": 600}}))
