"""What one transformer layer keeps for backward, per token, on the GPU with the kernels a run uses, against the
planner's derivation (zeroboard.planner.activations.layer_act_bytes).

    python benchmarks/planner_layer_probe.py --out benchmarks/results/planner_layer_probe.json   # GPU
    python benchmarks/planner_layer_probe.py --cpu                                                # the harness on CPU

Each case builds a random model of a family's real widths with 2 and then 3 layers, applies what the trainer
applies (Liger's kernels through transformers' own hook, LoRA through peft, the 16-bit cast DeepSpeed makes) and
counts the storages autograd saves in a forward pass (``saved_tensors_hooks``, each storage once, parameters left
out). One layer more is what a layer keeps; the figure is per token.
"""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "app"))
sys.path.insert(0, str(ROOT / "benchmarks"))

# model, finetuning, mode (pure16: the model in bf16 as under DeepSpeed ZeRO-1/2; autocast: fp32 weights, bf16 autocast)
CASES = [
    ("phi3-mini", "lora", "pure16"),
    ("phi3-mini", "full", "pure16"),
    ("phi3-mini", "lora", "autocast"),
    ("llama3.2-1b", "lora", "pure16"),
    ("llama3.2-1b", "full", "pure16"),
    ("gemma2-2b", "lora", "autocast"),
    ("gemma2-2b", "full", "pure16"),
]


def saved_bytes(model, forward) -> int:
    """Bytes of the storages autograd saves while ``forward()`` runs, each storage once, parameters left out."""
    import torch

    params = {p.untyped_storage().data_ptr() for p in model.parameters()}
    seen: dict[int, int] = {}

    def pack(t):
        s = t.untyped_storage()
        if s.data_ptr() not in params:
            seen[s.data_ptr()] = s.nbytes()
        return t

    with torch.autograd.graph.saved_tensors_hooks(pack, lambda t: t):
        forward()
    return sum(seen.values())


def saved_per_layer(name: str, finetuning: str, mode: str, tokens: tuple[int, int], device: str, liger: bool,
                    padded: bool = False) -> float:
    import torch
    from transformers import AutoConfig, AutoModelForCausalLM

    import planner_heldout as h

    cfg = {k: v for k, v in h.MODELS[name][1].items() if k != "model_type"}
    mt = h.MODELS[name][1]["model_type"]
    counts = []
    for layers in (2, 3):
        torch.manual_seed(0)
        kw = {**cfg, "num_hidden_layers": layers}
        if "layer_types" in kw:  # one entry a layer (the third of the Ministral-shaped model slides)
            kw["layer_types"] = kw["layer_types"][:layers]
        hf = AutoConfig.for_model(mt, **kw, pad_token_id=0, eos_token_id=1, bos_token_id=None)
        with torch.device(device):
            model = AutoModelForCausalLM.from_config(hf, dtype=torch.bfloat16 if mode == "pure16" else torch.float32)
        if liger:
            from liger_kernel.transformers import _apply_liger_kernel_to_instance

            _apply_liger_kernel_to_instance(model=model)
        if finetuning == "lora":
            from peft import LoraConfig, get_peft_model

            model = get_peft_model(model, LoraConfig(r=16, lora_alpha=32, target_modules="all-linear", lora_dropout=0.0))
            if mode == "pure16":
                for p in model.parameters():
                    p.data = p.data.to(torch.bfloat16)
        model.train()
        ids = torch.randint(2, hf.vocab_size, tokens, device=device)
        mask = torch.ones_like(ids)
        if padded:  # the last row a few tokens short, as a padded micro-batch has it (SDPA then gets a mask)
            mask[-1, -7:] = 0

        def forward(model=model, ids=ids, mask=mask):
            with torch.autocast(device, dtype=torch.bfloat16, enabled=mode == "autocast"):
                model(input_ids=ids, attention_mask=mask, labels=ids)

        counts.append(saved_bytes(model, forward))
        del model
        if device == "cuda":
            torch.cuda.empty_cache()
    return (counts[1] - counts[0]) / (tokens[0] * tokens[1])


def planned_per_layer(name: str, finetuning: str, mode: str, tokens: tuple[int, int], liger: bool,
                      padded: bool = False, device: str = "cuda") -> float:
    """The planner's bytes per token and layer; under autocast with the layer's 16-bit weight copies, which the
    plan counts apart (activations.autocast_copies), spread over the tokens."""
    from dataclasses import replace

    import planner_heldout as h
    from zeroboard import planner
    from zeroboard.planner import activations

    shape = planner.shape_from_config(h.MODELS[name][1])
    m = activations.ActMode(mode, finetuning == "lora", liger=liger and shape.rms_norm and shape.gated,
                            masked=padded, seq=tokens[1], eager=shape.eager_default, cuda=device == "cuda",
                            autocast_fp32=mode == "autocast" and device == "cuda")
    per = activations.layer_act_bytes(shape, m, ["all"], 16)
    if mode == "autocast":
        copies = [activations.autocast_copies(replace(shape, layers=n), finetuning == "lora", False)["forward"]
                  for n in (2, 3)]
        per += (copies[1] - copies[0]) / (tokens[0] * tokens[1])
    return per


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--out", type=Path)
    ap.add_argument("--cpu", action="store_true", help="run on CPU without Liger (checks the harness)")
    ap.add_argument("--tokens", default="2x512", help="micro-batch x sequence")
    ap.add_argument("--padded", action="store_true", help="a micro-batch with padding: SDPA gets a mask")
    ap.add_argument("--only", default="", help="comma list of model names")
    ap.add_argument("--cases", default="", help="instead of CASES: model:finetuning:mode, comma separated")
    a = ap.parse_args()
    device, liger = ("cpu", False) if a.cpu else ("cuda", True)
    b, t = (int(x) for x in a.tokens.split("x"))
    if a.cpu:
        b, t = 1, 16
    rows = []
    cases = [tuple(c.split(":")) for c in a.cases.split(",")] if a.cases else CASES
    cases = [c for c in cases if not a.only or c[0] in a.only.split(",")]
    for name, ft, mode in cases if not a.cpu else cases[:1]:  # on CPU one case of the real widths, few tokens
        measured = saved_per_layer(name, ft, mode, (b, t), device, liger, a.padded)
        planned = planned_per_layer(name, ft, mode, (b, t), liger, a.padded, device)
        rows.append({"model": name, "finetuning": ft, "mode": mode, "liger": liger, "tokens": [b, t], "padded": a.padded,
                     "measured_bytes_per_token": measured, "planned_bytes_per_token": planned,
                     "error": planned / measured - 1})
        print(f"{name:<14}{ft:<6}{mode:<10} measured {measured:10.1f}  planned {planned:10.1f}  {planned / measured - 1:+.1%}",
              flush=True)
    if a.out:
        import torch

        old = json.loads(a.out.read_text())["rows"] if a.out.is_file() else []
        keep = [r for r in old if (r["model"], r["finetuning"], r["mode"], r.get("padded", False)) not in
                {(r["model"], r["finetuning"], r["mode"], r["padded"]) for r in rows}]
        a.out.write_text(json.dumps({"device": device, "torch": torch.__version__, "rows": keep + rows}, indent=1))
    return 0


if __name__ == "__main__":
    sys.exit(main())
