"""The chat worker's model: loaded once, answering token by token, the tuned or the base side.

Imports torch, transformers and peft inside: only the worker process
(:mod:`.chat_worker`) and the benchmark use it.  One :class:`ChatModel` holds

- a LoRA run: its base with the adapter on top; the base side is the same model inside peft's
  own switch, ``disable_adapter()``, so the base answer is the base's and nothing is loaded twice;
- a full fine-tuning run: the tuned model, and its starting model loaded beside it the first time
  the base side is asked for;
- a plain model folder: that model alone (it has no base side).

Each answer seeds the sampler with the answer's seed, so two sides asked with the same seed differ
only by their weights.  The conversation is rendered with the chat template the run's tokenizer
saved (``training.templates.chat_text``), as the model was trained to read it.
"""

from __future__ import annotations

import contextlib
import os
import threading
import time

from ..job import devices as devmod
from ..training import templates
from ..words import Msg, say
from .chat_settings import Settings
from .chat_target import Target
from .inspect import OutputError

DTYPES = ("bf16", "fp16", "fp32")
CONTEXT_KEYS = ("max_position_embeddings", "n_positions", "max_sequence_length", "seq_length", "n_ctx")


def torch_dtype(name: str):
    import torch

    return {"bf16": torch.bfloat16, "fp16": torch.float16}.get(name, torch.float32)


class ChatModel:
    def __init__(self, target: Target, device: str, dtype: str):
        self.target, self.device, self.dtype = target, device, dtype
        self.model = self.tokenizer = self.base_model = None
        self.load_s = 0.0

    # --- loading -----------------------------------------------------------------------------------
    def _from_pretrained(self, path: str):
        import torch

        from ..training import vision

        place = {} if self.device == "cpu" else {"device_map": "auto" if torch.cuda.device_count() > 1 else {"": 0}}
        return vision.auto_model(path).from_pretrained(path, dtype=torch_dtype(self.dtype), **place)

    def load(self) -> None:
        from transformers import AutoTokenizer

        t0 = time.perf_counter()
        t = self.target
        tok_dir = t.path if os.path.isfile(os.path.join(t.path, "tokenizer_config.json")) else (t.base or t.path)
        self.tokenizer = AutoTokenizer.from_pretrained(tok_dir)
        if t.kind == "lora_adapter":
            from peft import PeftModel

            base = self._from_pretrained(t.base)
            if len(self.tokenizer) > base.get_input_embeddings().weight.shape[0]:  # the template added tokens
                base.resize_token_embeddings(len(self.tokenizer))
            # the adapter in the model's own precision (peft would keep it in fp32 beside a bf16 base)
            self.model = PeftModel.from_pretrained(base, t.path, autocast_adapter_dtype=False)
        else:
            self.model = self._from_pretrained(t.path)
        self.model.eval()
        self.load_s = time.perf_counter() - t0

    def _base(self):
        """The model that answers as the base: the same one (adapter switched off), or the starting model."""
        if self.target.kind == "lora_adapter":
            return self.model
        if not self.target.has_base:
            raise OutputError(say("chat.no_base", name=self.target.name))
        if self.base_model is None:
            self.base_model = self._from_pretrained(self.target.base)
            self.base_model.eval()
        return self.base_model

    # --- answering ---------------------------------------------------------------------------------
    def prompt_ids(self, messages: list[dict]):
        text = templates.chat_text(messages, self.tokenizer)
        return self.tokenizer(text, return_tensors="pt", add_special_tokens=False)["input_ids"]

    def context(self) -> int | None:
        """How many positions the model reads (its config's, else the tokenizer's own limit), None when unknown."""
        cfg = getattr(self.model, "config", None)
        cfg = getattr(cfg, "get_text_config", lambda: cfg)() if cfg is not None else None
        for key in CONTEXT_KEYS:
            n = getattr(cfg, key, None)
            if isinstance(n, int) and n > 0:
                return n
        n = getattr(self.tokenizer, "model_max_length", None)
        return n if isinstance(n, int) and 0 < n < 1 << 24 else None  # transformers' "no limit" is 1e30

    def prompt_budget(self, settings: Settings) -> tuple[int | None, Msg | None]:
        """(how many tokens the prompt may take, or None for no bound; why nothing fits, or None)."""
        context = self.context()
        if context is not None and settings.max_new_tokens >= context:
            return None, say("chat.answer_too_long", n=settings.max_new_tokens, context=context)
        budget = None if context is None else context - settings.max_new_tokens
        if settings.max_prompt_tokens:
            budget = settings.max_prompt_tokens if budget is None else min(budget, settings.max_prompt_tokens)
        return budget, None

    def _stop_ids(self, model) -> list[int]:
        ids = {self.tokenizer.eos_token_id}
        cfg = getattr(model, "generation_config", None)
        extra = getattr(cfg, "eos_token_id", None) if cfg is not None else None
        ids |= set(extra if isinstance(extra, list) else [extra])
        return sorted(i for i in ids if i is not None)

    def answer(self, messages: list[dict], side: str, settings: Settings, emit, stop: threading.Event) -> dict:
        """Generate one answer, calling ``emit(text)`` with each new piece; returns the answer's figures.
        ``stop`` set from another thread ends it after the token in flight."""
        import torch
        from transformers import StoppingCriteria, StoppingCriteriaList

        model = self._base() if side == "base" else self.model
        t0 = time.perf_counter()
        budget, wrong = self.prompt_budget(settings)
        if wrong is not None:
            raise OutputError(wrong)
        ids = self.prompt_ids(messages)
        if budget is not None and ids.shape[1] > budget:  # refused before generation: nothing runs on past it
            raise OutputError(say("chat.prompt_too_long", n=f"{ids.shape[1]:,}", limit=f"{budget:,}",
                                  context=f"{self.context() or '-'}", answer=settings.max_new_tokens))
        ids = ids.to(model.device)
        stream = _Stream(self.tokenizer, emit)

        flags = {v: torch.full((1,), v, dtype=torch.bool, device=ids.device) for v in (False, True)}

        class _Stop(StoppingCriteria):  # asked between two tokens: Stop ends the answer after the one in flight
            def __call__(self, input_ids, scores, **kwargs):
                return flags[stop.is_set()]

        sample = settings.temperature > 0
        kwargs = dict(max_new_tokens=settings.max_new_tokens, do_sample=sample, streamer=stream,
                      stopping_criteria=StoppingCriteriaList([_Stop()]), eos_token_id=self._stop_ids(model),
                      pad_token_id=self.tokenizer.pad_token_id if self.tokenizer.pad_token_id is not None
                      else self._stop_ids(model)[0], attention_mask=torch.ones_like(ids))
        if sample:
            kwargs.update(temperature=settings.temperature, top_p=settings.top_p)
        if settings.min_new_tokens:
            kwargs.update(min_new_tokens=min(settings.min_new_tokens, settings.max_new_tokens))
        off = model.disable_adapter() if side == "base" and self.target.kind == "lora_adapter" else contextlib.nullcontext()
        torch.manual_seed(settings.seed)
        with off, torch.inference_mode():
            model.generate(ids, **kwargs)
        stream.end()
        seconds = time.perf_counter() - t0
        n = len(stream.ids)
        ttft = (stream.first - t0) if stream.first else None
        return {"tokens": n, "seconds": seconds, "ttft_s": ttft, "prompt_tokens": int(ids.shape[1]),
                "tokens_per_s": n / seconds if seconds > 0 else None, "stopped": stop.is_set(),
                "text": stream.text}

    # --- memory ------------------------------------------------------------------------------------
    def weights_bytes(self) -> int:
        models = [m for m in (self.model, self.base_model) if m is not None]
        return sum(p.numel() * p.element_size() for m in models for p in m.parameters())

    def memory_bytes(self) -> int:
        """What this process holds: on GPUs as NVML sees it (the CUDA context included), else its RSS."""
        if self.device != "cpu":
            used = devmod.process_bytes_on(os.getpid())
            if used:
                return used
            import torch

            return sum(torch.cuda.memory_reserved(i) for i in range(torch.cuda.device_count()))
        import psutil

        return psutil.Process().memory_info().rss


class _Stream:
    """transformers' streamer interface: the prompt first (skipped), then each new token; ``emit`` gets new text."""

    def __init__(self, tokenizer, emit):
        self.tokenizer, self.emit = tokenizer, emit
        self.ids: list[int] = []
        self.text = ""
        self.prompt_seen = False
        self.first: float | None = None

    def put(self, value) -> None:
        if not self.prompt_seen:
            self.prompt_seen = True
            return
        self.ids.extend(value.reshape(-1).tolist())
        if self.first is None:
            self.first = time.perf_counter()
        self._flush(final=False)

    def _flush(self, final: bool) -> None:
        text = self.tokenizer.decode(self.ids, skip_special_tokens=True)
        if not final and text.endswith("\ufffd"):
            return  # half of a character: wait for the rest
        if len(text) > len(self.text) and text.startswith(self.text):
            self.emit(text[len(self.text):])
        self.text = text

    def end(self) -> None:
        if self.ids:
            self._flush(final=True)
