"""Memory and speed options of the policy model: activation checkpointing on every n-th layer
gives the gradients of the plain model (torch.compile per decoder layer: tests/integration/
test_compiled_kernels.py), and out-of-memory errors name the knobs."""

import pytest
import torch

from trainer.config import TrainerConfig
from trainer.data import fake_batch
from trainer.model import decoder_layers
from trainer.train import setup_trainer, train_step


def gradients_after_one_step(model_dir, out, fake_config, world, **model_options):
    model = {"name": str(model_dir), "dtype": "float32", **model_options}
    config = fake_config(model_dir, out, ckpt={"enabled": False}, model=model)
    trainer = setup_trainer(config, world)
    trainer.optimizer.step = lambda: None  # keep the weights: compare the gradients themselves
    trainer.optimizer.zero_grad = lambda set_to_none=True: None
    batch = fake_batch(config.data.fake, 32, trainer.model.config.vocab_size, 0, 0)
    train_step(trainer, batch)
    grads = {n: p.grad.clone() for n, p in trainer.model.named_parameters()}
    return trainer.model, grads


# gradients_after_one_step replaces optimizer.step, which torch's scheduler notices
@pytest.mark.filterwarnings("ignore:Seems like `optimizer.step\\(\\)` has been overridden")
def test_checkpointing_every_second_layer(tiny_model_dir, tmp_path, fake_config, cpu_world):
    _, plain = gradients_after_one_step(tiny_model_dir, tmp_path / "a", fake_config, cpu_world)
    model, sparse = gradients_after_one_step(
        tiny_model_dir,
        tmp_path / "b",
        fake_config,
        cpu_world,
        activation_checkpointing=True,
        activation_checkpointing_freq=2,
    )
    flags = [layer.gradient_checkpointing for layer in decoder_layers(model)]
    assert len(flags) >= 2 and flags == [i % 2 == 0 for i in range(len(flags))]
    for name, grad in plain.items():
        torch.testing.assert_close(sparse[name], grad, msg=name)


def test_prime_rl_ac_table_sets_the_frequency():
    config = TrainerConfig.model_validate({"model": {"ac": {"freq": 3}}})
    assert config.model.activation_checkpointing and config.model.activation_checkpointing_freq == 3


OUT_OF_MEMORY = [  # what a GPU raises when an allocation does not fit: torch's, NCCL's
    torch.OutOfMemoryError("CUDA out of memory. Tried to allocate 9.27 GiB"),
    torch.distributed.DistBackendError(
        "NCCL error in: NCCLUtils.cpp:93, unhandled cuda error\nncclUnhandledCudaError: Call to "
        "CUDA function failed.\nLast error:\nFailed to CUDA calloc async 9.27 GiB"
    ),
]


@pytest.mark.parametrize("error", OUT_OF_MEMORY, ids=["torch", "nccl"])
def test_out_of_memory_names_the_knobs(tiny_model_dir, tmp_path, fake_config, cpu_world, error):
    from trainer.train import TrainingError

    config = fake_config(tiny_model_dir, tmp_path, ckpt={"enabled": False})
    trainer = setup_trainer(config, cpu_world)

    def no_memory(*args, **kwargs):
        raise error

    trainer.model.forward = no_memory
    batch = fake_batch(config.data.fake, 32, trainer.model.config.vocab_size, 0, 0)
    with pytest.raises(TrainingError) as failure:
        train_step(trainer, batch)
    message = str(failure.value)
    knobs = (
        "data.micro_batch_tokens (now 512)",
        "seq_len (now 32)",
        "9.27 GiB",
        "model.activation_checkpointing = true",
        "--trainer-gpu-ids",
    )
    for knob in knobs:
        assert knob in message, message


def test_a_collective_failing_for_another_reason_is_not_called_out_of_memory(
    tiny_model_dir, tmp_path, fake_config, cpu_world
):
    config = fake_config(tiny_model_dir, tmp_path, ckpt={"enabled": False})
    trainer = setup_trainer(config, cpu_world)
    lost = torch.distributed.DistBackendError("NCCL error: remote process exited or network error")

    def peer_gone(*args, **kwargs):
        raise lost

    trainer.model.forward = peer_gone
    batch = fake_batch(config.data.fake, 32, trainer.model.config.vocab_size, 0, 0)
    with pytest.raises(torch.distributed.DistBackendError, match="remote process exited"):
        train_step(trainer, batch)


def test_backward_casts_weights_again_instead_of_keeping_copies(tiny_model_dir, monkeypatch):
    """On CPU the forward autocasts to bf16 and autograd would keep a bf16 copy of every weight
    until backward (0.2 GiB for SmolLM2-135M, at each micro-batch's peak): the trainer keeps the
    parameter and casts it again, and the gradients come out bit for bit the same."""
    from transformers import AutoModelForCausalLM

    from trainer import model as trainer_model
    from trainer.dist import World
    from trainer.model import RecastWeight, compute_context, recast_weights

    model = AutoModelForCausalLM.from_pretrained(tiny_model_dir, dtype=torch.float32)
    model.compute_dtype = torch.bfloat16
    ids = torch.randint(
        0, model.config.vocab_size, (2, 24), generator=torch.Generator().manual_seed(0)
    )
    world = World(rank=0, world_size=1, device=torch.device("cpu"), distributed=False)

    def gradients(context) -> dict[str, torch.Tensor]:
        model.zero_grad(set_to_none=True)
        with context:
            loss = model(input_ids=ids).logits.float().logsumexp(-1).mean()
        loss.backward()
        return {n: p.grad.clone() for n, p in model.named_parameters() if p.grad is not None}

    recast_in_backward = []

    def counting(dtype):
        pack, unpack = recast_weights(dtype)
        return pack, lambda p: recast_in_backward.append(isinstance(p, RecastWeight)) or unpack(p)

    monkeypatch.setattr(trainer_model, "recast_weights", counting)
    kept = gradients(torch.autocast("cpu", dtype=torch.bfloat16))
    recast = gradients(compute_context(model, world))
    assert sum(recast_in_backward) >= 3 * model.config.num_hidden_layers, "the trainer recasts"
    assert kept.keys() == recast.keys() and kept
    for name, grad in kept.items():
        assert torch.equal(grad, recast[name]), name

    pack, unpack = recast_weights(torch.bfloat16)
    packed = []
    with torch.autograd.graph.saved_tensors_hooks(lambda t: packed.append(pack(t)) or t, unpack):
        with torch.autocast("cpu", dtype=torch.bfloat16):
            model(input_ids=ids)
    linears = {id(m.weight) for m in model.modules() if isinstance(m, torch.nn.Linear)}
    recast_params = {id(p.param) for p in packed if isinstance(p, RecastWeight)}
    assert linears <= recast_params, "every linear layer's weight is cast again, not kept"
    assert not [
        t
        for t in packed
        if isinstance(t, torch.Tensor)
        and t.dtype == torch.bfloat16
        and t.dim() == 2
        and t.grad_fn is not None
        and "Copy" in t.grad_fn.name()
    ]


def test_forward_keeps_no_cast_copy_of_a_weight_past_its_layer(tiny_model_dir):
    """autocast caches the bf16 copy of every weight until its context exits, so at the end of
    the forward (the logprob head, the trainer's peak) all of them are alive at once: 0.2 GiB
    for SmolLM2-135M. The trainer's context turns that cache off; each copy goes once its
    layer has used it (backward casts again). The same context with the cache on shows what
    the check catches."""
    import contextlib
    import weakref

    from torch.utils._python_dispatch import TorchDispatchMode
    from transformers import AutoModelForCausalLM

    from trainer.dist import World
    from trainer.model import compute_context, recast_weights

    model = AutoModelForCausalLM.from_pretrained(tiny_model_dir, dtype=torch.float32)
    model.compute_dtype = torch.bfloat16
    weights = {id(m.weight) for m in model.modules() if isinstance(m, torch.nn.Linear)}
    world = World(rank=0, world_size=1, device=torch.device("cpu"), distributed=False)
    ids = torch.randint(0, model.config.vocab_size, (1, 16))

    class WeightCasts(TorchDispatchMode):
        def __init__(self):
            super().__init__()
            self.copies = []

        def __torch_dispatch__(self, func, types, args=(), kwargs=None):
            out = func(*args, **(kwargs or {}))
            if func is torch.ops.aten._to_copy.default and id(args[0]) in weights:
                self.copies.append(weakref.ref(out))
            return out

    def alive_at_the_end_of_forward(context) -> tuple[int, int]:
        alive = []
        hook = model.model.norm.register_forward_hook(
            lambda *_: alive.append(sum(ref() is not None for ref in casts.copies))
        )
        with context, WeightCasts() as casts:
            model(input_ids=ids)
        hook.remove()
        return alive[0], len(casts.copies)

    with_cache = contextlib.ExitStack()
    with_cache.enter_context(
        torch.autograd.graph.saved_tensors_hooks(*recast_weights(torch.bfloat16))
    )
    with_cache.enter_context(torch.autocast("cpu", dtype=torch.bfloat16))
    cached, made = alive_at_the_end_of_forward(with_cache)
    assert made >= len(weights) and cached >= len(weights) - 1  # all but the head's, not yet cast
    alive, made = alive_at_the_end_of_forward(compute_context(model, world))
    assert made >= len(weights) and alive == 0
