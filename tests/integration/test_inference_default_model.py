"""The bundled default model (SmolLM2-135M-Instruct, no network) served on CPU answers sensibly."""

import pytest

from rlcore.config.base import DEFAULT_MODEL
from tests.inference_process import InferenceProcess, post_json

pytestmark = [pytest.mark.integration, pytest.mark.slow]

PORT = 8175


def test_default_model_answers_arithmetic(tmp_path):
    flags = ["--model.name", DEFAULT_MODEL, "--server.port", str(PORT)]
    flags += ["--output-dir", str(tmp_path / "run"), "--cpu.kvcache-space-gib", "1"]
    with InferenceProcess(flags, tmp_path / "inference.log") as server:
        server.wait_ready(timeout_s=900)
        status, body = post_json(
            server.url + "/v1/chat/completions",
            {
                "model": DEFAULT_MODEL,
                "messages": [{"role": "user", "content": "What is 2+3?"}],
                "max_tokens": 30,
                "temperature": 0,
            },
        )
    assert status == 200, body
    choice = body["choices"][0]
    assert "5" in choice["message"]["content"], choice
    assert choice["finish_reason"] == "stop"  # ends its turn with <|im_end|>
