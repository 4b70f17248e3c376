"""Driving the page for tools/screenshots.py: a tab per language, each shot cropped to its part of the page, and
an image written only when it differs from the one already there by more than live figures do."""

from __future__ import annotations

import io
import time
from dataclasses import dataclass, field
from pathlib import Path

from helpers import wait_until
from zeroboard import words

CHAPTER = ("chapter_controls", "chapter_stage", "chapter_preview", "chapter_json", "chapter_procs", "chapter_output",
           "chapter_answer", "chapter_compare")
TOLERANCE = 0.03  # an image is rewritten only when more than this share of its pixels changed ...
# shots of a run in progress (see tolerance()), and of the queue (how long the job has waited) and the chat (its
# worker's pid, load time and memory, the answer's speed)
LIVE_TOLERANCE = {"running": 0.25, "chapter_procs": 0.10, "queue": 0.10, "chat": 0.10}
PIXEL_DELTA = 40  # ... by more than this (0-255, any channel): live figures redrawn, not the page's layout
UI_MS = 60_000  # page elements; generous: a busy 2-core machine answers slowly
FRAMES = "() => new Promise(r => requestAnimationFrame(() => requestAnimationFrame(() => setTimeout(r, 100))))"
PAD = 12  # px of page around each cropped region
SIZE_JITTER = 2  # px: an image this much taller or wider is the same image (difference())
GAP = 16  # px between the pieces of a stacked shot

# Each shot: groups of elements; a group is cropped to the box around its elements (those present and visible),
# and the groups, top to bottom, are stacked into one image.  Groups that overlap are merged.
REGIONS: dict[str, list[list[str]]] = {
    "train": [["#zb-title", "#zb-lang", "#zb-message"]],  # the message is empty at rest: it marks the end
    "stage_dropdown": [["#zb-device_count", "#zb-offload", "#zb-deepspeed_stage ul[role=listbox]"]],
    "preview_offload": [["#zb-preview", "#zb-device_count", "#zb-message", "#zb-command", "#zb-ds-json"], ["#zb-plan"]],
    "running": [["#zb-strip"], ["#zb-run", "#zb-loss", "#zb-log", "#zb-host", "#zb-procs", "#zb-history", "#zb-mem-vs-plan"]],
    "finished": [["#zb-strip"], ["#zb-final"], ["#zb-output-check"]],
    "runs_list": [["#zb-runs-filter", "#zb-runs-refresh", "#zb-runs-table", "#zb-runs-count"]],
    "runs_compare": [["#zb-runs-charts"], ["#zb-runs-course"], ["#zb-runs-diff"]],
    "queue": [["#zb-queue-intro", "#zb-queue-refresh", "#zb-queue-table", "#zb-queue-count"]],
    "chat": [["#zb-chat-target", "#zb-chat-unload", "#zb-chat-status", "#zb-chat-about", "#zb-chat-tuned",
              "#zb-chat-send", "#zb-chat-figures"]],
    "chapter_controls": [["#zb-device_count", "#zb-num_processes", "#zb-deepspeed_stage", "#zb-offload"]],
    "chapter_stage": [["#zb-deepspeed_stage", "#zb-deepspeed_stage ul[role=listbox]"]],
    "chapter_preview": [["#zb-preview"], ["#zb-command"]],
    "chapter_json": [["#zb-ds-json"]],
    "chapter_procs": [["#zb-procs"]],
    "chapter_output": [["#zb-status"], ["#zb-saved"]],
    "chapter_answer": [["#zb-prompts", "#zb-reload-btn", "#zb-answers"]],
    "chapter_compare": [["#zb-runs-course"]],
}
# the run's status strip stays in sight while a reader scrolls; in a picture it stays where it is
STATIC_STRIP = "#zb-strip { position: static !important; }"
# an event in progress: gradio's status tracker shows its timer ("1.0s") over the component
BUSY = """() => [...document.querySelectorAll('[data-testid=status-tracker]')]
  .some(e => e.offsetParent !== null && /\\d\\.\\ds/.test(e.innerText))"""
# the text inside a chapter image's elements: what they say, the values of their fields, a ticked box as [x]
SHOWN_TEXT = """(sels) => sels.flatMap(s => [...document.querySelectorAll(s)]).map(e => {
  const values = [...e.querySelectorAll('input, textarea')].map(i =>
    i.type === 'checkbox' ? (i.checked ? '[x]' : '[ ]') : i.value);
  return [e.innerText, ...values].join('\\n');
}).join('\\n')"""


@dataclass
class Written:
    """What the tool did with each image: written (new or changed beyond the tolerance) or kept as it was."""

    written: list[Path] = field(default_factory=list)
    kept: list[tuple[Path, float]] = field(default_factory=list)  # (image, share of its pixels that changed)
    why: dict[Path, str] = field(default_factory=dict)  # image written -> why: new, another size, share changed
    browser: str = ""  # the version of the Chromium that drew them
    compared: dict[str, dict] = field(default_factory=dict)  # language -> the comparison its Runs tab showed


class Tab:
    """One browser tab on the page, in one language."""

    def __init__(self, context, url: str, lang: str, done: Written):
        self.pg = context.new_page()
        self.pg.set_default_timeout(UI_MS)
        self.url, self.lang, self.done = url, lang, done
        self.texts: dict[str, str] = {}  # chapter image -> the text it shows (for images written)

    def open(self) -> None:
        self.pg.goto(f"{self.url}?lang={self.lang}")  # the address wins over the choice another tab stored
        self.pg.add_style_tag(content=STATIC_STRIP)
        self.pg.wait_for_selector("body[data-zb-loaded='1']", state="attached")
        self.pg.wait_for_selector(f"#zb-preview:text-is('{words.label('preview', self.lang)}')")
        self.wait_status(lambda s: True)  # the first tick has rendered the status

    def follow(self, run_dir: str, name: str) -> None:
        """Show ``run_dir`` (``name`` on the page) in this tab, as a reader picks it in the Run box (no reload)."""
        box = self.pg.locator("#zb-run input")
        box.fill(run_dir)
        box.press("Enter")
        wait_until(lambda: name in self.pg.locator("#zb-status").inner_text(), 60, f"{name} in the {self.lang} tab")

    def fill(self, name: str, value) -> None:
        box = self.pg.locator(f"#zb-{name} input, #zb-{name} textarea").first
        box.fill(str(value))
        box.blur()  # no focus ring in the shots

    def open_dropdown(self, name: str) -> None:
        # near the top of the window, so the list opens downwards, under the field, not over its label
        self.pg.locator(f"#zb-{name}").evaluate("e => window.scrollTo(0, e.getBoundingClientRect().top + scrollY - 40)")
        self.pg.locator(f"#zb-{name} input").click()
        self.pg.locator(f"#zb-{name} ul[role=listbox] li").first.wait_for()

    def pick(self, name: str, option: str) -> None:
        """Click ``option`` in the open dropdown ``name``."""
        self.pg.locator(f"#zb-{name} ul[role=listbox]").get_by_role("option", name=option, exact=True).click()
        self.pg.locator(f"#zb-{name} ul[role=listbox]").wait_for(state="detached")

    def status(self) -> str:
        el = self.pg.locator("#zb-status .zb-status")
        return (el.get_attribute("data-status") or "idle") if el.count() else ""

    def wait_status(self, ok, timeout: float = 60) -> str:
        return wait_until(lambda: (s := self.status()) and ok(s) and s, timeout, "the run status on the page")

    def step(self) -> int:
        bar = self.pg.locator("#zb-progress .zb-progress")
        return int(bar.get_attribute("data-step") or 0) if bar.count() else 0

    def has(self, selector: str) -> bool:
        return self.pg.locator(selector).count() > 0

    def settle(self, timeout_s: float = 20) -> None:
        """Wait until no event of the page shows its timer (a check after an edit): the shot shows the result."""
        deadline = time.time() + timeout_s
        while time.time() < deadline and self.pg.evaluate(BUSY):
            time.sleep(0.1)

    def shoot(self, out: Path, name: str) -> Path:
        path = out / f"{name}_{self.lang}.png"
        self.settle()
        shown = None
        if name in CHAPTER:
            shown = "\n".join(self.pg.evaluate(SHOWN_TEXT, group) for group in REGIONS[name])
        for _ in range(3):  # a live panel that grew while we shot moves the boxes: shoot again
            boxes = self.boxes(name)
            pieces = [self.piece(b) for b in boxes]
            if boxes == self.boxes(name):
                break
        changed, why = save_png(pieces, path, tolerance(name))
        if why:
            self.done.written.append(path)
            self.done.why[path] = why
            if shown is not None:  # the text of an image kept stays the one that image shows
                self.texts[path.name] = "\n".join(words_shown(shown.splitlines()))
        else:
            self.done.kept.append((path, changed))
        return path

    def piece(self, b: dict) -> bytes:
        """One box, brought into view first: a code editor draws only the lines in view (its text and line numbers
        would stop at the window's edge), so a box below the fold or taller than the window is shot in view."""
        size = self.pg.viewport_size
        y, bottom = self.pg.evaluate("[scrollY, scrollY + innerHeight]")
        tall = b["height"] > size["height"]
        if tall:
            self.pg.set_viewport_size({"width": size["width"], "height": b["height"]})
        if tall or b["y"] < y or b["y"] + b["height"] > bottom:
            self.pg.evaluate("(y) => window.scrollTo(0, y)", b["y"])
            self.pg.evaluate(FRAMES)
        try:
            return self.pg.screenshot(clip=b, full_page=True, animations="disabled")
        finally:
            if tall:
                self.pg.set_viewport_size(size)

    def boxes(self, name: str) -> list[dict]:
        found = [b for group in REGIONS[name] if (b := self.box(group))]
        if not found:
            raise RuntimeError(f"nothing to shoot for {name}: none of its elements is on the page")
        return merge(found)

    def box(self, selectors: list[str]) -> dict | None:
        """The page-coordinate box around the visible elements of ``selectors``, with PAD around it."""
        found = self.pg.evaluate("""(sels) => sels.flatMap(s => [...document.querySelectorAll(s)]).map(e => {
            const r = e.getBoundingClientRect();
            // a code editor ends where its longest line ends, not at the page's edge
            const lines = [...e.querySelectorAll('.cm-line')].map(l => {
              const g = document.createRange(); g.selectNodeContents(l); return g.getBoundingClientRect().right; });
            const right = lines.length ? Math.min(r.right, Math.max(...lines) + 2 * PAD) : r.right;
            return [r.left + scrollX, r.top + scrollY, right + scrollX, r.bottom + scrollY];
          }).filter(r => r[2] > r[0])  // an empty element still marks an edge; a hidden one does not""".replace(
            "PAD", str(PAD)), selectors)
        if not found:
            return None
        width = self.pg.evaluate("document.documentElement.scrollWidth")
        x0, y0 = max(0, min(r[0] for r in found) - PAD), max(0, min(r[1] for r in found) - PAD)
        x1, y1 = min(width, max(r[2] for r in found) + PAD), max(r[3] for r in found) + PAD
        return {"x": round(x0), "y": round(y0), "width": round(x1 - x0), "height": round(y1 - y0)}


def words_shown(lines: list[str]) -> list[str]:
    """The lines a reader sees as text: not a code editor's fold marks and line numbers (1, 2, 3, ...), not the
    empty cells of a table."""
    lines = [line.strip() for line in lines if line.strip() and line.strip() != "⌄"]
    out, i = [], 0
    while i < len(lines):
        n = 0
        while i + n < len(lines) and lines[i + n] == str(n + 1):
            n += 1
        if n >= 3:  # a gutter of line numbers
            i += n
            continue
        out.append(lines[i])
        i += 1
    return out


def merge(boxes: list[dict]) -> list[dict]:
    """Top to bottom; boxes that overlap vertically become one."""
    out: list[dict] = []
    for b in sorted(boxes, key=lambda b: b["y"]):
        if out and b["y"] <= out[-1]["y"] + out[-1]["height"]:
            a = out[-1]
            x0, y0 = min(a["x"], b["x"]), a["y"]
            x1, y1 = max(a["x"] + a["width"], b["x"] + b["width"]), max(a["y"] + a["height"], b["y"] + b["height"])
            out[-1] = {"x": x0, "y": y0, "width": x1 - x0, "height": y1 - y0}
        else:
            out.append(b)
    return out


def tolerance(name: str) -> float:
    """The share of an image's pixels that may change before it is rewritten: ``TOLERANCE``, or more for a shot of
    a run in progress, which is mostly live figures (its charts end at the step reached, the tokens/s and memory
    curves and the log's times are the moment's; the process table's pids and memory): there only a change of
    layout rewrites it (measured: the process table's Chinese crop differed by 3.09% between two runs)."""
    return LIVE_TOLERANCE.get(name, TOLERANCE)


def save_png(pieces: list[bytes], path: Path, allowed: float = TOLERANCE) -> tuple[float | None, str]:
    """Stack the pieces on white into a 256-colour PNG (a third of the size, and text stays sharp); write it unless
    the image already there is the same but for live figures (at most ``allowed`` of its pixels changed).
    Returns (the share of pixels that changed, or None where there is nothing to compare with; why it was written,
    or "" when it was kept). Pillow comes with gradio."""
    from PIL import Image

    images = [Image.open(io.BytesIO(p)).convert("RGB") for p in pieces]
    width = max(i.width for i in images)
    sheet = Image.new("RGB", (width, sum(i.height for i in images) + GAP * (len(images) - 1)), "white")
    y = 0
    for im in images:
        sheet.paste(im, (0, y))
        y += im.height + GAP
    image = sheet.quantize(colors=256, method=Image.Quantize.MEDIANCUT, dither=Image.Dither.NONE)
    changed = difference(path, image.convert("RGB"))
    if changed is not None and changed <= allowed:
        return changed, ""
    if changed is not None:
        why = f"{100 * changed:.2f}% of its pixels differ, more than {100 * allowed:.0f}%"
    elif path.is_file():
        with Image.open(path) as old:
            why = f"another size: {old.width}x{old.height} before"
    else:
        why = "new"
    path.parent.mkdir(parents=True, exist_ok=True)
    image.save(path, optimize=True)
    return changed, why


def difference(path: Path, image) -> float | None:
    """The share of pixels of ``image`` that differ from the PNG at ``path`` (None: no such file, or a size more than
    ``SIZE_JITTER`` px away).  A box whose edge falls between two pixels is rounded to either (the finished run's
    shot was 1,159 px high in one run, 1,160 in the next): the pixels of the common part are compared, and every
    pixel outside it counts as changed."""
    from PIL import Image, ImageChops

    if not path.is_file():
        return None
    with Image.open(path) as old:
        if max(abs(old.width - image.width), abs(old.height - image.height)) > SIZE_JITTER:
            return None
        box = (0, 0, min(old.width, image.width), min(old.height, image.height))
        diff = ImageChops.difference(old.convert("RGB").crop(box), image.crop(box))
    per_pixel = ImageChops.lighter(ImageChops.lighter(*diff.split()[:2]), diff.split()[2])  # the largest channel
    changed = sum(per_pixel.histogram()[PIXEL_DELTA + 1:]) + image.width * image.height - box[2] * box[3]
    return changed / (image.width * image.height)
