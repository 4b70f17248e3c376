"""The page in the reader's language from its first paint, through gradio's own i18n.

The app is laid out once, in the server's language; the reader's (``?lang=``, their earlier choice,
``$ZEROBOARD_LANG``, the browser's) is known to the server only when the page's load event comes back, seconds
later on a busy machine.  So every word the language switch says (each view's ``texts``: labels keyed by spec
field, page words keyed by catalog entry, the tabs, the title) is handed to gradio as a translation in both
languages (``gr.I18n``), the block carrying its key; and a script in the page's head picks the language by the same
rule the server uses and tells gradio before anything is drawn.  Gradio's own words (its buttons' labels, its
"Loading...") follow the same locale.

Gradio translates a block's ``label``, ``info``, ``value`` (a button's, a Markdown's) and the labels of its
``choices``; other properties (a table's headers, a chart's legend title, a placeholder) are said by the load
event, as before.
"""

from __future__ import annotations

import json
import re
from collections.abc import Callable

import gradio as gr
from gradio.i18n import I18nData

from .. import words
from ..words import gradio as gradio_words

LOCALES = {"en": "en", "zh": "zh-CN"}  # the page's languages as gradio names its locales
STORED = "zeroboard-lang-shown"  # the reader's choice, kept in the browser for the head script (see app.LANG_KEY)
TRANSLATED = ("label", "info", "value")  # the properties gradio translates (a chart draws its titles itself)

# Runs before gradio draws the app (it adds the head's scripts, then mounts): the language by words.pick_lang's
# rule -- ?lang=, the reader's stored choice, $ZEROBOARD_LANG, the browser's -- then gradio's locale, set through
# the function its own settings panel calls (changeLocale, exported by its core module, loaded by then).
HEAD = """<script>
(() => {
  const locales = LOCALES, env = ENV, code = v => (v || '').trim().toLowerCase().replace('_', '-').split('-')[0];
  const asked = new URLSearchParams(location.search).get('lang');
  let lang = [asked, localStorage.getItem(STORED), env].find(v => v && code(v) in locales && v.trim().toLowerCase()
    .split('-')[0] === code(v));
  if (asked && lang === asked) localStorage.setItem(STORED, code(asked));
  lang = lang ? code(lang) : ((navigator.languages || []).map(code).find(c => c in locales) || 'en');
  document.documentElement.lang = locales[lang];
  const core = performance.getEntriesByType('resource').map(e => e.name).find(n => /\\/assets\\/core-[\\w-]+\\.js$/.test(n));
  if (core) import(core).then(m => m.changeLocale(locales[lang])).catch(e => console.warn('ZeroBoard: locale', e));
})();
</script>"""


# Gradio's own words outside its i18n (a screen reader's labels, tooltips, Vega's descriptions of a chart's axes):
# said in the page's language wherever gradio writes them, the English kept beside to say again after a switch.
SAY_ATTRS = """<script>
(() => {
  const fixed = FIXED, patterns = PATTERNS.map(([re, zh]) => [new RegExp(re), zh]);
  const said = v => {
    if (v in fixed) return fixed[v];
    for (const [re, zh] of patterns) {
      const m = v.match(re);
      if (m) return zh.replace(/\\{(\\w+)\\}/g, (_, k) => fixed[m.groups[k]] ?? m.groups[k]);
    }
    return null;
  };
  const keys = {'aria-label': 'zbAria', 'title': 'zbTitle'};
  const apply = el => {
    const zh = document.documentElement.lang.startsWith('zh');
    for (const [attr, key] of Object.entries(keys)) {
      const now = el.getAttribute(attr);
      if (now === null) continue;
      let en = el.dataset[key];
      if (en === undefined || (now !== en && now !== said(en))) {  // new, or written again by gradio
        if (said(now) === null) continue;
        en = el.dataset[key] = now;
      }
      const want = zh ? said(en) : en;
      if (now !== want) el.setAttribute(attr, want);
    }
  };
  const all = root => {
    if (root.nodeType !== 1) return;
    apply(root);
    root.querySelectorAll('[aria-label], [title]').forEach(apply);
  };
  new MutationObserver(changes => {
    for (const c of changes) {
      if (c.type === 'childList') c.addedNodes.forEach(all);
      else if (c.target === document.documentElement) all(document.body);
      else apply(c.target);
    }
  }).observe(document.documentElement, {subtree: true, childList: true, attributes: true,
                                         attributeFilter: ['aria-label', 'title', 'lang']});
})();
</script>"""


def _gradio_words() -> tuple[dict[str, str], list[list[str]]]:
    """Gradio's and Vega's fixed English (words.gradio): the plain ones, and the ones with parts that vary as
    (a regular expression with a named group per part, the Chinese with the same names)."""
    fixed, patterns = {}, []
    for en, zh in gradio_words.WORDS.values():
        if "{" not in en:
            fixed[en] = zh
            continue
        regex = re.escape(en)
        for name in words.placeholders(en):
            regex = regex.replace(re.escape("{" + name + "}"), f"(?<{name}>.+?)", 1)
        patterns.append(["^" + regex + "$", zh])
    return fixed, patterns


def head(env_lang: str | None) -> str:
    """The scripts for the page's head, with the server's ``$ZEROBOARD_LANG``."""
    fixed, patterns = _gradio_words()
    return (HEAD.replace("LOCALES", json.dumps(LOCALES)).replace("STORED", json.dumps(STORED))
            .replace("ENV", json.dumps(env_lang or ""))
            + SAY_ATTRS.replace("FIXED", json.dumps(fixed, ensure_ascii=False))
            .replace("PATTERNS", json.dumps(patterns, ensure_ascii=False)))


# the choice made on the page, kept where the head script reads it at the next visit (the language radio's input)
REMEMBER_JS = f"(lang) => {{ localStorage.setItem({json.dumps(STORED)}, lang); return lang; }}"


def translate(outputs: list, said: Callable[[str], list]) -> gr.I18n:
    """Give each of ``outputs`` its words in both languages: ``said(lang)`` returns their updates in ``lang`` (what
    the language switch sends).  A property that differs between the languages becomes a gradio i18n key
    (``zb-learning_rate.label``) on its block; returns the translations for ``launch(i18n=...)``."""
    table: dict[str, dict[str, str]] = {locale: {} for locale in LOCALES.values()}
    updates = {lang: said(lang) for lang in LOCALES}
    for i, block in enumerate(outputs):
        name = block.elem_id or f"zb{block._id}"
        for prop in TRANSLATED + ("choices",):
            values = {lang: updates[lang][i].get(prop) for lang in LOCALES}
            if prop == "choices" and all(isinstance(v, list) for v in values.values()):
                block.choices = [(_key(table, f"{name}.choice{j}", [c[0] for c in pair]), pair[0][1])
                                 for j, pair in enumerate(zip(*values.values()))]
            elif prop in TRANSLATED and all(isinstance(v, str) for v in values.values()) and len(set(values.values())) > 1:
                setattr(block, prop, _key(table, f"{name}.{prop}", list(values.values())))
    return gr.I18n(**table)


def _key(table: dict[str, dict[str, str]], key: str, texts: list[str]) -> I18nData:
    for locale, text in zip(LOCALES.values(), texts):
        table[locale][key] = text
    return I18nData(key)
