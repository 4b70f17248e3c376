"""Reload what a run saved and let it answer: the check after training.

Imports torch and transformers, so the web server runs it as a subprocess
(``python -m zeroboard.reload RUN_DIR --prompt ...``), which prints JSON.
"""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path

from . import checks, templates


def read_result(run_dir: str | Path) -> dict:
    path = Path(run_dir) / checks.RESULT_FILE
    if not path.is_file():
        raise FileNotFoundError(f"{run_dir} holds no {checks.RESULT_FILE}: the run did not finish saving a result")
    return json.loads(path.read_text())


def load(path: str | Path, base_model: str | None = None):
    """(model, tokenizer) from a full model dir, or a LoRA adapter dir on top of its base."""
    from transformers import AutoModelForCausalLM, AutoTokenizer

    path = Path(path)
    tokenizer = AutoTokenizer.from_pretrained(path)
    if (path / "adapter_config.json").is_file():
        from peft import PeftModel

        base = base_model or json.loads((path / "adapter_config.json").read_text())["base_model_name_or_path"]
        model = PeftModel.from_pretrained(AutoModelForCausalLM.from_pretrained(base), path)
    else:
        model = AutoModelForCausalLM.from_pretrained(path)
    model.eval()
    return model, tokenizer


def answer(model, tokenizer, prompts: list[str], max_new_tokens: int = 48, template: str = "auto") -> list[str]:
    """Greedy answers, one per prompt (deterministic, so tests can compare them)."""
    import torch

    out = []
    for q in prompts:
        text = templates.prompt_text(q, tokenizer, template)
        enc = tokenizer(text, return_tensors="pt", add_special_tokens=False)
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


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(prog="python -m zeroboard.reload")
    p.add_argument("run_dir")
    p.add_argument("--prompt", action="append", help="a question to ask (repeatable)")
    p.add_argument("--no-base", action="store_true", help="skip the base model's answers")
    a = p.parse_args(argv)
    from .demo import DEMO_PROMPTS

    try:
        report = check_run(a.run_dir, a.prompt or DEMO_PROMPTS, with_base=not a.no_base)
    except (FileNotFoundError, OSError, ValueError) as e:
        print(json.dumps({"error": str(e)}))
        return 1
    print(json.dumps(report, ensure_ascii=False, indent=2))
    return 0


if __name__ == "__main__":
    sys.exit(main())
