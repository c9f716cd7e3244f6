"""A static, per-layer-shaped KV cache of fixed slots, and the forward passes over it.

Each layer that computes its own K/V (Gemma 4's KV-sharing layers reuse an earlier layer's)
gets buffers of shape [slots * max_len, kv_heads, head_dim] (slot-major: row
slot * max_len + position) with that layer's own head_dim
(256 on sliding layers, 512 on global ones for E2B). A sequence owns one slot; its token at
position p lives at row p of its slot. Sliding layers keep full-length rows too and see
only the last `sliding_window` of them through their mask, so one write index serves all
layers and no ring arithmetic is needed.

`forward` is transformers' own model: the cache is handed to it as `past_key_values` (it
only calls `update`), the masks as a ready-made `{layer_type: mask}` dict (which it passes
through), and positions as `position_ids`, one row per sequence, so rows of one batch can
sit at different positions (continuous batching).
"""

from __future__ import annotations

from typing import Any

import torch
from torch import nn
from transformers import AttentionInterface

ATTENTION = "rig_slots"
DECODE_ROWS = 4  # query rows per sequence up to which attention is plain matmuls


def slot_attention(
    module: nn.Module,
    query: torch.Tensor,
    key: torch.Tensor,
    value: torch.Tensor,
    attention_mask: torch.Tensor | None,
    scaling: float | None = None,
    dropout: float = 0.0,
    **kwargs: Any,
) -> tuple[torch.Tensor, None]:
    """Attention over a slot cache, grouped query heads folded into the query length.

    transformers' sdpa repeats K/V for every query head whenever a mask is given; over a
    long static cache that copy costs more than the attention. Here query heads sharing a
    K/V head become extra query rows: [B, kv_heads, groups * q, D] against [B, kv_heads, L, D].
    Decode steps (a few query rows) use plain matmuls and a softmax: the fused SDPA kernels
    give one thread block per (sequence, K/V head, query tile), so a width-1 step over a
    4,096-row cache ran on one SM (217 us a layer on an H200, measured); matmuls split the
    cache length across the GPU. Prefill (many query rows) uses SDPA.
    """
    if attention_mask is None:
        raise ValueError("slot attention needs an explicit mask (the slot cache's)")
    batch, heads, q_len, dim = query.shape
    kv_heads, kv_len = key.shape[1], key.shape[2]
    groups = heads // kv_heads
    q = query.reshape(batch, kv_heads, groups * q_len, dim)
    mask = attention_mask.unsqueeze(2).expand(-1, -1, groups, -1, -1)
    mask = mask.reshape(mask.shape[0], 1, groups * q_len, kv_len)
    scale = dim**-0.5 if scaling is None else scaling
    if q_len <= DECODE_ROWS:
        scores = torch.matmul(q, key.transpose(-1, -2)).float() * scale
        scores = scores.masked_fill(~mask, float("-inf"))
        probs = torch.softmax(scores, dim=-1).to(value.dtype)
        out = torch.matmul(probs, value)
    else:
        out = torch.nn.functional.scaled_dot_product_attention(
            q, key, value, attn_mask=mask, scale=scale
        )
    return out.reshape(batch, heads, q_len, dim).transpose(1, 2).contiguous(), None


AttentionInterface.register(ATTENTION, slot_attention)


def _kv_layers(decoder: Any) -> list[tuple[int, int, int]]:
    """(layer index, K/V heads, head_dim) of every layer that computes its own K/V."""
    found = []
    for index, layer in enumerate(decoder.layers):
        attn = layer.self_attn
        if getattr(attn, "is_kv_shared_layer", False):
            continue
        head_dim = int(attn.head_dim)
        found.append((index, int(attn.k_proj.out_features) // head_dim, head_dim))
    return found


class SlotBuffers:
    """The K/V buffers of every layer that computes K/V, for `slots` sequences."""

    def __init__(
        self, decoder: Any, slots: int, max_len: int, device: torch.device, dtype: torch.dtype
    ) -> None:
        self.slots, self.max_len = slots, max_len
        self.layers: dict[int, tuple[torch.Tensor, torch.Tensor]] = {}
        for index, kv_heads, head_dim in _kv_layers(decoder):
            shape = (slots * max_len, kv_heads, head_dim)
            self.layers[index] = (
                torch.zeros(shape, device=device, dtype=dtype),
                torch.zeros(shape, device=device, dtype=dtype),
            )

    @staticmethod
    def bytes_per_slot(decoder: Any, max_len: int, dtype: torch.dtype) -> int:
        """What one slot adds to the buffers: K and V of `max_len` rows in every layer."""
        itemsize = torch.empty((), dtype=dtype).element_size()
        rows = sum(kv_heads * head_dim for _, kv_heads, head_dim in _kv_layers(decoder))
        return 2 * max_len * rows * itemsize

    def mark_static(self) -> None:
        """Tell torch.compile the buffers never move (as transformers' StaticCache does), so
        writes into them compile to in-place updates rather than copies."""
        for k, v in self.layers.values():
            torch._dynamo.mark_static_address(k)
            torch._dynamo.mark_static_address(v)

    def nbytes(self) -> int:
        return sum(k.nbytes + v.nbytes for k, v in self.layers.values())


class SlotView:
    """What one forward pass sees: where its new K/V go and which rows it reads back.

    `write` holds flat row indices (slot * max_len + position), one per input token;
    `read_slots` the slots of the batch's rows (None: slots 0..width-1, a cheap slice);
    `view_len` how many positions of each slot attention reads.
    """

    def __init__(
        self,
        buffers: SlotBuffers,
        write: torch.Tensor,
        width: int,
        view_len: int,
        read_slots: torch.Tensor | None = None,
    ) -> None:
        self.buffers, self.write, self.width = buffers, write, width
        self.view_len, self.read_slots = view_len, read_slots

    def update(
        self,
        key_states: torch.Tensor,
        value_states: torch.Tensor,
        layer_idx: int,
        cache_kwargs: dict[str, Any] | None = None,
    ) -> tuple[torch.Tensor, torch.Tensor]:
        k_buf, v_buf = self.buffers.layers[layer_idx]
        batch, kv_heads, q_len, dim = key_states.shape
        flat = (batch * q_len, kv_heads, dim)
        k_buf.index_copy_(0, self.write, key_states.transpose(1, 2).reshape(flat))
        v_buf.index_copy_(0, self.write, value_states.transpose(1, 2).reshape(flat))
        shape = (self.buffers.slots, self.buffers.max_len, kv_heads, dim)
        k_buf, v_buf = k_buf.view(shape), v_buf.view(shape)
        if self.read_slots is None:
            keys, values = k_buf[: self.width], v_buf[: self.width]
        else:
            keys, values = k_buf[self.read_slots], v_buf[self.read_slots]
        keys, values = keys[:, : self.view_len], values[:, : self.view_len]
        return keys.transpose(1, 2), values.transpose(1, 2)


class SlotModel:
    """A causal LM's decode and prefill passes over `SlotBuffers`."""

    def __init__(self, model: Any, slots: int, max_len: int) -> None:
        self.model = model  # a transformers causal LM (Any: its attributes are dynamic)
        self.decoder: Any = model.get_decoder()
        config = model.config.get_text_config()
        self.window = int(getattr(config, "sliding_window", None) or max_len)
        self.softcap = getattr(config, "final_logit_softcapping", None)
        self.device = next(model.parameters()).device
        self.buffers = SlotBuffers(self.decoder, slots, max_len, self.device, model.dtype)
        self.max_len = max_len

    def _masks(self, q_pos: torch.Tensor, k_pos: torch.Tensor) -> dict[str, torch.Tensor]:
        """q_pos [B, q], k_pos [k] -> {layer_type: bool mask [B, 1, q, k]} (True: attend)."""
        full = k_pos[None, None, :] <= q_pos[:, :, None]
        sliding = full & (k_pos[None, None, :] > q_pos[:, :, None] - self.window)
        return {"full_attention": full[:, None], "sliding_attention": sliding[:, None]}

    def _logits(self, hidden: torch.Tensor) -> torch.Tensor:
        logits = self.model.lm_head(hidden)
        if self.softcap is not None:
            logits = torch.tanh(logits / self.softcap) * self.softcap
        return logits

    def decode(
        self, ids: torch.Tensor, positions: torch.Tensor, k_pos: torch.Tensor
    ) -> torch.Tensor:
        """One token for each of slots 0..W-1: ids [W, 1], positions [W] -> logits [W, V].

        k_pos is arange(C), C a context bucket above every position: attention reads the
        first C rows of each slot. Static shapes for a given (W, C): every slot row is
        written and C rows are read under the mask, so one captured CUDA graph serves every
        step of that width and bucket.
        """
        width = ids.shape[0]
        rows = torch.arange(width, device=ids.device)
        write = rows * self.max_len + positions
        view = SlotView(self.buffers, write, width, k_pos.shape[0])
        out = self.decoder(
            input_ids=ids,
            position_ids=positions[:, None],
            attention_mask=self._masks(positions[:, None], k_pos),
            past_key_values=view,
            use_cache=True,
        )
        return self._logits(out.last_hidden_state[:, -1])

    def prefill(self, slots: list[int], prompts: list[list[int]]) -> torch.Tensor:
        """Whole prompts into their slots from position 0: -> logits of each last token [B, V].

        Rows are right-padded to the longest prompt; the padding writes K/V past a prompt's
        end, which its own decode steps overwrite before any mask lets them be read.
        """
        n = max(len(p) for p in prompts)
        if n > self.max_len:
            raise ValueError(f"a prompt of {n} tokens does not fit the cache ({self.max_len})")
        ids = torch.zeros((len(prompts), n), dtype=torch.long)
        for i, prompt in enumerate(prompts):
            ids[i, : len(prompt)] = torch.tensor(prompt, dtype=torch.long)
        ids = ids.to(self.device)
        slot_t = torch.tensor(slots, dtype=torch.long, device=self.device)
        pos = torch.arange(n, device=self.device)
        write = (slot_t[:, None] * self.max_len + pos[None, :]).reshape(-1)
        view = SlotView(self.buffers, write, len(slots), n, read_slots=slot_t)
        out = self.decoder(
            input_ids=ids,
            position_ids=pos[None, :].expand(len(prompts), n),
            attention_mask=self._masks(pos[None, :], pos),
            past_key_values=view,
            use_cache=True,
        )
        last = torch.tensor([len(p) - 1 for p in prompts], device=self.device)
        hidden = out.last_hidden_state[torch.arange(len(prompts), device=self.device), last]
        return self._logits(hidden)
