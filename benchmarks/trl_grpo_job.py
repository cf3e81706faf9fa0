"""The quick start's job done by TRL's GRPOTrainer; run by benchmarks/vs_trl.py inside its TRL
environment (it imports nothing from this project). Writes per-step rewards and step times as
JSON to --result."""

import argparse
import json
import re
import time

from datasets import Dataset
from transformers import AutoTokenizer, TrainerCallback
from trl import GRPOConfig, GRPOTrainer

INTEGER = re.compile(r"-?\d+")


class StepTimes(TrainerCallback):
    def __init__(self):
        self.last, self.times = time.perf_counter(), []

    def on_step_end(self, args, state, control, **kwargs):
        now = time.perf_counter()
        self.times.append(now - self.last)
        self.last = now


def reward_function(tokenizer, max_tokens: int):
    """1.0 when the answer's last integer is the sum; a truncated answer scores 0."""

    def correct_sum(completions, answer, **kwargs):
        rewards = []
        ids = kwargs.get("completion_ids")
        for i, (completion, expected) in enumerate(zip(completions, answer, strict=True)):
            text = completion[-1]["content"] if isinstance(completion, list) else completion
            n = len(ids[i]) if ids is not None else len(tokenizer(text)["input_ids"])
            found = INTEGER.findall(text)
            ok = n < max_tokens and found and int(found[-1]) == int(expected)
            rewards.append(1.0 if ok else 0.0)
        return rewards

    return correct_sum


def main() -> None:
    parser = argparse.ArgumentParser()
    for flag in ("--model", "--data", "--out", "--result"):
        parser.add_argument(flag, required=True)
    for flag in ("--seed", "--steps", "--prompts", "--group", "--max-tokens"):
        parser.add_argument(flag, type=int, required=True)
    parser.add_argument("--lr", type=float, required=True)
    args = parser.parse_args()
    rows = [json.loads(line) for line in open(args.data)]
    tokenizer = AutoTokenizer.from_pretrained(args.model)
    config = GRPOConfig(
        output_dir=args.out,
        learning_rate=args.lr,
        max_steps=args.steps,
        seed=args.seed,
        per_device_train_batch_size=args.prompts * args.group,
        num_generations=args.group,
        max_completion_length=args.max_tokens,
        temperature=1.0,
        beta=0.0,
        loss_type="dapo",
        lr_scheduler_type="constant",
        max_grad_norm=1.0,
        logging_steps=1,
        save_strategy="no",
        report_to="none",
        bf16=False,
        use_cpu=True,
    )
    times = StepTimes()
    trainer = GRPOTrainer(
        model=args.model,
        args=config,
        train_dataset=Dataset.from_list(rows),
        reward_funcs=reward_function(tokenizer, args.max_tokens),
        processing_class=tokenizer,
        callbacks=[times],
    )
    trainer.train()
    rewards = [h["reward"] for h in trainer.state.log_history if "reward" in h]
    with open(args.result, "w") as out:
        json.dump({"rewards": rewards, "step_s": times.times[5:]}, out)


if __name__ == "__main__":
    main()
