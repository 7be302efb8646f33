"""The embedded model's forward in plain torch, without transformers.

Loading the shipped model through transformers' `AutoModelForCausalLM` imports
transformers' GPT-2 module, which pulls in torch's compiler and distributed-tensor
stacks: about two seconds of CPU before the first token, for a model whose forward
takes milliseconds. `TinyGPT2` computes the same function as transformers'
`GPT2LMHeadModel` on the shipped weights (a test pins their rows together at random
contexts, with and without cached states), with just the interface that
`CachedTransformer` uses:

    model(input_ids, position_ids=..., attention_mask=..., past_key_values=...,
          use_cache=True, logits_to_keep=k) -> .logits [batch, k, V], .past_key_values

`attention_mask` covers the past and the new tokens (1 = attend), as transformers
reads it; a query also never attends to a later key (causal). It serves the command
line; `PromptedLLM.from_name` keeps the transformers model (`llm.model.model`).
"""

from __future__ import annotations

import json
import os
from types import SimpleNamespace
from typing import Any, NamedTuple

import torch
from torch.nn import functional as F

#: The transformers configuration this forward implements (checked on load).
SUPPORTED = {"model_type": "gpt2", "activation_function": "gelu_new", "scale_attn_by_inverse_layer_idx": False}


class Layer:
    """One layer's cached keys and values, `[batch, heads, length, head_dim]`."""

    __slots__ = ("keys", "values")

    def __init__(self, keys: torch.Tensor, values: torch.Tensor):
        self.keys, self.values = keys, values


class Cache:
    """Per-layer key/value states (`.layers[i].keys/.values`); a forward extends them."""

    def __init__(self, pasts: Any = ()):
        self.layers = [Layer(k, v) for k, v in pasts]

    def length(self) -> int:
        return self.layers[0].keys.shape[2] if self.layers else 0


class Output(NamedTuple):
    logits: torch.Tensor
    past_key_values: Cache


class TinyGPT2(torch.nn.Module):
    """A GPT-2 causal LM (learned positions, pre-norm blocks, tied output embedding)."""

    def __init__(self, config: dict, weights: dict[str, torch.Tensor]):
        super().__init__()
        for key, value in SUPPORTED.items():
            if config.get(key, value) != value:
                raise ValueError(f"TinyGPT2 does not implement {key}={config.get(key)!r}")
        self.config = SimpleNamespace(**config)
        self.n_head = config["n_head"]
        self.eps = config["layer_norm_epsilon"]
        self.n_layer = config["n_layer"]
        for name, tensor in weights.items():
            self.register_buffer(name.removeprefix("transformer.").replace(".", "_"), tensor, persistent=False)

    @classmethod
    def from_dir(cls, path: str) -> "TinyGPT2":
        """The model in `path` (`config.json` and `model.safetensors`)."""
        from safetensors.torch import load_file

        with open(os.path.join(path, "config.json"), encoding="utf-8") as fh:
            config = json.load(fh)
        return cls(config, load_file(os.path.join(path, "model.safetensors")))

    @property
    def device(self) -> torch.device:
        return self.wte_weight.device

    def _w(self, name: str) -> torch.Tensor:
        return getattr(self, name.replace(".", "_"))

    def _norm(self, x: torch.Tensor, name: str) -> torch.Tensor:
        return F.layer_norm(x, x.shape[-1:], self._w(name + ".weight"), self._w(name + ".bias"), self.eps)

    def _linear(self, x: torch.Tensor, name: str) -> torch.Tensor:
        # GPT-2's Conv1D stores the weight as [in, out].
        return torch.addmm(self._w(name + ".bias"), x.reshape(-1, x.shape[-1]), self._w(name + ".weight")).view(
            *x.shape[:-1], -1
        )

    def _heads(self, x: torch.Tensor) -> torch.Tensor:
        b, t, d = x.shape
        return x.view(b, t, self.n_head, d // self.n_head).transpose(1, 2)

    def _allowed(self, past: int, new: int, attention_mask: torch.Tensor | None, device) -> torch.Tensor:
        """`[batch or 1, 1, new, past + new]` booleans: may query i attend to key j."""
        keys = torch.arange(past + new, device=device)
        queries = torch.arange(past, past + new, device=device)
        allowed = (keys[None, :] <= queries[:, None])[None, None]
        if attention_mask is not None:
            allowed = allowed & attention_mask.bool()[:, None, None, :]
        return allowed

    @torch.no_grad()
    def forward(
        self,
        input_ids: torch.Tensor,
        position_ids: torch.Tensor | None = None,
        attention_mask: torch.Tensor | None = None,
        past_key_values: Cache | None = None,
        use_cache: bool = True,
        logits_to_keep: int = 0,
    ) -> Output:
        cache = past_key_values if past_key_values is not None else Cache()
        past = cache.length()
        b, t = input_ids.shape
        if position_ids is None:
            position_ids = torch.arange(past, past + t, device=input_ids.device).expand(b, t)
        x = F.embedding(input_ids, self.wte_weight) + F.embedding(position_ids, self.wpe_weight)
        allowed = self._allowed(past, t, attention_mask, input_ids.device)
        if not cache.layers:
            cache.layers = [None] * self.n_layer
        for i in range(self.n_layer):
            h = f"h.{i}."
            q, k, v = self._linear(self._norm(x, h + "ln_1"), h + "attn.c_attn").split(x.shape[-1], dim=2)
            q, k, v = self._heads(q), self._heads(k), self._heads(v)
            layer = cache.layers[i]
            if layer is not None:
                k = torch.cat([layer.keys, k], dim=2)
                v = torch.cat([layer.values, v], dim=2)
            cache.layers[i] = Layer(k, v)
            a = F.scaled_dot_product_attention(q, k, v, attn_mask=allowed)
            x = x + self._linear(a.transpose(1, 2).reshape(b, t, -1), h + "attn.c_proj")
            m = F.gelu(self._linear(self._norm(x, h + "ln_2"), h + "mlp.c_fc"), approximate="tanh")
            x = x + self._linear(m, h + "mlp.c_proj")
        x = self._norm(x, "ln_f")
        if logits_to_keep:
            x = x[:, -logits_to_keep:]
        return Output(x @ self.wte_weight.T, cache)


__all__ = ["Cache", "TinyGPT2"]
