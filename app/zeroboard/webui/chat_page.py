"""The Chat page (对话): talk to a run's result, its base model beside it, through the chat worker.

A page of the registry (``pages``): :func:`render` lays out its tab, :func:`wire` connects its events; the
language switch, the password and the page's load come from the app as for every page.  The logic is in
``chat_handlers``.

- pick a run or a model and the devices, Load: a chat worker loads it once (the run's precision on GPUs) and
  keeps it until Unload or until it has sat unused for "Unload after idle" minutes; the device guard counts it as
  a job.  The status line and Unload find the worker on the chosen devices in the runs index, so a reloaded tab,
  another tab or a worker ``zeroboard chat`` loaded is shown and unloaded as the one this tab loaded;
- the system prompt defaults to the run's template's own, sampling to greedy; each answer streams in;
- Side by side: the same question to the base (left) and the tuned model (right), with the same seed;
- Stop ends the answer in flight (this session's) after the token being made.
"""

from __future__ import annotations

from dataclasses import dataclass

import gradio as gr

from .. import words, workspace
from ..job import devices as devmod
from . import chat_handlers as ch, pages


@dataclass(kw_only=True)
class ChatPage(pages.View):
    target: gr.Dropdown
    refresh: gr.Button
    devices: gr.Dropdown
    idle: gr.Number
    load: gr.Button
    unload: gr.Button
    status: gr.Markdown
    about: gr.Markdown
    system: gr.Textbox
    max_new_tokens: gr.Slider
    temperature: gr.Slider
    top_p: gr.Slider
    seed: gr.Number
    side_by_side: gr.Checkbox
    base_chat: gr.Chatbot
    tuned_chat: gr.Chatbot
    question: gr.Textbox
    send: gr.Button
    stop: gr.Button
    clear: gr.Button
    figures: gr.Markdown
    message: gr.Markdown
    state: gr.State  # {"folder": the worker this session talks to, "has_base": bool}

    def relabel_outputs(self) -> list:
        return [*super().relabel_outputs(), self.devices]

    def relabel(self, lang: str) -> list:
        return [*super().relabel(lang), gr.update(choices=ch.device_choices(devmod.detect_gpus(), lang),
                                                  label=words.label("chat.devices", lang))]


def render(ctx: pages.Context) -> ChatPage:
    lang, gpus = ctx.lang, ctx.gpus
    t = lambda key: words.label(key, lang)  # noqa: E731
    d = ch.DEFAULTS
    with gr.Row(equal_height=True):
        target = gr.Dropdown([], label=t("chat.target"), allow_custom_value=True, scale=4, elem_id="zb-chat-target")
        refresh = gr.Button("↻", size="sm", scale=0, min_width=40, elem_id="zb-chat-refresh")
        devices = gr.Dropdown(ch.device_choices(gpus, lang), value=ch.default_devices(gpus), multiselect=True,
                              label=t("chat.devices"), scale=2, elem_id="zb-chat-devices")
        # no minimum here: gradio would refuse 0 in its own English words; chat_settings.idle_minutes names the field
        idle = gr.Number(d["idle_minutes"], label=t("chat.idle"), scale=1, elem_id="zb-chat-idle")
    with gr.Row():
        load = gr.Button(t("chat.load"), variant="primary", elem_id="zb-chat-load")
        unload = gr.Button(t("chat.unload"), elem_id="zb-chat-unload")
    status = gr.Markdown(elem_id="zb-chat-status")
    about = gr.Markdown(elem_id="zb-chat-about")
    with gr.Accordion(t("chat.settings"), open=False) as settings:
        system = gr.Textbox(label=t("chat.system"), lines=2, elem_id="zb-chat-system")
        with gr.Row():
            max_new_tokens = gr.Slider(1, 4096, d["max_new_tokens"], step=1, label=t("chat.max_new_tokens"),
                                       elem_id="zb-chat-max-new-tokens")
            temperature = gr.Slider(0, 2, d["temperature"], step=0.05, label=t("chat.temperature"),
                                    elem_id="zb-chat-temperature")
            top_p = gr.Slider(0.05, 1, d["top_p"], step=0.05, label=t("chat.top_p"), elem_id="zb-chat-top-p")
            seed = gr.Number(d["seed"], label=t("chat.seed"), precision=0, elem_id="zb-chat-seed")
    side_by_side = gr.Checkbox(False, label=t("chat.side_by_side"), info=t("chat.side_by_side_info"),
                               elem_id="zb-chat-side-by-side")
    with gr.Row(equal_height=True):
        base_chat = gr.Chatbot(label=t("chat.side_base"), visible=False, height=420, elem_id="zb-chat-base")
        tuned_chat = gr.Chatbot(label=t("chat.side_tuned"), height=420, elem_id="zb-chat-tuned")
    with gr.Row(equal_height=True):
        question = gr.Textbox(placeholder=t("chat.question"), label=t("chat.question"), show_label=False, scale=5,
                              elem_id="zb-chat-question")
        send = gr.Button(t("chat.send"), variant="primary", scale=1, elem_id="zb-chat-send")
        stop = gr.Button(t("chat.stop"), variant="stop", scale=1, elem_id="zb-chat-stop")
        clear = gr.Button(t("chat.clear"), scale=1, elem_id="zb-chat-clear")
    figures = gr.Markdown(elem_id="zb-chat-figures")
    message = gr.Markdown(elem_id="zb-chat-message")
    state = gr.State({})
    texts = {"chat.target": (target, "label"),  # chat.devices: relabel (its choices are words too)
             "chat.idle": (idle, "label"), "chat.load": (load, "value"), "chat.unload": (unload, "value"),
             "chat.settings": (settings, "label"), "chat.system": (system, "label"),
             "chat.max_new_tokens": (max_new_tokens, "label"), "chat.temperature": (temperature, "label"),
             "chat.top_p": (top_p, "label"), "chat.seed": (seed, "label"),
             "chat.side_by_side": (side_by_side, {"label": "chat.side_by_side", "info": "chat.side_by_side_info"}),
             "chat.side_base": (base_chat, "label"), "chat.side_tuned": (tuned_chat, "label"),
             "chat.question": (question, {"placeholder": "chat.question", "label": "chat.question"}),
             "chat.send": (send, "value"), "chat.stop": (stop, "value"),
             "chat.clear": (clear, "value")}
    return ChatPage(texts=texts, target=target, refresh=refresh, devices=devices, idle=idle, load=load, unload=unload,
                    status=status, about=about, system=system, max_new_tokens=max_new_tokens, temperature=temperature,
                    top_p=top_p, seed=seed, side_by_side=side_by_side, base_chat=base_chat, tuned_chat=tuned_chat,
                    question=question, send=send, stop=stop, clear=clear, figures=figures, message=message, state=state)


def wire(p: ChatPage, ctx: pages.Context) -> None:
    manager, lang, io = ctx.manager, ctx.lang_radio, dict(show_progress="hidden")

    def chat_targets(current):
        choices = ch.targets(manager)  # each named as the workspace names it
        return gr.update(choices=[(workspace.shown(c), c) for c in choices],
                         value=current if current else (choices[0] if choices else None))

    def chat_pick(value, lang_value):
        system, about = ch.about(value, lang_value)
        return system, about

    def chat_load(value, devices, idle, state, lang_value):
        yield gr.skip(), words.text("chat.loading_now", lang_value, name=workspace.shown(value) if value else "-"), state, gr.skip()
        loaded = ch.load(manager, value, devices, idle, lang_value)
        if loaded.worker is None:
            yield ch.status(manager, state.get("folder"), lang_value, devices), loaded.message, state, gr.skip()
            return
        state = {**state, "folder": loaded.folder, "has_base": loaded.side_by_side}
        yield (ch.status(manager, loaded.folder, lang_value), loaded.message, state,
               gr.update(interactive=loaded.side_by_side) if loaded.side_by_side else
               gr.update(interactive=False, value=False))

    def chat_unload(state, devices, lang_value):
        yield gr.skip(), words.text("chat.unloading", lang_value)
        message = ch.unload(manager, state.get("folder"), devices, lang_value)
        yield ch.status(manager, None, lang_value, devices), message

    def chat_status(state, devices, lang_value):  # whoever loaded it: this tab, another, the command line
        return ch.status(manager, state.get("folder"), lang_value, devices)

    def chat_side(on):
        return gr.update(visible=bool(on))

    def chat_ask(question, tuned, base, side, state, system, max_new, temperature, top_p, seed, lang_value, devices,
                 request: gr.Request):
        settings = {"max_new_tokens": int(max_new), "temperature": float(temperature), "top_p": float(top_p),
                    "seed": int(seed or 0)}
        side = bool(side) and bool(state.get("has_base"))
        for tuned_now, base_now, note in ch.ask(manager, state.get("folder"), question, tuned, base, side,
                                                system, settings, _rid(request), lang_value, devices):
            yield tuned_now, base_now, note, ""

    def chat_stop(state, devices, request: gr.Request):
        ch.stop(manager, state.get("folder"), _rid(request), devices)

    def chat_lang(value, state, devices, lang_value):  # what the page says of its own state (labels: the app's switch)
        return ch.about(value, lang_value)[1], ch.status(manager, state.get("folder"), lang_value, devices)

    ctx.tab_items["chat"].select(chat_targets, [p.target], [p.target], **io)
    ctx.tab_items["chat"].select(chat_status, [p.state, p.devices, lang], [p.status], **io)
    p.devices.change(chat_status, [p.state, p.devices, lang], [p.status], **io)
    p.refresh.click(chat_targets, [p.target], [p.target], **io)
    p.refresh.click(chat_status, [p.state, p.devices, lang], [p.status], **io)
    p.target.change(chat_pick, [p.target, lang], [p.system, p.about], **io)
    p.load.click(chat_load, [p.target, p.devices, p.idle, p.state, lang], [p.status, p.message, p.state, p.side_by_side],
                 **io)
    p.unload.click(chat_unload, [p.state, p.devices, lang], [p.status, p.message], **io)
    p.side_by_side.change(chat_side, [p.side_by_side], [p.base_chat], **io)
    ask_inputs = [p.question, p.tuned_chat, p.base_chat, p.side_by_side, p.state, p.system, p.max_new_tokens,
                  p.temperature, p.top_p, p.seed, lang, p.devices]
    ask_outputs = [p.tuned_chat, p.base_chat, p.figures, p.question]
    p.send.click(chat_ask, ask_inputs, ask_outputs, **io)
    p.question.submit(chat_ask, ask_inputs, ask_outputs, **io)
    p.stop.click(chat_stop, [p.state, p.devices], None, queue=False, **io)  # at once, beside the answer it stops
    p.clear.click(lambda: ([], [], ""), None, [p.tuned_chat, p.base_chat, p.figures], **io)
    lang.change(chat_lang, [p.target, p.state, p.devices, lang], [p.about, p.status], **io)


PAGE = pages.register(pages.Page("chat", "chat.tab", render, wire, order=30))


def _rid(request: gr.Request | None) -> str:
    """This session's answers: Stop ends them, not another session's."""
    return f"page-{getattr(request, 'session_hash', None) or 'anon'}"
