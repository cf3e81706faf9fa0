"""The real `inference` server on CPU with the tiny model: OpenAI routes with token ids and
logprobs, in-place weight swaps (only with the run's token, only from the run's own weights
folder), refusals that leave the served weights alone, clean SIGTERM.

The server is the session's shared one (tests/integration/conftest.py), which also checks
its clean SIGTERM at the end; vLLM takes about a minute to start on 2 cores."""

import shutil
import socket
from pathlib import Path

import pytest

from rlcore import faults
from rlcore.contracts.protocol import (
    MODELS_ROUTE,
    RELOAD_WEIGHTS_ROUTE,
    UPDATE_WEIGHTS_ROUTE,
)
from rlcore.processes.health import HEALTH_ROUTE
from tests.inference_process import InferenceProcess, post_json

pytestmark = pytest.mark.integration

PORTS = range(8150, 8170)
PROMPT_IDS = [1, 9690, 198, 2683, 359, 253, 5356, 2, 198, 1, 4093, 198, 6004, 2]


def free_port() -> int:
    for port in PORTS:
        with socket.socket() as sock:
            if sock.connect_ex(("127.0.0.1", port)) != 0:
                return port
    raise RuntimeError(f"no free port in {PORTS}")


def perturbed_copy(src: Path, dst: Path, scale: float, seed: int) -> Path:
    import torch
    from safetensors.torch import load_file, save_file

    shutil.copytree(src, dst)
    tensors = load_file(dst / "model.safetensors")
    gen = torch.Generator().manual_seed(seed)
    noisy = {k: v + scale * torch.randn(v.shape, generator=gen) for k, v in tensors.items()}
    save_file(noisy, dst / "model.safetensors", metadata={"format": "pt"})
    return dst


@pytest.fixture(scope="module")
def run_dir(shared_server, tiny_model_dir) -> Path:
    """The shared server's run folder (tests/integration/conftest.py), its weights/ emptied of
    an earlier module's policies and given new ones: the base, a perturbed copy, two broken."""
    root = shared_server.run
    weights = root / "weights"
    shutil.rmtree(weights, ignore_errors=True)
    shutil.copytree(tiny_model_dir, weights / "step_0")
    perturbed_copy(tiny_model_dir, weights / "step_1", scale=0.05, seed=1)
    truncated = weights / "truncated"
    shutil.copytree(tiny_model_dir, truncated)
    data = (truncated / "model.safetensors").read_bytes()
    (truncated / "model.safetensors").write_bytes(data[: len(data) // 2])
    wrong_shape = weights / "wrong_shape"
    wrong_shape.mkdir()
    shutil.copy(tiny_model_dir / "config.json", wrong_shape)
    import torch
    from safetensors.torch import save_file

    save_file({"model.embed_tokens.weight": torch.zeros(10, 64)}, wrong_shape / "m.safetensors")
    yield root
    status, body = shared_server.process.admin_post(RELOAD_WEIGHTS_ROUTE, {})
    assert status == 200, body  # the next module finds the base weights serving


@pytest.fixture(scope="module")
def server(shared_server, run_dir) -> InferenceProcess:
    return shared_server.process


def chat(url: str, max_tokens: int = 6) -> dict:
    status, body = post_json(
        url + "/v1/chat/completions",
        {
            "messages": [{"role": "user", "content": "What is 2+3?"}],
            "max_tokens": max_tokens,
            "temperature": 0,
            "logprobs": True,
            "return_token_ids": True,
        },
    )
    assert status == 200, body
    return body


def prompt_logprobs(url: str) -> list[float]:
    """Logprob of every prompt token after the first under the weights serving now."""
    status, body = post_json(
        url + "/v1/completions",
        {"prompt": PROMPT_IDS, "max_tokens": 1, "prompt_logprobs": 0, "temperature": 0},
    )
    assert status == 200, body
    entries = body["choices"][0]["prompt_logprobs"][1:]
    return [entry[str(tok)]["logprob"] for tok, entry in zip(PROMPT_IDS[1:], entries, strict=True)]


def hf_prompt_logprobs(folder: Path) -> list[float]:
    """The same logprobs from transformers' fp32 forward of the weights in `folder`."""
    import torch
    from transformers import AutoModelForCausalLM

    model = AutoModelForCausalLM.from_pretrained(folder, dtype=torch.float32)
    with torch.no_grad():
        logprobs = torch.log_softmax(model(torch.tensor([PROMPT_IDS])).logits.float(), dim=-1)[0]
    return [logprobs[i, tok].item() for i, tok in enumerate(PROMPT_IDS[1:])]


def max_diff(a: list[float], b: list[float]) -> float:
    assert len(a) == len(b)
    return max(abs(x - y) for x, y in zip(a, b, strict=True))


def test_health_and_models(server, tiny_model_dir):
    import httpx

    assert httpx.get(server.url + HEALTH_ROUTE, timeout=10).status_code == 200
    answer = httpx.get(server.url + MODELS_ROUTE, timeout=10)
    assert answer.json()["data"][0]["id"] == str(tiny_model_dir)


def test_chat_returns_token_ids_and_logprobs(server):
    body = chat(server.url)
    choice = body["choices"][0]
    assert body["prompt_token_ids"][:1] == [1]  # <|im_start|>, from the ChatML template
    assert len(choice["token_ids"]) == body["usage"]["completion_tokens"] > 0
    logprobs = [entry["logprob"] for entry in choice["logprobs"]["content"]]
    assert len(logprobs) == len(choice["token_ids"]) and all(lp <= 0 for lp in logprobs)


def test_update_weights_swaps_in_place_and_back(server, run_dir):
    base = prompt_logprobs(server.url)
    status, body = server.admin_post(
        UPDATE_WEIGHTS_ROUTE, {"weight_dir": str(run_dir / "weights/step_1")}
    )
    assert status == 200 and body["weights"].endswith("step_1"), body
    changed = prompt_logprobs(server.url)
    assert max_diff(base, changed) > 1e-3
    # exactly the folder's weights, the tied lm_head included (CPU prepacks linear weights)
    assert max_diff(changed, hf_prompt_logprobs(run_dir / "weights/step_1")) < 1e-4

    status, body = server.admin_post(
        UPDATE_WEIGHTS_ROUTE, {"weight_dir": str(run_dir / "weights/step_0")}
    )
    assert status == 200, body
    assert max_diff(base, prompt_logprobs(server.url)) < 1e-4

    server.admin_post(UPDATE_WEIGHTS_ROUTE, {"weight_dir": str(run_dir / "weights/step_1")})
    status, body = server.admin_post(RELOAD_WEIGHTS_ROUTE, {})
    assert status == 200, body
    assert max_diff(base, prompt_logprobs(server.url)) < 1e-4


@pytest.mark.parametrize(
    ("folder", "status", "words"),
    [
        ("weights/truncated", 422, "not a readable safetensors file"),
        ("weights/wrong_shape", 422, "does not match the served model"),
        ("weights/nothing_here", 404, "does not exist"),
        ("weights", 422, "config.json"),
    ],
)
def test_bad_folder_is_refused_and_weights_keep_serving(server, run_dir, folder, status, words):
    server.admin_post(UPDATE_WEIGHTS_ROUTE, {"weight_dir": str(run_dir / "weights/step_1")})
    before = prompt_logprobs(server.url)
    code, body = server.admin_post(UPDATE_WEIGHTS_ROUTE, {"weight_dir": str(run_dir / folder)})
    assert code == status and words in body["detail"], body
    assert max_diff(before, prompt_logprobs(server.url)) < 1e-5


def test_folder_outside_root_is_refused(server, run_dir, tiny_model_dir):
    run_level = run_dir / "not_weights"
    if not run_level.exists():
        shutil.copytree(tiny_model_dir, run_level)  # inside output_dir, but not in weights/
    linked = run_dir / "weights" / "linked_out"
    if not linked.exists():
        linked.symlink_to(tiny_model_dir, target_is_directory=True)
    for outside in (tiny_model_dir, run_dir / "weights" / ".." / "..", run_level, linked):
        code, body = server.admin_post(UPDATE_WEIGHTS_ROUTE, {"weight_dir": str(outside)})
        assert code == 403 and "outside the allowed root" in body["detail"], body
    assert chat(server.url, max_tokens=2)["choices"][0]["token_ids"]


def test_a_file_linked_out_of_the_weights_folder_is_refused(server, run_dir, tiny_model_dir):
    folder = run_dir / "weights" / "file_linked_out"
    if not folder.exists():
        shutil.copytree(tiny_model_dir, folder)
        (folder / "model.safetensors").unlink()
        (folder / "model.safetensors").symlink_to(tiny_model_dir / "model.safetensors")
    code, body = server.admin_post(UPDATE_WEIGHTS_ROUTE, {"weight_dir": str(folder)})
    assert code == 403 and "links outside the allowed root" in body["detail"], body


def test_admin_routes_need_the_token_on_loopback_too(server, run_dir):
    server.admin_post(UPDATE_WEIGHTS_ROUTE, {"weight_dir": str(run_dir / "weights/step_1")})
    before = prompt_logprobs(server.url)
    step_0 = {"weight_dir": str(run_dir / "weights/step_0")}
    for headers in ({}, {"Authorization": "Bearer not-the-token"}):
        for route, body in ((UPDATE_WEIGHTS_ROUTE, step_0), (RELOAD_WEIGHTS_ROUTE, {})):
            code, answer = post_json(server.url + route, body, headers=headers)
            assert code == 401 and "admin_token" in answer["detail"], answer
    assert max_diff(before, prompt_logprobs(server.url)) < 1e-5
    token_file = run_dir / "admin_token"
    assert token_file.read_text().strip() == server.admin_token
    assert token_file.stat().st_mode & 0o777 == 0o600


def test_malformed_load_request_is_refused(server):
    code, body = server.admin_post(UPDATE_WEIGHTS_ROUTE, {"folder": "weights/step_1"})
    assert code == 422 and '{"weight_dir": PATH}' in body["detail"], body
    assert chat(server.url, max_tokens=2)["choices"][0]["token_ids"]


def test_update_waits_for_requests_in_flight(server, run_dir):
    from concurrent.futures import ThreadPoolExecutor

    with ThreadPoolExecutor(4) as pool:
        streams = [pool.submit(chat, server.url, 64) for _ in range(3)]
        status, body = server.admin_post(
            UPDATE_WEIGHTS_ROUTE, {"weight_dir": str(run_dir / "weights/step_1")}
        )
        answers = [stream.result(timeout=300) for stream in streams]
    assert status == 200, body
    for answer in answers:  # none aborted or cut short by the swap
        assert answer["choices"][0]["finish_reason"] in ("length", "stop")
        assert len(answer["choices"][0]["token_ids"]) == answer["usage"]["completion_tokens"]


@pytest.mark.slow
def test_a_timed_out_weight_apply_is_never_sent_again(run_dir, tiny_model_dir, tmp_path):
    """The workers may still be applying a reload that timed out: no restore is sent, and
    every later swap is refused (503) until inference restarts; the server stays up."""
    config = tmp_path / "infer.toml"
    config.write_text(
        f'output_dir = "{run_dir}"\n[model]\nname = "{tiny_model_dir}"\ndtype = "float32"\n'
        'max_model_len = 512\n[cpu]\nkvcache_space_gib = 1\nmatmul_dtype = "model"\n'
        "[weights]\ntimeout_s = 3\n"
    )
    port = free_port()
    slow = {faults.RELOAD_DELAY_ENV: "20"}
    proc = InferenceProcess(
        ["@", str(config), "--server.port", str(port)], tmp_path / "inf.log", env=slow
    )
    proc.start()
    try:
        proc.wait_ready(timeout_s=600)
        step_1 = {"weight_dir": str(run_dir / "weights/step_1")}
        status, body = proc.admin_post(UPDATE_WEIGHTS_ROUTE, step_1)
        assert status == 504 and "timed out after 3 s reloading" in body["detail"], body
        status, body = proc.admin_post(UPDATE_WEIGHTS_ROUTE, step_1)
        assert status == 503 and "restart inference" in body["detail"], body
        status, body = proc.admin_post(RELOAD_WEIGHTS_ROUTE, {})
        assert status == 503, body
        assert chat(proc.url, max_tokens=2)["choices"][0]["token_ids"]  # still serving
    finally:
        proc.stop(grace_s=30)
    log = proc.log_path.read_text()
    assert "restoring" not in log, log[-3000:]
