"""``zeroboard export RUN FOLDER``: a run as a folder other tools load on their own.

The folder holds the merged weights (a LoRA adapter folded into its base; a
full model as it is) in safetensors, the tokenizer with its chat template,
the generation config (the template's end-of-answer token as a stop), a model
card (base, data, settings, final losses), its own ``zeroboard_result.json``
(so ``zeroboard check`` and the Chat page take it) and an Ollama Modelfile
(:mod:`.modelfile`).  GGUF is not written: where the ``gguf`` package is
installed, the result says what a conversion needs.  Like merge, it writes a
NEW folder through a temporary sibling, renamed only when complete.  Imports
torch inside: the web server runs it as a subprocess.
"""

from __future__ import annotations

import importlib.util
import json
import shutil
from pathlib import Path

from .. import files, safeload
from ..job import modelinfo, record, spec as specmod
from ..job.quoting import one_line
from ..training import templates
from ..words import label, say, text
from . import export, modelfile, reload
from .chat_target import resolve
from .inspect import OutputError

CARD_FIELDS = ("finetuning_type", "template", "cutoff_len", "learning_rate", "num_train_epochs", "max_steps",
               "per_device_train_batch_size", "gradient_accumulation_steps", "lora_rank", "lora_alpha", "lora_target",
               "precision", "deepspeed_stage", "offload", "seed")


def _job(run: Path) -> dict:
    for name in (record.JOB_FILE, record.SPEC_FILE):
        try:
            return specmod.read_mapping(safeload.read_text(run / name, safeload.JOB), str(run / name))
        except (OSError, ValueError):  # UnicodeDecodeError, SpecError and safeload.Refused are ValueErrors
            continue
    return {}


def _last_loss(run: Path) -> float | None:
    return record.last_loss(record.read_events(run / record.EVENTS_FILE))


def _fmt(value) -> str:
    """A value in one cell of the card's table: one line, its | escaped."""
    if isinstance(value, float):
        return f"{value:.4g}"
    text = ", ".join(map(str, value)) if isinstance(value, list) else str(value)
    return one_line(text).replace("|", "\\|")


def model_card(name: str, result: dict, job: dict, last_loss: float | None, translated: bool, lang: str = "en") -> str:
    """README.md of the folder: where the model comes from and how it was made (Hugging Face's front matter first).
    The names in it (the run, the base model, the data) are written on one line each, whatever they hold."""
    name = one_line(name)
    base = one_line(str(result.get("base_model") or "-"))
    kind = text(f"out.kind.{result.get('kind')}", lang) if result.get("kind") in ("lora_adapter", "full_model") else "-"
    lines = ["---", f"base_model: {json.dumps(base)}", "library_name: transformers", "tags: [zeroboard]", "---", "",
             f"# {Path(name).name}", "", text("export.card_intro", lang, run=name, base=base, kind=kind), "",
             f"## {text('export.card_data', lang)}", "",
             text("export.card_datasets", lang, datasets=_fmt(job.get("dataset") or "-"), folder=_fmt(job.get("dataset_dir", "-"))),
             "", f"## {text('export.card_settings', lang)}", "", "| | |", "|---|---|"]
    lines += [f"| {label(k, lang)} (`{k}`) | {_fmt(job[k])} |" for k in CARD_FIELDS if k in job]
    losses = [("train_loss", result.get("train_loss")), ("eval_loss", result.get("eval_loss")), ("last_logged_loss", last_loss)]
    lines += ["", f"## {text('export.card_losses', lang)}", "", "| | |", "|---|---|"]
    lines += [f"| `{k}` | {v:.4f} |" for k, v in losses if isinstance(v, (int, float))]
    lines += [f"| `global_step` | {result.get('global_step', '-')} |", "",
              f"## {text('export.card_use', lang)}", "", text("export.card_use_text", lang), "",
              text("export.card_ollama" if translated else "export.card_ollama_plain", lang), ""]
    return "\n".join(lines)


def modelfile_text(name: str, tr: modelfile.Translation, system: str, stops: list[str]) -> str:
    """The export's Modelfile: a header saying where it comes from (the run's name as it is: a comment, whatever it
    holds, see modelfile.comment), then what :func:`modelfile.modelfile` writes."""
    header = [text("export.mf_made", "en", run=name, version=modelinfo.version("zeroboard") or "?")]
    header.append(text("export.mf_template", "en") if tr.template else text("export.mf_no_template", "en", why=str(tr.why)))
    if tr.shape is not None and tr.shape.bos:
        header.append(text("export.mf_bos", "en", bos=tr.shape.bos))
    return modelfile.modelfile(tr, system, stops, header)


def _generation_config(model, tokenizer) -> None:
    """The end-of-answer token (the template's) and the padding token, as the chat used them."""
    cfg = model.generation_config
    eos = {tokenizer.eos_token_id} | set(cfg.eos_token_id if isinstance(cfg.eos_token_id, list) else [cfg.eos_token_id])
    eos = sorted(i for i in eos if i is not None)
    cfg.eos_token_id = eos[0] if len(eos) == 1 else eos
    if tokenizer.pad_token_id is not None:
        cfg.pad_token_id = tokenizer.pad_token_id


def export_run(run_dir: str | Path, out_dir: str | Path, base_model: str | None = None, lang: str = "en") -> dict:
    """A run's result (or an adapter or model folder) as a standalone folder with a Modelfile. Raises OutputError."""
    target = resolve(run_dir)
    run = Path(target.path)
    result = json.loads((run / record.RESULT_FILE).read_text()) if (run / record.RESULT_FILE).is_file() else \
        {"kind": "lora_adapter" if target.kind == "lora_adapter" else "full_model", "base_model": target.base}
    base = base_model or target.base
    if target.kind == "lora_adapter" and (not base or not (Path(base) / "config.json").is_file()):
        raise OutputError(say("out.merge_base", base=repr(base)))
    out = export._new_dir(out_dir, run)

    import torch

    model, tokenizer = reload.load(run, base if target.kind == "lora_adapter" else None)
    if target.kind == "lora_adapter":
        model = model.merge_and_unload()
    if target.precision in ("bf16", "fp16"):  # the run's precision, not the fp32 of a merge on the CPU
        model = model.to({"bf16": torch.bfloat16, "fp16": torch.float16}[target.precision])
    _generation_config(model, tokenizer)
    special = templates.special_tokens(tokenizer)
    tr = modelfile.translate(getattr(tokenizer, "chat_template", None), special)
    system = tr.shape.default_system if tr.shape else target.system
    job = _job(run)
    tmp = export._staging(out)
    try:
        model.save_pretrained(tmp, safe_serialization=True, max_shard_size=export.MAX_SHARD)
        tokenizer.save_pretrained(tmp)
        stops = [tokenizer.eos_token] if tokenizer.eos_token else []
        files.write_text_atomic(tmp / "Modelfile", modelfile_text(target.name, tr, system, stops))
        files.write_text_atomic(tmp / "README.md", model_card(target.name, result, job, _last_loss(run),
                                                             tr.template is not None, lang))
        export._write_result(tmp, out, base, result.get("global_step"), f"zeroboard export {target.name}")
        export._finish(tmp, out)
    except BaseException:
        shutil.rmtree(tmp, ignore_errors=True)
        raise
    info = {"path": str(out), "from": target.name, "kind": target.kind, "base_model": base,
            "parameters": sum(p.numel() for p in model.parameters()), "dtype": str(model.dtype).replace("torch.", ""),
            "modelfile": str(out / "Modelfile"), "template_translated": tr.template is not None,
            "template_why": str(tr.why) if tr.why else None, "system": system,
            "files": sorted(p.name for p in out.iterdir())}
    if importlib.util.find_spec("gguf") is not None:
        info["gguf"] = text("export.gguf_needs", lang, path=str(out))
    return info


def export_text(info: dict, lang: str = "en") -> str:
    lines = [text("export.wrote", lang, path=info["path"], src=info["from"], n=f"{info['parameters']:,}",
                  dtype=info["dtype"])]
    lines.append(text("export.modelfile_ok", lang, path=info["modelfile"]) if info["template_translated"] else
                 text("export.modelfile_plain", lang, path=info["modelfile"], why=info["template_why"] or "-"))
    if info.get("gguf"):
        lines.append(info["gguf"])
    return "\n".join(lines)
