"""Methods added to every vLLM worker (`--worker-extension-cls`), called through
`collective_rpc` by name.

`reload_weights_retied`: vLLM's in-place reload loads a tied tensor (a tied-embedding model's
`embed_tokens` / `lm_head`) through its first owner only; on CPU the other owner keeps
computing with a prepacked copy of the old weights (0.8 nats off on the tiny model). This
reloads, then processes every other owner of a tied tensor again.

After an update (either transport) the heap's free pages go back to the system: on CPU each
update prepacks every linear layer's weights anew and frees the old copies, which glibc would
otherwise keep as the engine's high-water mark."""

from collections.abc import Callable
from typing import Any

WORKER_EXTENSION = "inference.worker_extension.TiedReload"


class TiedReload:
    """Mixed into vLLM's worker class, whose `model_runner` and `reload_weights` it uses
    (declared here for the type checker only: no value, so the worker's own stay)."""

    model_runner: Any
    reload_weights: Callable[..., None]

    def reload_weights_retied(self, **kwargs) -> None:
        from inference.gloo_engine import retie, tied_groups
        from rlcore.processes import heap

        model = self.model_runner.get_model()
        groups = tied_groups(model)
        self.reload_weights(**kwargs)
        retie(model, groups)
        heap.trim()
