"""Reload what a run saved and let it answer: the check after training.

Imports torch and transformers inside its functions, so the web server runs
it as a subprocess (``python -m zeroboard.cli check RUN_DIR --json``).
"""

from __future__ import annotations

import json
from pathlib import Path

from ..data.demo import DEMO_PROMPTS, IDENTITY_ANSWER_EN, IDENTITY_ANSWER_ZH, IDENTITY_QUESTIONS_EN, IDENTITY_QUESTIONS_ZH
from ..job import record
from ..training import templates, vision
from ..words import say, text
from .inspect import Inspection, Item, OutputError, inspect


def read_result(run_dir: str | Path) -> dict:
    path = Path(run_dir) / record.RESULT_FILE
    if not path.is_file():
        raise OutputError(say("out.no_result_file", run=str(run_dir), file=record.RESULT_FILE))
    return json.loads(path.read_text())


def load(path: str | Path, base_model: str | None = None):
    """(model, tokenizer) from a full model dir, or a LoRA adapter dir on top of its base."""
    from transformers import AutoTokenizer

    path = Path(path)
    tokenizer = AutoTokenizer.from_pretrained(path)
    if (path / "adapter_config.json").is_file():
        from peft import PeftModel

        base = base_model or json.loads((path / "adapter_config.json").read_text())["base_model_name_or_path"]
        base_model_ = vision.auto_model(base).from_pretrained(base)
        if len(tokenizer) > base_model_.get_input_embeddings().weight.shape[0]:  # a template added tokens in training
            base_model_.resize_token_embeddings(len(tokenizer))
        model = PeftModel.from_pretrained(base_model_, path)
    else:
        model = vision.auto_model(path).from_pretrained(path)
    model.eval()
    return model, tokenizer


def answer(model, tokenizer, prompts: list[str], max_new_tokens: int = 48, template: str = "auto") -> list[str]:
    """Greedy answers, one per prompt (deterministic, so tests can compare them)."""
    import torch

    out = []
    for q in prompts:
        prompt = templates.prompt_text(q, tokenizer, template)
        enc = tokenizer(prompt, return_tensors="pt", add_special_tokens=False)
        with torch.no_grad():
            gen = model.generate(**enc, max_new_tokens=max_new_tokens, do_sample=False,
                                 pad_token_id=tokenizer.pad_token_id, eos_token_id=tokenizer.eos_token_id)
        out.append(tokenizer.decode(gen[0, enc["input_ids"].shape[1]:], skip_special_tokens=True).strip())
    return out


def check_run(run_dir: str | Path, prompts: list[str], with_base: bool = True) -> dict:
    result = read_result(run_dir)
    model, tok = load(result["path"], result.get("base_model"))
    report = {"result": result, "prompts": prompts, "answers": answer(model, tok, prompts)}
    if with_base:
        base, btok = load(result["base_model"])
        report["base_answers"] = answer(base, btok, prompts)
    return report


def check(run_dir: str | Path, prompts: list[str] | None = None, with_base: bool = True) -> dict:
    """What was saved, and the final output's answers next to the base model's."""
    ins = inspect(run_dir)
    if ins.result is None or ins.result.get("kind") == "zero_checkpoint":
        zero = any(i.kind == "zero_checkpoint" for i in ins.items)
        raise OutputError(say("out.nothing_final_zero" if zero else "out.nothing_final", run=str(run_dir),
                              file=record.RESULT_FILE))
    prompts = prompts or DEMO_PROMPTS
    report = check_run(run_dir, prompts, with_base=with_base)
    expected = {**{q: IDENTITY_ANSWER_EN for q in IDENTITY_QUESTIONS_EN},
                **{q: IDENTITY_ANSWER_ZH for q in IDENTITY_QUESTIONS_ZH}}
    report["expected"] = [expected.get(q) for q in prompts]
    report["matches"] = [None if e is None else a.strip() == e for a, e in zip(report["answers"], report["expected"])]
    report["inspection"] = ins.to_dict()
    return report


def check_text(report: dict, lang: str = "en") -> str:
    ins = Inspection(**{**report["inspection"], "items": [Item(**i) for i in report["inspection"]["items"]]})
    lines = [ins.text(lang), "", text("out.reload_head", lang)]
    base = report.get("base_answers") or [None] * len(report["prompts"])
    for q, a, b, ok in zip(report["prompts"], report["answers"], base, report["matches"]):
        mark = "" if ok is None else text("out.matches" if ok else "out.differs", lang)
        lines.append(text("out.tuned_line", lang, q=q, a=a, mark=mark))
        if b is not None:
            lines.append(text("out.base_line", lang, b=b))
    return "\n".join(lines)
