"""Does a request's output depend on what vLLM batches it with? The quick start's inference
(SmolLM2-135M, fp32, CPU) is started without and with `--deterministic`; 32 seeded addition
requests are sent one at a time, all at once, in shuffled order, in halves, in pairs and with
random arrival times, and every way is compared with the others, token ids and logprobs bit for
bit. Prints the comparison and the wall time of each way.

    python -m benchmarks.batch_invariance
"""

import argparse
import asyncio
import random
import socket
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from benchmarks.common import REPO, save  # noqa: E402
from tests.inference_process import InferenceProcess  # noqa: E402

MODEL = "HuggingFaceTB/SmolLM2-135M-Instruct"
NUM_REQUESTS = 32


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]


def prompts() -> list[str]:
    draw = random.Random(0)
    return [
        f"What is {draw.randint(0, 9)} + {draw.randint(0, 9)}? Answer with the number only."
        for _ in range(NUM_REQUESTS)
    ]


async def one(http, url: str, prompt: str, seed: int, delay_s: float = 0.0) -> tuple:
    await asyncio.sleep(delay_s)
    body = {
        "model": MODEL,
        "messages": [{"role": "user", "content": prompt}],
        "max_tokens": 16,
        "temperature": 1.0,
        "top_p": 1.0,
        "logprobs": True,
        "seed": seed,
        "return_token_ids": True,
        "top_k": 0,
        "min_p": 0.0,
        "repetition_penalty": 1.0,
    }
    answer = await http.post(url + "/v1/chat/completions", json=body)
    answer.raise_for_status()
    choice = answer.json()["choices"][0]
    logprobs = tuple(x["logprob"] for x in choice["logprobs"]["content"])
    return tuple(choice.get("token_ids") or ()), logprobs


async def send(url: str, order: list[int], group: int, jitter_s: float) -> tuple[dict, float]:
    """Requests in `order`, `group` at a time (all: NUM_REQUESTS), each delayed by up to
    `jitter_s`; (index -> (token ids, logprobs), seconds)."""
    import httpx

    texts, delays = prompts(), random.Random(len(order) + group)
    out: dict[int, tuple] = {}
    started = time.monotonic()
    async with httpx.AsyncClient(timeout=600) as http:
        for start in range(0, len(order), group):
            part = order[start : start + group]
            answers = await asyncio.gather(
                *(one(http, url, texts[i], 1000 + i, delays.uniform(0, jitter_s)) for i in part)
            )
            out |= dict(zip(part, answers, strict=True))
    return out, time.monotonic() - started


WAYS = {  # name -> (shuffled, group size, arrival jitter in seconds)
    "one at a time": (False, 1, 0.0),
    "all at once": (False, NUM_REQUESTS, 0.0),
    "all at once, shuffled": (True, NUM_REQUESTS, 0.0),
    "in halves": (False, NUM_REQUESTS // 2, 0.0),
    "in pairs": (False, 2, 0.0),
    "random arrivals (0-0.5 s)": (False, NUM_REQUESTS, 0.5),
}


def measure(url: str) -> dict:
    results, seconds = {}, {}
    for name, (shuffled, group, jitter_s) in WAYS.items():
        order = list(range(NUM_REQUESTS))
        if shuffled:
            random.Random(1).shuffle(order)
        results[name], seconds[name] = asyncio.run(send(url, order, group, jitter_s))
        print(f"  {name}: {seconds[name]:.1f} s", flush=True)
    reference = results["all at once"]
    equal = {name: sum(got[i] == reference[i] for i in reference) for name, got in results.items()}
    for name, count in equal.items():
        print(f"  {name}: {count}/{NUM_REQUESTS} requests bit-identical to 'all at once'")
    return {"seconds": seconds, "bit_identical_to_all_at_once": equal}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--modes", default="default,deterministic")
    args = parser.parse_args()
    report = {}
    for mode in args.modes.split(","):
        with tempfile.TemporaryDirectory(prefix="batch_inv_") as tmp:
            port = free_port()
            run = Path(tmp) / "run"  # a new folder: the log lives beside it
            argv = [
                "@",
                str(REPO / "configs/quickstart/infer.toml"),
                "--output-dir",
                str(run),
                "--weight-transfer.type",
                "filesystem",
                "--server.port",
                str(port),
            ]
            argv += ["--deterministic"] if mode == "deterministic" else []
            print(f"{mode}:", flush=True)
            with InferenceProcess(argv, log_path=Path(tmp) / "inference.log") as server:
                server.wait_ready(timeout_s=900)
                report[mode] = measure(server.url)
    save("batch_invariance", report)


if __name__ == "__main__":
    main()
