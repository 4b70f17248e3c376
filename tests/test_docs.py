"""The documentation holds together: links resolve, both languages have every page, and the
Dockerfile installs and serves ZeroBoard the way the README and the docs say.

Fast and light: text parsing only, no zeroboard import.
"""

from __future__ import annotations

import json
import re
import shlex
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
DOCS = ROOT / "docs"
IMAGES = DOCS / "images"
LANGS = ("en", "zh")
# What the screenshot tool writes into docs/images/ (make screenshots; the images are committed).
SCREENSHOTS = ("train", "stage_dropdown", "preview_offload", "running", "finished", "runs_list", "runs_compare", "queue", "chat",
               # cut for the course chapter, listed in docs/images/README.md
               "chapter_controls", "chapter_stage", "chapter_preview", "chapter_json", "chapter_procs", "chapter_output",
               "chapter_answer", "chapter_compare")
EXPECTED_IMAGES = {f"{shot}_{lang}.png" for shot in SCREENSHOTS for lang in LANGS}

FENCE = re.compile(r"^(```|~~~).*?^\1[^\n]*$", re.M | re.S)
CODE_SPAN = re.compile(r"`[^`\n]*`")
LINK = re.compile(r"(!?)\[[^\]]*\]\(\s*<?([^)\s>]+)>?(?:\s+\"[^\"]*\")?\s*\)")
SCHEME = re.compile(r"^[A-Za-z][A-Za-z0-9+.-]*:")
HEADING = re.compile(r"^#{1,6}\s+(.+?)\s*#*\s*$", re.M)


def doc_files() -> list[Path]:
    return [ROOT / "README.md", ROOT / "README.zh.md", *sorted(DOCS.rglob("*.md"))]


def rel(path: Path) -> str:
    return path.relative_to(ROOT).as_posix()


def prose(text: str) -> str:
    """Markdown without fenced code blocks and inline code, where link syntax means nothing."""
    return CODE_SPAN.sub("", FENCE.sub("", text))


def links(path: Path) -> list[tuple[bool, str]]:
    """(is_image, target) of every Markdown link in the file."""
    return [(bang == "!", target) for bang, target in LINK.findall(prose(path.read_text(encoding="utf-8")))]


def local_links(path: Path) -> list[tuple[bool, Path, str]]:
    """(is_image, resolved path, fragment) of links to files of this repository."""
    out = []
    for is_image, target in links(path):
        if SCHEME.match(target) or target.startswith("#"):
            continue
        target, _, fragment = target.partition("#")
        out.append((is_image, (path.parent / target).resolve(), fragment))
    return out


def slug(heading: str) -> str:
    """GitHub's anchor for a heading: lower case, punctuation dropped, spaces to hyphens."""
    text = re.sub(r"[`*_]|\[([^\]]*)\]\([^)]*\)", r"\1", heading).strip().lower()
    return re.sub(r"[^\w\- ]", "", text).replace(" ", "-")


def anchors(path: Path) -> set[str]:
    return {slug(h) for h in HEADING.findall(FENCE.sub("", path.read_text(encoding="utf-8")))}


def in_images(p: Path) -> bool:
    return p.parent == IMAGES.resolve()


# --- links ------------------------------------------------------------------------------------


def test_there_are_docs_in_both_languages():
    for lang in LANGS:
        assert (DOCS / lang / "index.md").is_file(), f"docs/{lang}/index.md is missing"
    assert (ROOT / "README.zh.md").is_file()


@pytest.mark.parametrize("path", doc_files(), ids=rel)
def test_relative_links_point_to_existing_files(path):
    broken = []
    for _, target, fragment in local_links(path):
        if not target.exists():  # a screenshot too: make screenshots writes them, and they are committed
            broken.append(f"{rel(path)} -> {target.relative_to(ROOT) if target.is_relative_to(ROOT) else target}")
        elif fragment and target.suffix == ".md" and fragment not in anchors(target):
            broken.append(f"{rel(path)} -> {rel(target)}#{fragment} (no such heading)")
    assert not broken, "broken links:\n" + "\n".join(broken)


def test_links_do_not_leave_the_repository():
    outside = [f"{rel(p)} -> {t}" for p in doc_files() for _, t, _ in local_links(p) if not t.is_relative_to(ROOT)]
    assert not outside, "links outside the repository:\n" + "\n".join(outside)


def test_screenshot_links_are_exactly_the_generated_set():
    referenced: dict[str, set[str]] = {}
    for path in doc_files():
        for is_image, target, _ in local_links(path):
            if in_images(target):
                referenced.setdefault(target.name, set()).add(rel(path))
            elif is_image:
                assert target.exists(), f"{rel(path)} shows an image that does not exist: {target}"
    assert set(referenced) == EXPECTED_IMAGES, (
        f"missing: {sorted(EXPECTED_IMAGES - set(referenced))}, unexpected: {sorted(set(referenced) - EXPECTED_IMAGES)}"
    )


@pytest.mark.parametrize("lang", LANGS)
def test_each_language_shows_its_own_screenshots(lang):
    for path in sorted((DOCS / lang).rglob("*.md")):
        names = {t.name for _, t, _ in local_links(path) if in_images(t)}
        wrong = sorted(n for n in names if not n.endswith(f"_{lang}.png"))
        assert not wrong, f"{rel(path)} shows screenshots of another language: {wrong}"


# --- both languages -----------------------------------------------------------------------------


def pages(lang: str) -> set[str]:
    return {p.relative_to(DOCS / lang).as_posix() for p in (DOCS / lang).rglob("*.md")}


def test_every_english_page_has_a_chinese_counterpart():
    assert pages("en") - pages("zh") == set(), "pages without a Chinese version"
    assert pages("zh") - pages("en") == set(), "Chinese pages without an English version"


@pytest.mark.parametrize("lang", LANGS)
def test_index_links_every_page(lang):
    index = DOCS / lang / "index.md"
    linked = {t.relative_to(DOCS / lang).as_posix() for _, t, _ in local_links(index) if t.is_relative_to(DOCS / lang)}
    assert pages(lang) - {"index.md"} <= linked, f"docs/{lang}/index.md does not link {sorted(pages(lang) - linked - {'index.md'})}"


def test_chinese_readme_links_the_chinese_docs():
    targets = {t for _, t, _ in local_links(ROOT / "README.zh.md")}
    assert any(t.is_relative_to(DOCS / "zh") for t in targets), "README.zh.md links no page of docs/zh/"
    assert (ROOT / "README.md").resolve() in targets, "README.zh.md does not link back to README.md"


# --- the README's set-up, the Makefile and the Dockerfile agree --------------------------------------


def logical_lines(text: str) -> list[str]:
    """Lines with backslash continuations joined and comments dropped (Dockerfile / Makefile syntax)."""
    out, current = [], ""
    for line in text.splitlines():
        if not current and line.lstrip().startswith("#"):
            continue
        if line.rstrip().endswith("\\"):
            current += line.rstrip()[:-1] + " "
            continue
        out.append(current + line)
        current = ""
    return out


def dockerfile() -> list[tuple[str, str]]:
    """(INSTRUCTION, arguments) of every Dockerfile instruction."""
    out = []
    for line in logical_lines((ROOT / "Dockerfile").read_text(encoding="utf-8")):
        if line.strip():
            word, _, args = line.strip().partition(" ")
            out.append((word.upper(), args.strip()))
    return out


def makefile() -> tuple[dict[str, list[str]], dict[str, list[str]], set[str]]:
    """(target -> prerequisites, target -> recipe lines, variable names) of the Makefile."""
    deps: dict[str, list[str]] = {}
    recipes: dict[str, list[str]] = {}
    variables: set[str] = set()
    current = None
    for line in logical_lines((ROOT / "Makefile").read_text(encoding="utf-8")):
        if line.startswith("\t") and current:
            recipes[current].append(line.strip())
            continue
        if m := re.match(r"^([A-Za-z_][A-Za-z0-9_]*)\s*(?:\?|:|\+)?=", line):
            variables.add(m.group(1))
            current = None
        elif m := re.match(r"^([^\s:#=][^:=]*?)\s*:(?!=)\s*(.*)$", line):
            for target in m.group(1).split():
                deps[target] = m.group(2).split()
                recipes[target] = []
            current = m.group(1).split()[-1]
    return deps, recipes, variables


def make_install_args() -> list[str]:
    runs = [shlex.split(args) for word, args in dockerfile() if word == "RUN"]
    installs = [argv for argv in runs if argv[:2] == ["make", "install"]]
    assert len(installs) == 1, "the Dockerfile should install ZeroBoard with exactly one `RUN make install ...`"
    return installs[0][2:]


def cmd_argv() -> list[str]:
    cmds = [args for word, args in dockerfile() if word == "CMD"]
    assert len(cmds) == 1, "the Dockerfile should have one CMD"
    argv = json.loads(cmds[0]) if cmds[0].startswith("[") else shlex.split(cmds[0])
    return shlex.split(argv[-1]) if argv[:2] == ["sh", "-c"] else argv


def served_port() -> int:
    argv = cmd_argv()
    return int(argv[argv.index("--port") + 1]) if "--port" in argv else 7860


def test_readmes_name_the_two_setup_commands():
    for name in ("README.md", "README.zh.md"):
        blocks = "\n".join(m.group(0) for m in FENCE.finditer((ROOT / name).read_text(encoding="utf-8")))
        for command in ("make run", "make test"):
            assert re.search(rf"^{command}\b", blocks, re.M), f"{name} does not show `{command}` in a code block"


def test_makefile_run_installs_then_serves():
    deps, recipes, _ = makefile()
    assert "install" in deps and "run" in deps and "test" in deps
    assert "install" in deps["run"], "`make run` should depend on `make install` (the Dockerfile runs that)"
    assert any("zeroboard webui" in line for line in recipes["run"])
    assert any("pip install" in line and "-e ." in line for line in recipes["install"]), "install should pip-install ZeroBoard"


def test_dockerfile_installs_like_the_readme():
    args = make_install_args()
    _, _, variables = makefile()
    assert all("=" in a for a in args), f"make install takes VAR=value overrides only: {args}"
    settings = dict(a.split("=", 1) for a in args)
    unknown = set(settings) - variables
    assert not unknown, f"the Dockerfile sets Makefile variables that do not exist: {sorted(unknown)}"
    venv = settings.get("VENV", ".venv")
    paths = [args for word, args in dockerfile() if word == "ENV" and args.startswith("PATH=")]
    assert any(f"{venv}/bin" in p for p in paths), f"the image's PATH should include {venv}/bin, where make install puts zeroboard"


def test_dockerfile_serves_the_web_ui_on_the_exposed_port():
    argv = cmd_argv()
    text = " ".join(argv)
    assert "zeroboard webui --host 0.0.0.0" in text, f"CMD should start `zeroboard webui --host 0.0.0.0`: {text}"
    exposed = [int(p.split("/")[0]) for word, args in dockerfile() if word == "EXPOSE" for p in args.split()]
    assert exposed == [served_port()], f"EXPOSE {exposed} does not match the port the web UI serves on ({served_port()})"


def test_documented_docker_run_matches_the_dockerfile():
    port = served_port()
    volumes = [v for word, args in dockerfile() if word == "VOLUME" for v in args.split()]
    lines = {
        lang: [ln for ln in (DOCS / lang / "quickstart.md").read_text(encoding="utf-8").splitlines() if ln.startswith("docker run ")]
        for lang in LANGS
    }
    assert lines["en"] and lines["en"] == lines["zh"], "each quickstart.md should show the same `docker run` lines"
    for line in lines["en"]:
        argv = shlex.split(line)
        assert "--gpus" in argv and argv[argv.index("--gpus") + 1] == "all"
        published = argv[argv.index("-p") + 1]
        assert published.rsplit(":", 1)[1] == str(port), f"{line}: -p should publish the container port {port}"
        assert any(a.startswith("ZEROBOARD_PASSWORD=") for a in argv), f"{line}: the web UI needs ZEROBOARD_PASSWORD"
        mount = argv[argv.index("-v") + 1]
        assert mount.split(":")[1] in volumes, f"{line}: -v should mount the image's VOLUME {volumes}"
        assert argv[-1] == "zeroboard"


def test_screenshots_need_only_a_browser_and_say_so_without_one(tmp_path):
    """`make screenshots` installs what a browser needs (not the tests' Slurm and podman); without Chromium the tool
    says how to get one, before it starts anything."""
    deps, _, _ = makefile()
    assert deps["screenshots"] == ["install", "chromium"], deps["screenshots"]
    import subprocess
    import sys

    done = subprocess.run([sys.executable, "tools/screenshots.py", "--out", str(tmp_path / "shots"), "--chromium",
                           str(tmp_path / "no-chromium")], cwd=ROOT, capture_output=True, text=True, timeout=120)
    assert done.returncode == 2 and f"No Chromium at {tmp_path / 'no-chromium'}" in done.stderr, done.stderr
    assert "make chromium" in done.stderr and not (tmp_path / "shots").exists()
