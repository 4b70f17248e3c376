"""The plan in words: Markdown for the page, plain text for the terminal, in English or Chinese.

Every figure comes from the :class:`~zeroboard.planner.memory.Plan`, every
word from the catalog (``words.plan``), so both languages show the same
numbers.
"""

from __future__ import annotations

from ..job.placement import offloads_parameters
from ..words import text, tr
from . import reasons
from .advice import note_keys
from .memory import GIB, HEADROOM, Plan, act_mode, formula_of, setting_label

MARGIN = f"{100 * (1 - HEADROOM):.0f}"  # the headroom, in percent, as the words say it


def gib(n: int | float) -> str:
    return f"{n / GIB:.2f}"


def count(n: int) -> str:
    return f"{n / 1e9:.2f} B" if n >= 1e9 else f"{n / 1e6:.1f} M"


def setting_words(setting: dict, lang: str) -> str:
    """An advice or alternative row's setting, in words (offload moving what it moves at that stage)."""
    return setting_label(setting["stage"], setting["offload"], offloads_parameters(setting["stage"], setting["offload"]),
                         setting.get("new_checkpointing", False), lang)


def _why(advice: dict, other: str, lang: str) -> str:
    """The advised setting against the one it is compared with (``compared``: each figure as (advised, other))."""
    (step, other_step), (needed, other_needed) = advice["compared"]["step_s"], advice["compared"]["needed_bytes"]
    return reasons.words(reasons.compare(step, needed, other_step, other_needed, False), other, lang)


def advice_text(advice: dict, lang: str = "en") -> str:
    kind = advice.get("kind")
    if kind == "nothing_fits":
        return text("plan.advice.nothing_fits", lang)
    if kind == "ram_does_not_fit":
        return text("plan.advice.ram", lang)
    if kind == "keep" and not advice.get("other"):
        return text("plan.advice.keep_only", lang, best=setting_words(advice["setting"], lang))
    if kind == "keep":  # against the next fastest setting that fits
        return text("plan.advice.keep", lang, best=setting_words(advice["setting"], lang),
                    why=_why(advice, setting_words(advice["other"], lang), lang))
    if kind == "use":
        key = "use_not" if not advice["current_fits"] else "use_room" if advice.get("current_tight") else "use_fits"
        current = setting_words(advice["current"], lang)
        return text(f"plan.advice.{key}", lang, best=setting_words(advice["setting"], lang), current=current,
                    margin=MARGIN, why=_why(advice, current, lang))
    return ""


def notes_for(plan: Plan, lang: str = "en") -> list[str]:
    return [text(f"plan.note.{k}", lang) for k in note_keys(plan)]


def formula_text(plan: Plan, lang: str = "en") -> str:
    """Which of the guide's formulas applies here, with this model's numbers."""
    s, lora = plan.setup, plan.setup.finetuning == "lora"
    dev = "cuda" if s.device == "cuda" else "cpu"
    nouns = {k: text(f"plan.dev.{k}.{dev}", lang) for k in ("every", "units")}
    who = text("plan.f.who_lora" if lora else "plan.f.who", lang, psi=count(plan.params), t=count(plan.trainable))
    if not s.deepspeed or s.stage == "0":
        body = s.weights if s.half and not s.deepspeed and s.weights in ("pure_bf16", "split", "bf16_base", "autocast") \
            else "plain"
        return text("plan.f.none", lang, formula=formula_of(s), who=who,
                    body=text(f"plan.f.none.{body}", lang, **nouns),
                    lora=text("plan.f.none.lora", lang, formula=formula_of(s)) if lora else "")
    if s.stage == "1":
        return text("plan.f.stage1", lang, n=s.world, who=who, **nouns)
    off = ""
    if s.offload_optimizer:
        off = text("plan.f.off_both" if s.offload_param else "plan.f.off_opt", lang, device=text(f"plan.dev.one.{dev}", lang))
    one = text("plan.f.one", lang) if s.world == 1 and not s.offload_optimizer else ""
    lora_txt = text("plan.f.lora3" if s.stage == "3" else "plan.f.lora2", lang) if lora else ""
    return text(f"plan.f.stage{s.stage}", lang, n=s.world, who=who, one=one, off=off, lora=lora_txt, **nouns)


def _head(plan: Plan, lang: str) -> list[str]:
    s = plan.setup
    dev = "cuda" if s.device == "cuda" else "cpu"
    mine = s.weights if s.half and not s.deepspeed and s.weights in ("pure_bf16", "split", "bf16_base") else None
    mode = text(f"plan.mode.{mine or act_mode(s).kind}", lang, precision=s.precision)
    setting = setting_label(s.stage, s.offload_optimizer or s.offload_requested, s.offload_param, lang=lang)
    devs = text(f"plan.devs.{dev}{'s' if s.world > 1 else ''}", lang)
    line = (text("plan.model", lang, model_type=plan.model.model_type, params=count(plan.params),
                 finetuning=text(f"plan.finetuning.{s.finetuning}", lang))
            + (text("plan.lora", lang, rank=s.lora_rank, trainable=count(plan.trainable)) if s.finetuning == "lora" else "")
            + text("plan.batch", lang, mode=mode, mb=s.micro_batch, seq=s.seq)
            + (text("plan.ckpt", lang) if s.checkpointing else ""))
    source = [f"*{tr(plan.model.source_msg, lang)}*", ""] if plan.model.source_msg else []
    head = "plan.head" if dev == "cuda" else "plan.head_cpu"  # memory of GPUs (显存) or of the host (内存)
    return [text(head, lang, setting=setting, n=s.world, devs=devs), line, "", *source]


def _table(plan: Plan, lang: str) -> list[str]:
    s, b = plan.setup, plan.breakdown
    dev = "cuda" if s.device == "cuda" else "cpu"
    lines = [f"| {text(f'plan.per.{dev}', lang)} | GiB |", "|---|---:|"]
    lines += [f"| {text(f'plan.part.{k}', lang)} | {gib(v)} |" for k, v in b.items()]
    if s.device == "cuda":
        lines.append(f"| {text('plan.gpu_peak', lang)} | **{gib(plan.peak_bytes)}** |")
        lines.append(f"| {text('plan.gpu_needed', lang)} | {gib(plan.needed_bytes)} |")
    else:
        lines.append(f"| {text('plan.cpu_runtime', lang)} | {gib(plan.host_bytes - plan.peak_bytes)} |")
        lines.append(f"| {text('plan.cpu_peak', lang)} | **{gib(plan.host_bytes)}** |")
    if plan.capacity_bytes is not None:
        verdict = text("plan.fits" if plan.fits else "plan.does_not_fit", lang)
        lines.append(f"| {text(f'plan.where.{dev}', lang)} | {gib(plan.capacity_bytes)} → {verdict} |")
    return lines


def _activations(plan: Plan, lang: str) -> str:
    s, d = plan.setup, plan.activation_detail
    return (text("plan.act", lang, tokens=s.tokens, layers=plan.model.layers, per=f"{d['per_token_per_layer']:,}",
                 layers_gib=gib(d["layers"]))
            + (text("plan.act_ckpt", lang) if s.checkpointing else "")
            + text("plan.act_loss_fused" if s.fused_loss else "plan.act_loss", lang,
                   loss_gib=gib(max(d["loss_forward"], d["loss_backward"])))
            + (text("plan.act_autocast", lang, gib=gib(d["copies_forward"])) if d["copies_forward"] else "")
            + text("plan.act_end", lang))


def render_markdown(plan: Plan, lang: str = "en") -> str:
    """The plan panel in ``lang`` (en or zh)."""
    s, b = plan.setup, plan.breakdown
    lines = _head(plan, lang) + _table(plan, lang)
    lines += ["", text("plan.phase", lang, phase=text(f"plan.phase.{plan.phase}", lang)), "", formula_text(plan, lang),
              _activations(plan, lang)]
    states = b["weights"] + b["optimizer states"] + b["gradients"]
    if b["activations"] > states:
        lines.append(text("plan.dominate", lang, act=gib(b["activations"]), states=gib(states)))
    if s.device == "cuda" and (s.offload_optimizer or plan.host_bytes):
        lines.append(text("plan.host", lang, gib=gib(plan.host_bytes))
                     + text("plan.host_offload" if s.offload_optimizer else "plan.host_end", lang))
    notes = notes_for(plan, lang) + ([text("plan.cpu_offload_note", lang)] if s.offload_requested and s.device == "cpu"
                                     else [])
    if notes:
        lines += [""] + [f"- {n}" for n in notes]
    if plan.alternatives:
        lines += ["", text("plan.alt_head", lang), "|---|---:|---:|---|---:|"]
        for r in plan.alternatives:
            fits = "-" if r["fits"] is None else text("plan.yes" if r["fits"] else "plan.no", lang)
            lines.append(f"| {setting_words(r, lang)} | {gib(r['peak_bytes'])} | {gib(r['needed_bytes'])} | {fits} | "
                         f"{r['step_s']:.3f} |")
    if plan.advice:
        lines += ["", text("plan.advice", lang, text=advice_text(plan.advice, lang))]
        if plan.advice.get("speed"):
            lines.append(text(f"plan.speed_source.{plan.advice['speed']['source']}", lang,
                              gpu=plan.advice["speed"]["gpu"] or "?"))
    if plan.speed:
        lines += ["", speed_text(plan, lang)]
    return "\n".join(lines)


def speed_text(plan: Plan, lang: str = "en") -> str:
    """This setting's expected tokens/s next to the fastest that fits, and what the slower one buys, in words."""
    cur, best = plan.speed["current"], plan.speed["best"]
    name = lambda r: setting_label(r["stage"], r["offload"], r["offload"] and r["stage"] == "3", lang=lang)  # noqa: E731
    where = text("plan.tps.where", lang, n=plan.setup.world, devs=text(
        f"plan.devs.{'cuda' if plan.setup.device == 'cuda' else 'cpu'}{'s' if plan.setup.world > 1 else ''}", lang))
    tps = lambda r: f"{r['tokens_per_s']:,.0f}"  # noqa: E731
    if best is cur or best["tokens_per_s"] <= cur["tokens_per_s"] * 1.03:
        return text("plan.tps.fastest", lang, setting=name(cur), where=where, tps=tps(cur))
    saved = best["needed_bytes"] - cur["needed_bytes"]
    gain = (text("plan.tps.saves", lang, gib=f"{saved / GIB:.1f}") if saved > 0.5 * GIB
            else text("plan.tps.saves_nothing", lang))
    return text("plan.tps.slower", lang, setting=name(cur), where=where, factor=f"{best['tokens_per_s'] / cur['tokens_per_s']:.1f}",
                best=name(best), tps=tps(cur), best_tps=tps(best), gain=gain)


def plain(plan: Plan, lang: str = "en") -> str:
    """Plain-terminal rendering (the markdown without emphasis)."""
    return render_markdown(plan, lang).replace("**", "")


def set_flags(choice) -> str:
    """A --fit choice as the command line's overrides."""
    return " ".join(f"--set {k}={str(v).lower() if isinstance(v, bool) else v}" for k, v in choice.overrides().items())


def choice_label(c, lang: str = "en", batch: bool = True) -> str:
    """A --fit choice's setting in words, with its micro-batch x accumulation."""
    name = setting_label(c.stage, c.offload, offloads_parameters(c.stage, c.offload), c.checkpointing, lang)
    return text("plan.at_batch", lang, setting=name, mb=c.micro_batch, acc=c.accumulation) if batch else name


def speed_source(rates, lang: str = "en") -> str:
    """Where the expected step times come from: measured on this GPU kind, or scaled from it, or taken as they are."""
    return text(f"plan.speed_source.{rates.source}", lang, gpu=rates.name or "?")


def fit_reasons(choices: list, fitting: list, lang: str = "en") -> dict[int, str]:
    """Each shown choice's reason: the best against the fastest other setting that fits, the others against the best."""
    best = fitting[0]
    ref = reasons.reference(choices, best)
    out = {id(best): reasons.of(best, ref, choice_label(ref, lang), lang) if ref else text("plan.reason.only", lang)}
    for c in fitting[1:]:
        out[id(c)] = reasons.of(c, best, choice_label(best, lang), lang)
    return out


def asked_line(choices: list, best, lang: str = "en") -> str:
    """The job's own setting against the best: why it changes (nothing when the job already asks for the best)."""
    asked = next((c for c in choices if c.asked), None)
    if asked is None or asked is best:
        return ""
    if not asked.fits:
        return text("plan.fit_asked_not", lang, setting=choice_label(asked, lang), need=gib(asked.plan.needed_bytes),
                    have=gib(asked.plan.capacity_bytes or 0))
    return text("plan.fit_asked", lang, setting=choice_label(asked, lang),
                reason=reasons.of(asked, best, choice_label(best, lang), lang))


def fit_markdown(choices: list, lang: str = "en", top: int = 5, measured: dict[int, str] | None = None,
                 pick=None, source: str = "") -> str:
    """The fastest settings that fit, each with why (against the best, or the best against the next other setting),
    the job's own setting against the best, and the best as --set overrides.

    ``measured``: the probes' word for each probed choice (by ``id``), in a column of its own, the choices already
    ranked by them; ``pick``: what the best's measurement says ("measured 29.0k tokens/s, 1.9x the next");
    ``source``: whether the ranking is measured, partly measured or predicted (``plan.probe.<source>``)."""
    if not choices:
        return ""
    c0 = choices[0]
    s = c0.plan.setup
    probed = measured is not None
    cols = text("plan.fit_cols", lang) + (text("plan.probe.col", lang) if probed else "")
    lines = [text("plan.fit_head", lang, batch=c0.micro_batch * c0.accumulation * s.world, n=s.world), "",
             cols, "|---|---|---:|---:|---:|---:|---|" + ("---:|" if probed else "")]
    fitting = [c for c in choices if c.fits is not False][:top]
    if not fitting:
        small = min(choices, key=lambda c: c.plan.needed_bytes)
        lines = lines[:1] + ["", text("plan.fit_none", lang, gib=gib(small.plan.needed_bytes),
                                      setting=choice_label(small, lang, batch=False))]
        return "\n".join(lines)
    cpu = s.device != "cuda"  # CPU processes: the step-time model is the H200's, the speed is what the probes measure
    why = {id(c): "-" for c in fitting} if cpu else fit_reasons(choices, fitting, lang)
    for c in fitting:
        tight = text("plan.fit_tight", lang, margin=MARGIN) if c.tight else ""
        cell = f" {tr(measured.get(id(c), '-'), lang)} |" if probed else ""
        lines.append(f"| {choice_label(c, lang, batch=False)} | {c.micro_batch} x {c.accumulation} | "
                     f"{gib(c.plan.peak_bytes)} | {gib(c.plan.needed_bytes)} | "
                     + ("- | - | " if cpu else f"{c.step_s:.3f} | {c.tokens_per_s:,.0f} | ") + f"{why[id(c)]}{tight} |{cell}")
    best = fitting[0]
    asked = "" if cpu else asked_line(choices, best, lang)
    lines += ["", *([asked, ""] if asked else []),
              text("plan.fit_best", lang, setting=choice_label(best, lang, batch=False), sets=set_flags(best))
              + (text("plan.probe.pick_line", lang, pick=tr(pick, lang)) if pick else ""), "",
              text("plan.probe.cpu_note", lang) if cpu else speed_source(best.rates, lang)]
    if source:
        lines += ["", text(f"plan.probe.{source}", lang)]
    return "\n".join(lines)
