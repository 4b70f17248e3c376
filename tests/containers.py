"""ZeroBoard's image built and run without a Docker daemon, for the container test: Debian's podman (buildah inside,
chroot isolation) and runc, on a stand-in for the Dockerfile's CUDA base.

The stand-in base is Debian minbase from debootstrap with Python, plus the CPU build of the PyTorch that ``make run``
pins (pip finds that wheel locally; the CUDA build would be gigabytes). It is built once per machine and kept in
podman's image store under a tag that hashes what it holds; the files it is made from lie in CACHE. Nothing of it
is written into the checkout.  The project's image is kept the same way: under a tag that hashes the base, the
Dockerfile, the build flags and every file of the build context (what .dockerignore lets through), with its build
log beside the cache; a checkout whose context changed builds anew (``ZEROBOARD_CONTAINER_REBUILD=1`` builds anew in
any case: the benchmark measures the build), its DeepSpeed ops from the machine's compiler cache (the Dockerfile's).

What this machine needs, for these commands only (never baked into the image):
- the containers' default ulimits exceed the host's hard limits, and crun cannot run with its cgroups: a
  containers.conf without default ulimits and with runc as the runtime (CONTAINERS_CONF);
- a container's network is slirp4netns (user-space, port forwarding included) rather than podman's bridge: the
  bridge and each container's veth pair change the host's interfaces, and Chromium then drops its pages' requests
  in flight (net::ERR_NETWORK_CHANGED, loopback included) -- the browser tests beside this one lost their page
  loads and clicks to it (same containers.conf);
- the package registries are reached through a TLS proxy whose CA is in the host's bundle: the build steps borrow
  the bundle and a pip.conf naming it, as build volumes.
"""

from __future__ import annotations

import contextlib
import hashlib
import os
import re
import shlex
import shutil
import subprocess
import sys
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
CACHE = Path(os.environ.get("ZEROBOARD_CI_CACHE", "/var/cache/zeroboard-ci"))
STANDIN = REPO / "tests" / "standin.Containerfile"
TOOLS = ("podman", "buildah", "runc", "debootstrap", "slirp4netns")  # `make container-tools` installs them
DEBIAN_PACKAGES = ("python3", "python3-dev", "python3-venv", "python3-pip")
HOST_CA = "/etc/ssl/certs/ca-certificates.crt"
CONTAINERS_CONF = ('[containers]\ndefault_ulimits = []\nnetns = "slirp4netns"\n\n'
                   '[engine]\nruntime = "runc"\nnetwork_cmd_options = ["port_handler=slirp4netns"]\n')


def missing_tools() -> list[str]:
    return [t for t in TOOLS if shutil.which(t) is None]


def _conf(name: str, text: str) -> Path:
    CACHE.mkdir(parents=True, exist_ok=True)
    path = CACHE / name
    if not path.is_file() or path.read_text() != text:
        path.write_text(text)
    return path


def env() -> dict[str, str]:
    return {**os.environ, "CONTAINERS_CONF": str(_conf("containers.conf", CONTAINERS_CONF))}


def run(argv: list[str], timeout: float, log: Path | None = None, check: bool = True, **kw) -> subprocess.CompletedProcess:
    """A command with this machine's container settings; its output appended to ``log``, else captured."""
    with open(log, "a") if log else contextlib.nullcontext() as out:
        if out:
            out.write(f"$ {shlex.join(argv)}\n")
            out.flush()
        done = subprocess.run(argv, env=env(), text=True, timeout=timeout, stdout=out or subprocess.PIPE,
                              stderr=subprocess.STDOUT if out else subprocess.PIPE, **kw)
    if check and done.returncode:
        said = log.read_text(errors="replace") if log else f"{done.stdout}\n{done.stderr}"
        raise RuntimeError(f"{shlex.join(argv[:3])} failed ({done.returncode}):\n{said[-4000:]}")
    return done


def podman(*args: str, timeout: float = 120, check: bool = True) -> subprocess.CompletedProcess:
    return run(["podman", *args], timeout, check=check)


def buildah(*args: str, check: bool = True) -> subprocess.CompletedProcess:
    return run(["buildah", *args], 300, check=check)


def has_image(tag: str) -> bool:
    return podman("image", "exists", tag, check=False).returncode == 0


def key(*parts: str) -> str:
    return hashlib.sha256("\n".join(parts).encode()).hexdigest()[:12]


# --- the stand-in base ---------------------------------------------------------------------------------------------

def debian_suite() -> str:
    fields = dict(line.split("=", 1) for line in Path("/etc/os-release").read_text().splitlines() if "=" in line)
    return fields.get("VERSION_CODENAME", "bookworm").strip('"') if fields.get("ID") == "debian" else "bookworm"


def debian_mirror(suite: str) -> str:
    """The Debian mirror apt already uses for ``suite`` (its deb822 or one-line sources), else deb.debian.org."""
    sources = [Path("/etc/apt/sources.list"), *sorted(Path("/etc/apt/sources.list.d").glob("*"))]
    for text in (p.read_text(errors="replace") for p in sources if p.is_file()):
        for stanza in re.split(r"\n\s*\n", text):
            uris = re.search(r"^URIs:\s*(\S+)", stanza, re.M)
            suites = re.search(r"^Suites:\s*(.+)$", stanza, re.M)
            if uris and suites and suite in suites.group(1).split():
                return uris.group(1)
        if m := re.search(rf"^deb\s+(?:\[[^\]]*\]\s+)?(\S+)\s+{suite}\s", text, re.M):
            return m.group(1)
    return "http://deb.debian.org/debian"


def debian_image(log: Path) -> str:
    """Debian minbase with Python, from debootstrap, imported into podman's store (once per suite and packages)."""
    suite = debian_suite()
    tag = f"localhost/zeroboard-debian:{suite}-{key(*DEBIAN_PACKAGES)}"
    if has_image(tag):
        return tag
    rootfs = CACHE / "rootfs"
    shutil.rmtree(rootfs, ignore_errors=True)
    run(["debootstrap", "--variant=minbase", f"--include={','.join(DEBIAN_PACKAGES)}", suite, str(rootfs),
         debian_mirror(suite)], 1200, log)
    tar = subprocess.Popen(["tar", "-C", str(rootfs), "-c", "."], stdout=subprocess.PIPE)
    run(["podman", "import", "-", tag], 600, log, stdin=tar.stdout)
    tar.wait()
    shutil.rmtree(rootfs)
    return tag


def torch_pin() -> str:
    """The PyTorch that ``make run`` installs (the Makefile's TORCH)."""
    return re.search(r"^TORCH\s*\?=\s*(\S+)", (REPO / "Makefile").read_text(), re.M).group(1)


def torch_wheels(log: Path) -> Path:
    """The CPU build of the pinned PyTorch and its dependencies as wheels, where the host's pip finds them."""
    folder = CACHE / "wheels" / torch_pin().replace("==", "-")
    folder.mkdir(parents=True, exist_ok=True)
    pip = [sys.executable, "-m", "pip", "download", "--quiet", "--disable-pip-version-check", "-d", str(folder)]
    run([*pip, "--no-deps", torch_pin()], 1200, log)
    wheel = next(folder.glob("torch-*.whl"))
    if "+cpu" not in wheel.name:  # the CUDA build and its libraries would be gigabytes
        raise RuntimeError(f"pip found {wheel.name}, not a CPU build of {torch_pin()}: give pip a find-links or "
                           "index with it (PIP_FIND_LINKS, or PIP_EXTRA_INDEX_URL=https://download.pytorch.org/whl/cpu)")
    run([*pip, str(wheel)], 1200, log)
    return folder


def standin_base(log: Path) -> tuple[str, bool]:
    """The stand-in base image's tag, and whether it was built now (else the store held one made of the same parts)."""
    debian = debian_image(log)
    wheels = torch_wheels(log)
    names = sorted(p.name for p in wheels.glob("*.whl"))
    tag = f"localhost/zeroboard-standin:{key(debian, STANDIN.read_text(), *names)}"
    built = not has_image(tag)
    if built:
        empty = CACHE / "standin-context"
        empty.mkdir(exist_ok=True)
        run(["podman", "build", "--isolation", "chroot", "--layers=false", "-v", f"{wheels}:/wheels:ro",
             "--build-arg", f"DEBIAN_IMAGE={debian}", "-t", tag, "-f", str(STANDIN), str(empty)], 1200, log)
    return tag, built


# --- the project's image -------------------------------------------------------------------------------------------

REBUILD_ENV = "ZEROBOARD_CONTAINER_REBUILD"
IMAGE_REPO = "localhost/zeroboard-test"


def context_files() -> list[Path]:
    """The files a build of this checkout sends, as .dockerignore says (``*``, then ``!name`` for each top-level entry
    let through, and the ``**/`` patterns left out), in name order."""
    rules = [ln.strip() for ln in (REPO / ".dockerignore").read_text().splitlines() if ln.strip() and not ln.startswith("#")]
    kept = [REPO / r[1:] for r in rules if r.startswith("!")]
    dropped = [r[3:] for r in rules if r.startswith("**/")]
    out = []
    for top in kept:
        for p in ([top] if top.is_file() else sorted(top.rglob("*"))):
            rel = p.relative_to(REPO)
            if p.is_file() and not any(rel.match(pat) or any(part == pat or Path(part).match(pat) for part in rel.parts)
                                       for pat in dropped):
                out.append(p)
    return sorted(out)


def project_image(base: str, build_argv, log: Path) -> tuple[str, bool]:
    """The project's image built from this checkout on ``base``: (its tag, whether it was built now).

    ``build_argv(tag)`` is the build command (the documented one, as this machine runs it).  An image of the same
    inputs in podman's store is used as it is, its build log copied to ``log``; building a new one removes the
    earlier ones."""
    h = hashlib.sha256()
    # the Dockerfile is no file of the context (.dockerignore keeps it out) but the build's recipe: a key input
    h.update("\n".join([base, (REPO / "Dockerfile").read_text(), (REPO / ".dockerignore").read_text(),
                        *build_argv("TAG")]).encode())
    for p in context_files():
        h.update(f"{p.relative_to(REPO)}\0".encode() + p.read_bytes() + b"\0")
    tag = f"{IMAGE_REPO}:{h.hexdigest()[:12]}"
    kept_log = CACHE / f"build-{h.hexdigest()[:12]}.log"
    if has_image(tag) and kept_log.is_file() and os.environ.get(REBUILD_ENV) != "1":
        log.write_text(kept_log.read_text(errors="replace"))
        return tag, False
    listed = podman("images", "--format", "{{.Repository}}:{{.Tag}}", check=False).stdout.split()
    for old in (t for t in listed if t.startswith(IMAGE_REPO + ":") and t != tag):
        podman("rmi", "-f", old, check=False)
    log.unlink(missing_ok=True)
    run(build_argv(tag), 1800, log)
    kept_log.write_text(log.read_text(errors="replace"))
    return tag, True


def build_flags(base: str) -> list[str]:
    """What ``podman build`` needs on this machine beyond the documented command: the stand-in base without Liger's
    GPU extra, chroot isolation, the host network and CA bundle for the install steps, no layer cache (a clean build)."""
    pip_conf = _conf("pip-ca.conf", "[global]\ncert = /run/host-ca.crt\n")
    return ["--isolation", "chroot", "--network", "host", "--layers=false",
            "-v", f"{HOST_CA}:/run/host-ca.crt:ro", "-v", f"{pip_conf}:/etc/pip.conf:ro",
            "--build-arg", f"BASE_IMAGE={base}", "--build-arg", "EXTRAS="]


def image_bytes(tag: str) -> int:
    return int(podman("image", "inspect", "--format", "{{.Size}}", tag).stdout.strip())


def context_bytes_and_files() -> tuple[int, int]:
    """What a build of this checkout sends: the files .dockerignore lets through, copied as the build copies them."""
    ctr = buildah("from", "scratch").stdout.strip()
    try:
        buildah("copy", "--quiet", "--contextdir", str(REPO), "--ignorefile", str(REPO / ".dockerignore"), ctr, str(REPO),
                "/context")
        root = Path(buildah("mount", ctr).stdout.strip()) / "context"
        files = [p for p in root.rglob("*") if p.is_file()]
        return sum(p.stat().st_size for p in files), len(files)
    finally:
        buildah("rm", ctr, check=False)


def processes(name: str) -> list[tuple[int, str]]:
    """(host pid, command line) of every process of the running container."""
    out = podman("top", name, "hpid,args").stdout.splitlines()[1:]
    return [(int(line.split(None, 1)[0]), line.split(None, 1)[1].strip()) for line in out if line.strip()]


def volume_path(volume: str) -> Path:
    return Path(podman("volume", "inspect", "--format", "{{.Mountpoint}}", volume).stdout.strip())
