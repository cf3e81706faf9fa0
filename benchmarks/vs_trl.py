"""The quick start against TRL's GRPOTrainer on the same machine, one after the other: the same
job (the bundled SmolLM2-135M, one-digit addition, 25 steps of 4 prompts x 8 rollouts, 16
tokens, lr 3e-5, token-level loss, temperature 1, truncated answers score 0, no KL term), and
the ratios ours / TRL's of wall time (command to exit), steady step (steps 5-24), peak memory
over all processes (PSS), bytes the processes wrote (sampled per process), bytes that reached
the disks (/proc/diskstats, after a sync), and the last-5 mean reward. Our side also prints
where its time went (startup, and each part of a steady step) and memory and writes by process;
each side's memory over time (PSS per role every 2 s) lands next to its log as `*.memory.jsonl`.

    python benchmarks/vs_trl.py [--seeds 0,1] [--skip-trl] [--skip-ours] [--trl-version X]
                                [--work DIR]
                                [our side's extra rl flags: --weight-transfer.type filesystem]
    python benchmarks/vs_trl.py --sweep [--steps 15] [--points 32,64,128,64t,256t,multi]

TRL never enters the project's environment: the script builds its own with uv in the cache
folder (`trl-env/`: trl plus the torch, transformers, datasets and accelerate versions this
environment has, so both sides run the same kernels) and runs TRL there on plain HF generate
in fp32. Bars (issue "beat TRL"): wall <= 0.8x, last-5 reward >= 0.8, memory <= 8 GiB,
<= 2 GB written.
"""

import argparse
import sys
import tempfile
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from benchmarks.common import save  # noqa: E402
from benchmarks.vs_trl_common import print_row, run_ours, run_trl, summary  # noqa: E402


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--seeds", default="0")
    parser.add_argument("--skip-trl", action="store_true")
    parser.add_argument("--skip-ours", action="store_true")
    parser.add_argument("--trl-version", default=None)
    parser.add_argument("--work", default=None, help="keep both runs' folders and logs here")
    parser.add_argument("--sweep", action="store_true", help="several job sizes (vs_trl_sweep)")
    parser.add_argument("--points", default=None, help="--sweep: some points only (32,64t,...)")
    parser.add_argument("--steps", type=int, default=15, help="--sweep: steps per point")
    args, extra = parser.parse_known_args()
    if args.sweep:
        from benchmarks.vs_trl_sweep import sweep

        return sweep(args, extra)
    results = {}
    for seed in map(int, args.seeds.split(",")):
        with tempfile.TemporaryDirectory(prefix="vs_trl_") as tmp:
            work = Path(args.work) / f"seed{seed}" if args.work else Path(tmp)
            work.mkdir(parents=True, exist_ok=True)
            trl = {} if args.skip_trl else summary(run_trl(seed, work, args.trl_version))
            ours = {} if args.skip_ours else summary(run_ours(seed, work, extra))
        results[seed] = {"ours": ours, "trl": trl}
        print_row(seed, ours, trl)
    save("vs_trl", results)


if __name__ == "__main__":
    main()
