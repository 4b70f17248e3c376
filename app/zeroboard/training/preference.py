"""Preference tuning through TRL's trainers: the stage's config, its trainer, and what the rows become for it.

``train.py`` branches here at two steps, as it reads: the arguments (:func:`arguments`: TRL's config class of the
stage, made where TrainingArguments would be, before the model loads, so ZeRO-3's ``zero.Init`` covers the
reference model too) and the trainer (:func:`trainer`).  The rows come tokenized by ZeroBoard, as LLaMA-Factory
tokenizes them (``training.prefdata``); TRL's own tokenizing is skipped.

==========  ===========================================================  ===================================
stage       TRL trainer (trl >=1.16,<1.17)                                reference model
==========  ===========================================================  ===================================
``dpo``     ``DPOTrainer``: ``pref_loss`` (sigmoid, hinge, ipo),          LoRA: the base, adapters off;
            ``pref_ftx`` an added ``sft`` loss of that weight             full: a frozen copy (see below)
``kto``     ``KTOTrainer``: answers tagged good or bad, a KL term         the same
``simpo``   ``trl.experimental.cpo.CPOTrainer`` with ``loss_type:         none (reference-free)
            simpo``, ``simpo_gamma``, ``pref_ftx`` as ``cpo_alpha``
``orpo``    ``trl.experimental.orpo.ORPOTrainer`` (its NLL term built     none
            in; ``pref_beta`` weighs the odds ratio)
==========  ===========================================================  ===================================

``pref_beta`` is each one's ``beta``.  The full fine-tune's reference model is loaded by ``train.py`` as the model
is (the same dtype, the same vocabulary), under ZeRO-3 already sharded by ``zero.Init``; TRL wraps it in a DeepSpeed
inference engine of the run's config (``prepare_deepspeed``), so each rank holds its shard of it too.

TRL imports only here, only in the trainer's processes.
"""

from __future__ import annotations

import os

from ..job import spec as specmod
from .prefdata import COLUMNS, kind_of

TRL_RANGE = ">=1.16,<1.17"  # pyproject.toml's pin: the trainers' names and arguments used here
REFERENCE_STAGES = ("dpo", "kto")  # the stages that compare against a reference model
os.environ.setdefault("TRL_EXPERIMENTAL_SILENCE", "1")  # CPO and ORPO live under trl.experimental: pinned above


def held(model) -> tuple[int, int]:
    """(weights this rank holds, weights of the model): under ZeRO-3 a rank holds its partition of each parameter."""
    params = list(model.parameters())
    here = sum(p.ds_tensor.numel() if hasattr(p, "ds_tensor") else p.numel() for p in params)
    return here, sum(getattr(p, "ds_numel", p.numel()) for p in params)


def needs_reference(job: specmod.JobSpec) -> bool:
    """A frozen copy of the model to load: full fine-tuning of a stage with a reference (LoRA's is the base)."""
    return job.training_stage in REFERENCE_STAGES and job.finetuning_type == "full"


def reference_note(job: specmod.JobSpec) -> str:
    """The catalog key saying what the run compares against."""
    if job.training_stage not in REFERENCE_STAGES:
        return "train.ref_none"
    return "train.ref_base" if job.finetuning_type == "lora" else "train.ref_copy"


def arguments(job: specmod.JobSpec, kwargs: dict):
    """The stage's TRL config: the TrainingArguments ``kwargs`` (the job's, as for SFT) and the stage's own."""
    common = {**kwargs, "beta": job.pref_beta}
    stage = job.training_stage
    if stage == "dpo":
        from trl import DPOConfig

        losses, weights = [job.pref_loss], None
        if job.pref_ftx:  # LLaMA-Factory's pref_ftx: an SFT loss on the chosen answers beside the preference loss
            losses, weights = [job.pref_loss, "sft"], [1.0, job.pref_ftx]
        return DPOConfig(**common, loss_type=losses, loss_weights=weights, max_length=None)
    if stage == "kto":
        from trl import KTOConfig

        return KTOConfig(**common, max_length=None)
    if stage == "simpo":
        from trl.experimental.cpo import CPOConfig

        return CPOConfig(**common, loss_type="simpo", simpo_gamma=job.simpo_gamma, cpo_alpha=job.pref_ftx,
                         max_length=job.cutoff_len)
    from trl.experimental.orpo import ORPOConfig

    return ORPOConfig(**common, max_length=job.cutoff_len)


def rows(ds, stage: str):
    """The columns the stage's trainer reads (``training.prefdata``'s)."""
    return ds.select_columns(list(COLUMNS[kind_of(stage)]))


class Counting:
    """A TRL collator that counts the tokens of each training batch it makes (every sequence forwarded: chosen and
    rejected, an answer and its KL pair), for the events' tokens/s (``tokens``, as ``callbacks.TokenCounter``)."""

    def __init__(self, inner):
        self.inner = inner
        self.tokens = 0

    def __call__(self, features):
        batch = self.inner(features)
        self.tokens += int(sum(v.sum() for k, v in batch.items()
                               if k.endswith("attention_mask") and not k.startswith("prompt")))
        return batch


def collator(stage: str, pad_id: int) -> Counting:
    if stage == "dpo":
        from trl.trainer.dpo_trainer import DataCollatorForPreference

        return Counting(DataCollatorForPreference(pad_token_id=pad_id))
    if stage == "kto":
        from trl.trainer.kto_trainer import DataCollatorForUnpairedPreference

        return Counting(DataCollatorForUnpairedPreference(pad_token_id=pad_id))
    from trl.experimental.utils import DPODataCollatorWithPadding

    return Counting(DPODataCollatorWithPadding(pad_token_id=pad_id))


def trainer(job: specmod.JobSpec, model, args, train_rows, eval_rows, tokenizer, counter: Counting, callbacks: list,
            ref_model=None, peft_config=None):
    """The stage's TRL trainer on ZeroBoard's rows. LoRA: ``peft_config`` (TRL wraps the model, and its reference is
    the base with the adapters off); full: ``ref_model`` (dpo, kto) or none."""
    kinds = _trainers()
    common = dict(model=model, args=args, data_collator=counter, train_dataset=rows(train_rows, job.training_stage),
                  eval_dataset=rows(eval_rows, job.training_stage) if eval_rows is not None else None,
                  processing_class=tokenizer, callbacks=callbacks, peft_config=peft_config)
    if job.training_stage in REFERENCE_STAGES:
        common["ref_model"] = ref_model
    made = kinds[job.training_stage](**common)
    made.use_dpo_data_collator = True  # CPO and ORPO: our collator is theirs, counted (no warning per step)
    return made


def _trainers() -> dict:
    from trl import DPOTrainer, KTOTrainer
    from trl.experimental.cpo import CPOTrainer
    from trl.experimental.orpo import ORPOTrainer

    class Pretokenized:
        """DPO and KTO: the rows are tokenized already, as LLaMA-Factory tokenizes them; TRL's own pass is skipped."""

        def _prepare_dataset(self, dataset, processing_class, args, dataset_name):
            return dataset

    class Tokenized:
        """CPO (SimPO) and ORPO tokenize row by row: each of ours becomes their columns, the prompt masked."""

        def tokenize_row(self, feature, model=None) -> dict:
            prompt = list(feature["prompt_ids"])
            out = {"prompt_input_ids": prompt, "prompt_attention_mask": [1] * len(prompt)}
            for side in ("chosen", "rejected"):
                answer = list(feature[f"{side}_ids"])
                out[f"{side}_input_ids"] = prompt + answer
                out[f"{side}_attention_mask"] = [1] * (len(prompt) + len(answer))
                out[f"{side}_labels"] = [-100] * len(prompt) + answer
            return out

    class DPO(Pretokenized, DPOTrainer):
        pass

    class KTO(Pretokenized, KTOTrainer):
        def __init__(self, *a, args, **kw):
            # TRL refuses one answer per micro-batch because its own KL pairs are made within a micro-batch; ours
            # come with the rows (the record before, as LLaMA-Factory pairs them), so one is fine: its check is
            # passed a batch of two, and the batch size is the job's again before anything reads it
            asked = args.per_device_train_batch_size
            args.per_device_train_batch_size = max(2, asked)
            try:
                super().__init__(*a, args=args, **kw)
            finally:
                args.per_device_train_batch_size = asked
            self._train_batch_size = args.train_batch_size

    class SimPO(Tokenized, CPOTrainer):
        pass

    class ORPO(Tokenized, ORPOTrainer):
        pass

    return {"dpo": DPO, "kto": KTO, "simpo": SimPO, "orpo": ORPO}

