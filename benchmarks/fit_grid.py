"""``zeroboard plan --fit`` against measured grids: each setting of a setup run alone on the GPU, its tokens/s.

    python benchmarks/fit_grid.py --out benchmarks/results/fit_grid.json            # GPU: measure the grids
    python benchmarks/fit_grid.py --tiny --out /tmp/grid.json                        # the same harness on CPU
    python benchmarks/fit_grid.py --picks benchmarks/results/fit_grid.json           # CPU: --fit's pick per grid

A grid (benchmarks/heldout_sets.py GRIDS) is one job: model, cutoff, LoRA or full, per-device batch
(micro-batch x accumulation). Each of its settings goes through ``zeroboard.job.command.prepare`` and
``zeroboard.training.train`` like ``zeroboard train``, alone on the GPU (step times of runs sharing a GPU mean
nothing). tokens/s = micro-batch x accumulation x cutoff / the median step after the first two. ``--picks`` plans
every grid with ``planner.fit`` as the code is now and writes, per grid, --fit's pick, its predicted tokens/s, the
fastest measured setting, the pick's measured share of it, and the step-time model's time for each measured setting
with its error (``model``).
"""

from __future__ import annotations

import argparse
import json
import sys
import time
from dataclasses import replace
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
import heldout_sets as hsets  # noqa: E402
import planner_heldout as h  # noqa: E402

GIB = 1 << 30


def config_of(finetuning: str, stage: str, accumulation: int, ckpt: bool = False, offload: bool = False) -> str:
    return f"{finetuning}-{stage}" + ("+off" if offload else "") + ("+ckpt" if ckpt else "") + (
        f"+ga{accumulation}" if accumulation > 1 else "")


def grid_rows(names: list[str]) -> list[tuple[str, str, int, int, str]]:
    out = []
    for g in names:
        model, seq, ft, batch, settings = hsets.GRIDS[g]
        out += [(g, model, seq, mbs, config_of(ft, stage, batch // mbs)) for stage, mbs in settings]
    return out


def measure(a) -> list[dict]:
    from zeroboard import workspace
    from zeroboard.job import devices

    work = Path(a.workdir)
    work.mkdir(parents=True, exist_ok=True)
    workspace.allow([f"{work}:rw"])
    done = {(r["grid"], r["config"], r["mbs"]) for r in a.kept}
    rows = [r for r in grid_rows(a.grids) if (r[0], r[4], r[3]) not in done]
    if a.tiny:  # tiny shapes, short samples
        rows = [(g, model, 64, mbs, cfg) for g, model, _seq, mbs, cfg in rows]
    seqs: dict[str, list[int]] = {}
    for _, model, seq, *_ in rows:
        seqs.setdefault(model, [])
        if seq not in seqs[model]:
            seqs[model].append(seq)
    h.prepare_models(list(seqs), work, seqs, a.tiny)
    gpus = devices.detect_gpus()
    sampler = h.Sampler()
    sampler.start()
    results: list[dict] = list(a.kept)
    deadline = a.started + a.budget_s
    for grid, model, seq, mbs, cfg in rows:
        if time.time() > deadline:
            results.append({"grid": grid, "model": model, "config": cfg, "seq": seq, "mbs": mbs,
                            "failure": "not run: the harness's time budget ran out"})
            continue
        c = h.parse_config(cfg)
        job = h.job_of(model, seq, mbs, cfg, work, a.steps, a.tiny)
        row = {"grid": grid, "family": h.MODELS[model][0], "model": model, "config": cfg, "seq": seq, "mbs": mbs,
               "micro_batch": mbs, "accum": c["accumulation"], "stage": c["deepspeed_stage"], "offload": c["offload"],
               "checkpointing": c["gradient_checkpointing"], "finetuning": c["finetuning_type"], **h.plan_of(job, gpus)}
        t0 = time.time()
        proc, log, _env = h.start(job, False)
        try:
            proc.wait(timeout=a.row_timeout)
        except Exception:  # noqa: BLE001 - a hung run is stopped and said so
            proc.kill()
            proc.wait()
        row["seconds"] = round(time.time() - t0, 1)
        row = h.finish(row, job, proc, log, sampler)
        if row.get("step_s"):
            row["tokens_per_s"] = mbs * c["accumulation"] * seq / row["step_s"]
        for k in ("forward_peak_gib", "step_peak_gib", "step_begin_gib", "pools_gib"):
            row.pop(k, None)
        results.append(row)
        print(f"{grid:<28}{cfg:<22}{mbs:>3} x{c['accumulation']}  step {row.get('step_s') or 0:7.3f} s  "
              f"{row.get('tokens_per_s', 0):9.0f} tok/s  torch {row.get('torch_peak_gib', 0):6.2f}  "
              f"NVML {row.get('nvml_peak_gib', 0):6.2f}  {str(row.get('failure', ''))[-200:]}", flush=True)
        import shutil

        shutil.rmtree(job.output_dir, ignore_errors=True)
        a.out.write_text(json.dumps({"steps": a.steps, "rows": results, **a.kept_meta}, indent=1))
    sampler.done.set()
    return results


def picks(data: dict) -> list[dict]:
    """--fit's pick for each grid's job (an H200 with 139 GiB free), against what the grid measured."""
    from zeroboard import planner
    from zeroboard.job.devices import Gpu
    from zeroboard.planner import report

    gpus = [Gpu(0, "NVIDIA H200", 143771 << 20, 139 << 30, 0, 0, (9, 0))]
    out = []
    for g, (model, seq, ft, batch, _settings) in hsets.GRIDS.items():
        measured = [r for r in data["rows"] if r.get("grid") == g and r.get("tokens_per_s")]
        if not measured:
            continue
        liger = next(((r.get("speedups") or {}).get("liger") for r in measured if r.get("speedups")), None)
        job = h.job_of(model, seq, batch, config_of(ft, "none", 1), Path("/tmp/zb-grid"), 10, False)
        job = replace(job, gradient_accumulation_steps=1, liger_kernel="on" if liger else "off")
        choices = planner.fit(job, gpus, model=planner.shape_from_config(h.MODELS[model][1]))
        best = choices[0]
        key = lambda stage, mbs, ckpt, off: (stage, mbs, ckpt, off)  # noqa: E731
        by = {key(r["stage"], r["mbs"], r["checkpointing"], r["offload"]): r for r in measured}
        fastest = max(measured, key=lambda r: r["tokens_per_s"])
        hit = by.get(key(best.stage, best.micro_batch, best.checkpointing, best.offload))
        ranked = [(c.stage, c.micro_batch, c.checkpointing, c.offload) for c in choices
                  if key(c.stage, c.micro_batch, c.checkpointing, c.offload) in by]
        reason = report.fit_reasons(choices, [c for c in choices if c.fits][:5])[id(best)]
        out.append({"grid": g, "pick": best.overrides(), "pick_predicted_tokens_per_s": best.tokens_per_s,
                    "pick_needed_gib": best.plan.needed_bytes / GIB, "pick_reason": reason,
                    "pick_measured_tokens_per_s": hit["tokens_per_s"] if hit else None,
                    "pick_nvml_peak_gib": hit.get("nvml_peak_gib") if hit else None,
                    "fastest": {k: fastest[k] for k in ("config", "mbs", "accum", "tokens_per_s")},
                    "share_of_fastest": hit["tokens_per_s"] / fastest["tokens_per_s"] if hit else None,
                    "predicted_order": [list(k) for k in ranked],
                    # the model's first among the settings the grid measured (the pick itself may not be one of them)
                    "first_measured": list(ranked[0]) if ranked else None,
                    "first_measured_share": by[ranked[0]]["tokens_per_s"] / fastest["tokens_per_s"] if ranked else None,
                    "measured_order": [[r["stage"], r["mbs"], r["checkpointing"], r["offload"]] for r in
                                       sorted(measured, key=lambda r: -r["tokens_per_s"])],
                    "model": [{"config": r["config"], "mbs": r["mbs"], "measured_step_s": r["step_s"],
                               "model_step_s": c.step_s, "error": c.step_s / r["step_s"] - 1,
                               "parts": {k: round(v, 4) for k, v in c.time.parts.items()}}
                              for c in choices for r in [by.get(key(c.stage, c.micro_batch, c.checkpointing, c.offload))]
                              if r is not None]})
        print(f"{g:<28} pick {best.stage:>4} {best.micro_batch}x{best.accumulation} ckpt={best.checkpointing} "
              f"predicted {best.tokens_per_s:8.0f}  measured {out[-1]['pick_measured_tokens_per_s'] or 0:8.0f}  "
              f"fastest {fastest['config']} {fastest['mbs']} {fastest['tokens_per_s']:8.0f}  "
              f"share {out[-1]['share_of_fastest'] or 0:.3f}")
    return out


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--out", type=Path)
    ap.add_argument("--grids", default=",".join(hsets.GRIDS))
    ap.add_argument("--steps", type=int, default=10)
    ap.add_argument("--workdir", default="/tmp/zb-heldout")
    ap.add_argument("--budget-s", type=float, default=300, help="seconds from the start: start nothing after this")
    ap.add_argument("--row-timeout", type=float, default=120)
    ap.add_argument("--skip-done", type=Path, help="a results file: settings measured there are kept, not run again")
    ap.add_argument("--tiny", action="store_true", help="tiny shapes on CPU: checks the harness, measures nothing")
    ap.add_argument("--picks", type=Path, help="a results file: add --fit's picks, as the planner is now")
    a = ap.parse_args()
    a.started = time.time()
    a.grids = [g for g in a.grids.split(",") if g]
    if a.picks:
        data = json.loads(a.picks.read_text())
        data["picks"] = picks(data)
        (a.out or a.picks).write_text(json.dumps(data, indent=1))
        return 0
    a.out = a.out or Path("/tmp/fit_grid.json")
    a.kept, a.kept_meta = [], {}
    if a.skip_done:  # its rows measured, and what it says of them (--picks writes the picks again)
        done = json.loads(a.skip_done.read_text())
        a.kept = [r for r in done["rows"] if r.get("tokens_per_s")]
        a.kept_meta = {k: done[k] for k in ("provenance",) if k in done}
    measure(a)
    return 0


if __name__ == "__main__":
    sys.exit(main())
