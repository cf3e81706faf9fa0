"""Write the SFT example's data: solved two-digit additions in `rl-add-digits`' own prompt
format, from the environment's training split only (its eval split stays held out for evals).

    python examples/sft_then_rl/make_data.py     # -> examples/sft_then_rl/data/{train,val}.jsonl
"""

import json
import sys
from pathlib import Path

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE.parents[1] / "environments"))

from rl_add_digits import build_rows  # noqa: E402
from rl_envs import seeded_split  # noqa: E402

NUM_EVAL = 100  # as `num_eval_examples` in rl.toml and eval.toml
NUM_TRAIN, NUM_VAL = 2000, 100


def chat(row: dict) -> dict:
    return {
        "messages": [
            {"role": "user", "content": row["question"]},
            {"role": "assistant", "content": row["answer"]},
        ]
    }


def main() -> None:
    train, _held_out = seeded_split(build_rows(digits=2), seed=0, num_eval=NUM_EVAL)
    out = HERE / "data"
    out.mkdir(exist_ok=True)
    splits = {"train": train[:NUM_TRAIN], "val": train[NUM_TRAIN : NUM_TRAIN + NUM_VAL]}
    for name, rows in splits.items():
        path = out / f"{name}.jsonl"
        path.write_text("".join(json.dumps(chat(r)) + "\n" for r in rows))
        print(f"wrote {len(rows)} rows to {path}")


if __name__ == "__main__":
    main()
