"""Start `inference` and measure startup time and generation throughput.

    .venv/bin/python benchmarks/inference_throughput.py [--model NAME] [--port 8190]
        [--dtype bfloat16] [--tokens 128] [--concurrency 32] [extra inference flags ...]

Prints the startup time (process start to /health), the answer to "What is 2+3?", and tokens/s
for one stream and for `--concurrency` parallel streams (each `--tokens` long, ignoring eos).
"""

import argparse
import sys
import tempfile
import time
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from rlcore.config.base import DEFAULT_MODEL  # noqa: E402
from tests.inference_process import InferenceProcess, post_json  # noqa: E402


def complete(url: str, num_tokens: int, seed: int) -> int:
    status, body = post_json(
        url + "/v1/chat/completions",
        {
            "messages": [{"role": "user", "content": f"Tell me a story about the number {seed}."}],
            "max_tokens": num_tokens,
            "temperature": 1.0,
            "ignore_eos": True,
            "seed": seed,
        },
    )
    assert status == 200, body
    return body["usage"]["completion_tokens"]


def throughput(url: str, num_streams: int, num_tokens: int) -> float:
    start = time.monotonic()
    with ThreadPoolExecutor(num_streams) as pool:
        done = sum(pool.map(lambda i: complete(url, num_tokens, i), range(num_streams)))
    return done / (time.monotonic() - start)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--model", default=DEFAULT_MODEL)
    parser.add_argument("--port", type=int, default=8190)
    parser.add_argument("--dtype", default="bfloat16")
    parser.add_argument("--tokens", type=int, default=128)
    parser.add_argument("--concurrency", type=int, default=32)
    known, extra = parser.parse_known_args()
    run_dir = Path(tempfile.mkdtemp(prefix="inference_bench_"))
    flags = ["--model.name", known.model, "--model.dtype", known.dtype]
    flags += ["--server.port", str(known.port), "--output-dir", str(run_dir), *extra]
    server = InferenceProcess(flags, run_dir / "inference.log")
    start = time.monotonic()
    with server:
        server.wait_ready(timeout_s=900)
        print(f"startup: {time.monotonic() - start:.1f} s (process start to /health)")
        status, body = post_json(
            server.url + "/v1/chat/completions",
            {
                "messages": [{"role": "user", "content": "What is 2+3?"}],
                "max_tokens": 40,
                "temperature": 0,
            },
        )
        print(f"'What is 2+3?' -> {body['choices'][0]['message']['content']!r}")
        complete(server.url, 8, 0)  # warm-up
        single = throughput(server.url, 1, known.tokens)
        print(f"1 stream: {single:.1f} tokens/s ({known.tokens} tokens)")
        many = throughput(server.url, known.concurrency, known.tokens)
        print(f"{known.concurrency} concurrent: {many:.1f} tokens/s ({known.tokens} tokens each)")
    print(f"log: {server.log_path}")


if __name__ == "__main__":
    main()
