"""SFT without a process: rows to tokens and targets, the order of examples, packing, bad data,
and the loss against a hand computation on the tiny model."""

import json

import pytest
import torch

from rlcore.errors import ConfigError
from trainer.dist import World
from trainer.model import load_model
from trainer.sft.config import SFTConfig
from trainer.sft.data import (
    Example,
    chat_tokens,
    load_rows,
    pack,
    step_examples,
    text_tokens,
    tokenize_rows,
)
from trainer.sft.train import SFT, backward  # imports trainer.train: ldconfig runs at import


@pytest.fixture(scope="module")
def tokenizer(tiny_model_dir):
    from transformers import AutoTokenizer

    return AutoTokenizer.from_pretrained(tiny_model_dir)


def trained_text(tokenizer, ids, targets) -> str:
    return tokenizer.decode([i for i, t in zip(ids, targets, strict=True) if t])


def test_a_chat_trains_on_every_assistant_turn_only(tokenizer):
    messages = [
        {"role": "system", "content": "Be brief."},
        {"role": "user", "content": "2+2?"},
        {"role": "assistant", "content": "4"},
        {"role": "user", "content": "3+3?"},
        {"role": "assistant", "content": "6"},
    ]
    ids, targets = chat_tokens(messages, tokenizer, "row 0")
    assert tokenizer.decode(ids).count("<|im_start|>") == 5
    assert trained_text(tokenizer, ids, targets) == "4<|im_end|>\n6<|im_end|>\n"


def test_prompt_and_completion_train_on_the_completion(tokenizer):
    ids, targets = text_tokens("1+1=", "2", tokenizer)
    assert trained_text(tokenizer, ids, targets) == "2" + tokenizer.eos_token
    rows = [
        {
            "prompt": [{"role": "user", "content": "hi"}],
            "completion": [{"role": "assistant", "content": "yo"}],
        }
    ]
    (example,), _ = tokenize_rows(rows, tokenizer, 64, "truncate", "f.jsonl")
    assert trained_text(tokenizer, example.ids, example.targets) == "yo<|im_end|>\n"


def test_bad_rows_name_the_source_the_row_and_the_fix(tokenizer):
    rows = [
        {"messages": [{"role": "user", "content": "a"}, {"role": "assistant", "content": "b"}]},
        {"question": "q", "answer": "a"},
    ]
    with pytest.raises(ConfigError, match=r"f.jsonl, row 1: has columns \['answer', 'question'\]"):
        tokenize_rows(rows, tokenizer, 64, "truncate", "f.jsonl")
    with pytest.raises(ConfigError, match="row 0: no assistant message"):
        tokenize_rows(
            [{"messages": [{"role": "user", "content": "a"}]}], tokenizer, 64, "truncate", "f.jsonl"
        )
    with pytest.raises(ConfigError, match="both be text or both chat"):
        tokenize_rows(
            [{"prompt": "a", "completion": [{"role": "assistant", "content": "b"}]}],
            tokenizer,
            64,
            "truncate",
            "f.jsonl",
        )


def test_long_rows_are_cut_or_left_out_and_counted(tokenizer):
    rows = [{"prompt": "short", "completion": "x"}, {"prompt": "word " * 50, "completion": "y"}]
    examples, counts = tokenize_rows(rows, tokenizer, 20, "truncate", "f")
    # cut to 20 tokens, the long row's completion is gone: nothing left to train on
    assert [e.row for e in examples] == [0] and counts.truncated == 1
    assert counts.dropped_empty == 1
    examples, counts = tokenize_rows(rows, tokenizer, 20, "drop", "f")
    assert [e.row for e in examples] == [0] and counts.dropped_long == 1
    with pytest.raises(ConfigError, match="no row has a token to train on"):
        tokenize_rows(rows[1:], tokenizer, 20, "drop", "f")


def test_the_examples_of_a_step_depend_on_seed_and_step_only():
    steps = [step_examples(10, 4, s, seed=3, shuffle=True) for s in range(1, 6)]
    assert steps == [step_examples(10, 4, s, seed=3, shuffle=True) for s in range(1, 6)]
    flat = [i for step in steps for i in step]
    assert sorted(flat[:10]) == list(range(10)) and sorted(flat[10:20]) == list(range(10))
    assert flat[:10] != flat[10:20]  # each epoch reshuffled
    assert steps[0] != step_examples(10, 4, 1, seed=4, shuffle=True)
    assert step_examples(10, 4, 2, seed=3, shuffle=False) == [4, 5, 6, 7]


def test_packing_keeps_examples_apart_and_aligns_targets():
    examples = [
        Example([5, 6, 7], [False, True, True], 0),
        Example([8, 9], [False, True], 1),
        Example([1, 2, 3, 4], [False, False, True, True], 2),
    ]
    rows = pack(examples, tokens=5)
    assert [r.input_ids.tolist() for r in rows] == [[[5, 6, 7, 8, 9]], [[1, 2, 3, 4]]]
    assert rows[0].position_ids.tolist() == [[0, 1, 2, 0, 1]]
    # logits at j score token j + 1 of the same example; never across examples
    assert rows[0].target_ids.tolist() == [6, 7, 0, 9, 0]
    assert rows[0].loss_mask.tolist() == [True, True, False, True, False]
    assert rows[1].loss_mask.tolist() == [False, True, True, False]


def test_sources_files_folders_and_their_errors(tmp_path):
    import datasets

    rows = [{"prompt": f"{i}+1=", "completion": str(i + 1)} for i in range(3)]
    jsonl = tmp_path / "d.jsonl"
    jsonl.write_text("\n".join(json.dumps(r) for r in rows))
    assert load_rows(str(jsonl), "train", "data.name") == rows
    parquet = tmp_path / "d.parquet"
    datasets.Dataset.from_list(rows).to_parquet(str(parquet))
    assert load_rows(str(parquet), "train", "data.name") == rows
    folder = tmp_path / "saved"
    splits = {"train": rows, "validation": rows[:1]}
    datasets.DatasetDict(
        {k: datasets.Dataset.from_list(v) for k, v in splits.items()}
    ).save_to_disk(folder)
    assert load_rows(str(folder), "validation", "val.name") == rows[:1]
    with pytest.raises(
        ConfigError, match=r"has no split 'test' \(it has \['train', 'validation'\]\)"
    ):
        load_rows(str(folder), "test", "val.name")
    with pytest.raises(ConfigError, match="is one file, read as the `train` split"):
        load_rows(str(jsonl), "validation", "val.name")
    (tmp_path / "d.csv").write_text("a,b\n")
    with pytest.raises(ConfigError, match=r"a \.csv file; give a \.jsonl"):
        load_rows(str(tmp_path / "d.csv"), "train", "data.name")
    (tmp_path / "empty.jsonl").write_text("")
    with pytest.raises(ConfigError, match="empty.jsonl"):
        load_rows(str(tmp_path / "empty.jsonl"), "train", "data.name")


def test_config_reads_prime_rl_names_and_checks_the_pass_size():
    config = SFTConfig.model_validate({"data": {"name": "d.jsonl", "seq_len": 512}})
    assert config.seq_len == 512 and config.tokens_per_pass(on_cpu=False) == 512
    short = SFTConfig.model_validate({"data": {"name": "d"}, "seq_len": 64})
    assert short.tokens_per_pass(on_cpu=True) == 512 and short.tokens_per_pass(on_cpu=False) == 64
    with pytest.raises(ValueError, match="micro_batch_tokens = 100 is below seq_len = 512"):
        SFTConfig.model_validate({"seq_len": 512, "data": {"name": "d", "micro_batch_tokens": 100}})


def test_the_loss_is_the_mean_nll_of_target_tokens(tiny_model_dir, tokenizer, tmp_path):
    """backward()'s loss against a hand computation: each example alone through the model,
    -log p(target) summed over completion tokens only, divided by their count."""
    rows = [
        {"prompt": "What is 2+3?", "completion": " 5"},
        {
            "messages": [
                {"role": "user", "content": "Say hi"},
                {"role": "assistant", "content": "hi there"},
            ]
        },
        {"prompt": "x", "completion": " yz"},
    ]
    examples, _ = tokenize_rows(rows, tokenizer, 64, "truncate", "f")
    config = SFTConfig.model_validate(
        {
            "model": {"name": str(tiny_model_dir), "dtype": "float32"},
            "seq_len": 64,
            "data": {"name": "unused", "micro_batch_tokens": 64},
            "output_dir": str(tmp_path),
        }
    )
    world = World(rank=0, world_size=1, device=torch.device("cpu"), distributed=False)
    model = load_model(config.model, str(tiny_model_dir), world, masked_rows=False)  # as sft
    assert model.config._attn_implementation == "varlen"  # sample by sample on a CPU
    sft = SFT(config, world, None, model, None, None, None, examples, [])
    loss, num_targets = backward(sft, examples)

    nll, count = 0.0, 0
    with torch.no_grad():
        plain = load_model(
            config.model.model_copy(update={"logprob_chunk_tokens": None}),
            str(tiny_model_dir),
            world,
        )
        for e in examples:
            logits = plain(input_ids=torch.tensor([e.ids])).logits[0].double()
            logprobs = torch.log_softmax(logits, -1)
            for j in range(1, len(e.ids)):
                if e.targets[j]:
                    nll -= float(logprobs[j - 1, e.ids[j]])
                    count += 1
    assert num_targets == count == sum(sum(e.targets) for e in examples)
    assert loss == pytest.approx(nll / count, rel=1e-5)
    assert any(p.grad is not None and p.grad.abs().sum() > 0 for p in model.parameters())


def test_a_compiled_model_keeps_sdpa_though_its_rows_carry_no_mask(tiny_model_dir):
    world = World(rank=0, world_size=1, device=torch.device("cpu"), distributed=False)
    config = SFTConfig.model_validate(
        {
            "model": {"name": str(tiny_model_dir), "dtype": "float32", "compile": True},
            "data": {"name": "unused"},
        }
    )
    model = load_model(config.model, str(tiny_model_dir), world, masked_rows=False)
    assert model.config._attn_implementation == "sdpa"  # no per-sample loop under compile
