"""No user text reaches a shell, an #SBATCH line or a name field as anything but itself (issue 31).

The sbatch script is checked by property: jobs whose folder, model, data and extra arguments are random strings
of shell syntax (``$(...)``, backticks, quotes, ``${...}``, ``;``, ``&&``, ``|``, globs, ``%j``, the node's own
variable names, newlines, escapes, unicode) are rendered, checked by a real ``bash -n``, and then their node
command is RUN by real bash, with ``srun`` and ``scontrol`` replaced by stubs on PATH (srun runs the command it is
given, scontrol answers as a cluster does) and ``torchrun`` by a stub that writes its argv: nothing is created,
and torchrun receives each argument byte for byte as ZeroBoard meant it, ``$ZB_HEAD`` and the others expanded only
in ZeroBoard's own rendezvous options.  The real cluster (tests/test_slurm.py) runs one such job to the end.
"""

from __future__ import annotations

import os
import random
import re
import subprocess
from pathlib import Path

import pytest

from zeroboard.cli import main as cli_main
from zeroboard.job import command, placement, quoting, slurm, spec

PIECES = ("$", "`", "'", '"', "\\", "$(touch PWNED)", "`touch PWNED`", "${PWD}", "${HOME:+x}", "$ZB_HEAD", "${ZB_HEAD}",
          "$SLURM_NNODES", "$SLURM_JOB_ID", ";touch PWNED;", " && touch PWNED", " | tee PWNED", " > PWNED", "*", "?",
          "[a-z]", "{a,b}", "~", "#", "%j", "%%", "!", "!!", " ", "--", "=", ",", "-x", "名字", "é", "\U0001F600",
          "run", "a", "$'x'", "\n", "\r", "\t", "\x1b[31m", "\x7f", "\x85", "\u2028")
CONTROL = ("\n", "\r", "\t", "\x1b[31m", "\x7f", "\x85", "\u2028")
NODE = {"SLURM_JOB_NODELIST": "zb[1-2]", "SLURM_NNODES": "2", "SLURM_JOB_ID": "4242"}
HEAD = "10.9.8.7"  # the address the scontrol stub gives the first node


def hostile(rng: random.Random, most: int = 6, control: bool = True) -> str:
    pieces = PIECES if control else [p for p in PIECES if p not in CONTROL]
    return "".join(rng.choice(pieces) for _ in range(rng.randint(1, most)))


def printed(words: list[str], cwd: Path) -> list[str]:
    """What real bash makes of a line: the words as printf receives them (NUL-separated, byte for byte)."""
    done = subprocess.run(["bash", "-c", "printf '%s\\0' " + " ".join(words)], cwd=cwd, capture_output=True, timeout=30)
    assert done.returncode == 0, done.stderr
    return [w.decode() for w in done.stdout.split(b"\0")[:-1]]


def test_every_string_is_one_shell_word_that_reads_back_as_itself(tmp_path):
    rng = random.Random(31)
    texts = [hostile(rng, 8) for _ in range(400)] + ["", "-", "'", "\\'", "$'\\n'", "a\x00"[:1]]
    words = [quoting.shell(t) for t in texts]
    assert all(not quoting.CONTROL.search(w) for w in words)  # a shown command is one line, no escape sequence
    assert printed(words, tmp_path) == texts
    assert os.listdir(tmp_path) == []  # nothing ran
    with pytest.raises(quoting.Unwritable):
        quoting.shell("a\x00b")  # no argument can hold it


def test_the_preview_shell_line_runs_as_the_argv_it_shows(tmp_path):
    rng = random.Random(7)
    argv = ["/usr/bin/printf", "%s\\0", *(hostile(rng) for _ in range(60))]
    cmd = command.Command(argv, {"ZB_TEST": hostile(rng)}, str(tmp_path), None, "cpu")
    line = cmd.shell()
    assert "\n" not in line
    done = subprocess.run(["bash", "-c", line], cwd=tmp_path, capture_output=True, timeout=30)
    assert [w.decode() for w in done.stdout.split(b"\0")[:-1]] == argv[2:]
    env = command.Command(["/usr/bin/printenv", "ZB_TEST"], cmd.env, str(tmp_path), None, "cpu").shell()
    assert subprocess.run(["bash", "-c", env], capture_output=True, text=True).stdout == cmd.env["ZB_TEST"] + "\n"
    assert os.listdir(tmp_path) == []


# --- the sbatch script --------------------------------------------------------------------------------------

def sbatch_arguments(script: str) -> list[str]:
    """The options sbatch reads from a script's #SBATCH lines, as its parser reads them (sbatch(1), and its
    _get_argument): the lines up to the first that is not a comment; on each, blanks split arguments outside quotes,
    ' and " quote, a backslash takes the next character as it is (inside quotes too), an unquoted # ends the line."""
    args: list[str] = []
    for line in script.split("\n")[1:]:
        if not line.startswith("#"):
            if line.strip():
                break
            continue
        if not line.startswith("#SBATCH"):
            continue
        cur, quote, escaped = None, None, False
        for ch in line[len("#SBATCH"):]:
            if escaped:
                cur, escaped = (cur or "") + ch, False
            elif ch == "\\":
                cur, escaped = cur or "", True
            elif quote:
                cur, quote = (cur, None) if ch == quote else (cur + ch, quote)
            elif ch in "'\"":
                cur, quote = cur or "", ch
            elif ch == "#":
                break
            elif ch in " \t":
                if cur is not None:
                    args.append(cur)
                cur = None
            else:
                cur = (cur or "") + ch
        assert quote is None, f"unmatched quote: {line!r}"
        if cur is not None:
            args.append(cur)
    return args


@pytest.fixture()
def stubs(tmp_path) -> Path:
    """srun that runs the command it is given; scontrol that answers as a two-node cluster; torchrun that writes
    the arguments it receives to $ZB_TEST_ARGV, NUL-separated."""
    d = tmp_path / "bin"
    d.mkdir()
    (d / "srun").write_text('#!/bin/bash\nwhile [[ "$1" == --* ]]; do shift; done\nexec "$@"\n')
    (d / "scontrol").write_text('#!/bin/bash\ncase "$1 $2" in\n  "show hostnames") echo zb1; echo zb2 ;;\n'
                                f'  "show node") echo "NodeName=$3 Arch=x86_64 NodeAddr={HEAD} NodeHostName=$3" ;;\nesac\n')
    (d / "torchrun").write_text("#!/bin/bash\nprintf '%s\\0' \"$@\" > \"$ZB_TEST_ARGV\"\n")
    for p in d.iterdir():
        p.chmod(0o755)
    return d


def hostile_job(rng: random.Random, workdir: Path) -> spec.JobSpec:
    """A Slurm job whose names are random shell syntax (made directly, past the spec's own refusal of control
    characters: the script must be safe whatever reaches it)."""
    return spec.JobSpec(
        launcher="slurm", num_nodes=2, num_processes=1, device_type="cpu", precision="fp32",
        output_dir=str(workdir / "runs" / hostile(rng).replace("/", "_")), model_name_or_path=hostile(rng),
        dataset_dir=hostile(rng), dataset=[hostile(rng), hostile(rng)],
        extra_args={"run_name": hostile(rng), "logging_dir": hostile(rng)},
        slurm_extra=[f"--comment={hostile(rng, 4)}", "--mem=1G"])


def test_sbatch_scripts_of_hostile_names_run_nothing_and_torchrun_gets_each_argument_as_it_is(tmp_path, stubs,
                                                                                              monkeypatch):
    monkeypatch.setattr(command, "_launcher", lambda name: [name])  # the stub on PATH
    rendered: list = []
    real = slurm.render
    monkeypatch.setattr(slurm, "render", lambda *a, **kw: rendered.append(a[1]) or real(*a, **kw))
    rng = random.Random(31)
    work = tmp_path / "work"  # the node's folder: where a $(touch PWNED) would land
    work.mkdir()
    env = {**os.environ, **NODE, "PATH": f"{stubs}:{os.environ['PATH']}", "ZB_TEST_ARGV": str(tmp_path / "argv")}
    ran = refused = 0
    for i in range(60):
        job = hostile_job(rng, tmp_path)
        run = Path(os.getcwd(), job.output_dir).resolve()
        try:
            cmd = command.build(job, placement.place(job, []), port=29511)
        except quoting.Unwritable:  # what cannot be written into an #SBATCH line: a control character, a backslash
            assert quoting.CONTROL.search(str(run) + job.slurm_extra[0]) or "\\" in str(run), job
            assert set(slurm.problems(job)) & {"output_dir", "slurm_extra"}  # said before anything is built
            refused += 1
            continue
        script = tmp_path / "job.sbatch"
        script.write_text(cmd.script, encoding="utf-8")
        syntax = subprocess.run(["bash", "-n", str(script)], capture_output=True, text=True)
        assert syntax.returncode == 0, syntax.stderr
        options = sbatch_arguments(cmd.script)  # sbatch reads exactly the options written, each value whole
        assert [o.partition("=")[0] for o in options] == [
            "--job-name", "--nodes", "--ntasks-per-node", "--cpus-per-task", "--output", "--open-mode", "--chdir",
            "--comment", "--mem"]
        output = dict(o.split("=", 1) for o in options)["--output"]
        assert output.replace("\\", "") == str(run / "launcher.log")  # Slurm drops the backslashes...
        assert "%" not in output or "\\" in output  # ...and, with one there, replaces no %j
        assert dict(o.split("=", 1) for o in options)["--comment"] == job.slurm_extra[0].split("=", 1)[1].strip()
        (tmp_path / "argv").unlink(missing_ok=True)
        done = subprocess.run(["bash", str(script)], cwd=work, env=env, capture_output=True, timeout=60)
        assert done.returncode == 0, done.stderr.decode()
        got = [a.decode() for a in (tmp_path / "argv").read_bytes().split(b"\0")[:-1]]
        node = {**NODE, "ZB_HEAD": HEAD}
        want = [a.value(node) if isinstance(a, slurm.OnNode) else a for a in rendered[-1][1:]]
        assert got == want, i
        assert got[got.index("--rdzv_endpoint") + 1] == f"{HEAD}:29511" and got[got.index("--nnodes") + 1] == "2"
        assert os.listdir(work) == [], os.listdir(work)
        ran += 1
    assert not list(tmp_path.rglob("*PWNED*"))
    assert ran >= 20 and refused >= 5, (ran, refused)  # both kinds were tried


def test_only_zeroboards_own_rendezvous_options_are_expanded_on_the_node():
    args = slurm.torchrun_args(spec.JobSpec(launcher="slurm", num_nodes=2), 29500, 1)
    marked = [a for a in args if isinstance(a, slurm.OnNode)]
    assert [a.word() for a in marked] == ['"$SLURM_NNODES"', '"$ZB_HEAD:29500"', '"$SLURM_JOB_ID"']
    assert slurm.node_command(["$ZB_HEAD", "a$(id)"]) == "'$ZB_HEAD' 'a$(id)'"  # text typed by a user: literal
    with pytest.raises(ValueError):
        slurm.OnNode("HOME")  # only the node's own variables
    with pytest.raises(ValueError):
        slurm.OnNode("ZB_HEAD", ":1$(id)")


# --- extra #SBATCH options: an allow-list ----------------------------------------------------------------------

REFUSED_EXTRA = {  # option -> words of the refusal
    "--wrap=id": "not one of the sbatch options", "--output=/etc/passwd": "launcher.log", "-o x": "launcher.log",
    "--error=/tmp/e": "launcher.log", "-e /tmp/e": "launcher.log", "--open-mode=truncate": "launcher.log",
    "--input=/etc/shadow": "not one of", "--chdir=/": "folder ZeroBoard was started from", "-D /": "started from",
    "--export=ALL,LD_PRELOAD=x": "not one of", "--export-file=/tmp/env": "not one of", "--parsable": "not one of",
    "--test-only": "not one of", "--wait": "not one of", "--array=0-9": "not one of", "--hold": "not one of",
    "--container=/img": "not one of", "--bb=x": "not one of", "--get-user-env": "not one of", "--uid=0": "not one of",
    "--clusters=other": "not one of", "--job-name=x": "set output_dir instead", "-p gpu": "set slurm_partition instead",
    "--partition=gpu": "slurm_partition", "--time=1:00": "slurm_time", "--account=x": "slurm_account",
    "--nodes=3": "num_nodes", "--ntasks-per-node=4": "num_nodes", "--cpus-per-task=9": "slurm_cpus_per_task",
    "--gpus-per-node=8": "slurm_gpus_per_node", "--mem": "takes a value", "mem=4G": "not an sbatch option",
    "--comment=a\nb": "control character", "--Mem=1G": "not an sbatch option",
}


@pytest.mark.parametrize("extra", REFUSED_EXTRA, ids=[repr(x) for x in REFUSED_EXTRA])
def test_an_extra_sbatch_option_outside_the_allow_list_is_refused_on_slurm_extra(extra):
    job = spec.JobSpec(launcher="slurm", slurm_extra=["--mem=4G", extra])
    found = slurm.problems(job)
    assert "slurm_extra" in found and REFUSED_EXTRA[extra] in found["slurm_extra"], found
    assert "{" not in found["slurm_extra"] and "\n" not in found["slurm_extra"]
    with pytest.raises(quoting.Unwritable):  # and never written, whoever calls render
        command.build(job, placement.place(job, []), port=29500)


def test_allowed_extra_options_are_written_in_their_long_form_with_their_values_quoted():
    extra = ["--mem=64G", "--qos normal", "-C a100&nvlink", "--exclusive", "--comment=two words, one \"quote\" # no comment",
             "--mail-type=END,FAIL", "--signal=B:USR1@60", "--no-requeue", "-w zb1"]
    job = spec.JobSpec(launcher="slurm", num_nodes=2, slurm_extra=extra)
    assert "slurm_extra" not in slurm.problems(job)
    script = command.build(job, placement.place(job, []), port=29500).script
    options = sbatch_arguments(script)
    assert options[-len(extra):] == ["--mem=64G", "--qos=normal", "--constraint=a100&nvlink", "--exclusive",
                                     '--comment=two words, one "quote" # no comment', "--mail-type=END,FAIL",
                                     "--signal=B:USR1@60", "--no-requeue", "--nodelist=zb1"]


# --- names are names: the spec and the command line ------------------------------------------------------------

def text_fields() -> list[str]:
    """Every field whose value is text: paths, names, options (strings, lists of them, the extra arguments)."""
    kinds = (str, list[str], dict[str, object])
    return [n for n in spec.FIELDS if spec.field_type(n) in kinds or str(spec.field_type(n)).startswith("dict")]


def test_every_text_field_refuses_control_characters_naming_the_character_and_its_place():
    fields = text_fields()
    assert {"output_dir", "model_name_or_path", "dataset_dir", "dataset", "deepspeed", "slurm_extra",
            "extra_args"} <= set(fields)
    rng = random.Random(5)
    for name in fields:
        for bad in ("\n", "\x00", "\x1b", "\x7f", "\r", "\t", "\x85", "\u2028"):
            value = f"ok{rng.choice('abc')}{bad}x"
            given = {"run_name": value} if name == "extra_args" else value
            with pytest.raises(spec.SpecError) as e:
                spec.from_dict({name: given})
            said = e.value.problems[name]
            assert quoting.shown(bad) in said and "position 4" in said, said
            assert not quoting.CONTROL.search(said)  # the message itself is one line
        fine = hostile(rng, control=False).strip().replace(",", "") or "x"
        if name not in ("extra_args",):
            spec.from_dict({name: fine})  # shell syntax in a name is a legal name (quoted wherever it goes)


def test_extra_args_refuse_control_characters_at_any_depth():
    with pytest.raises(spec.SpecError) as e:
        spec.from_dict({"extra_args": '{"logging_dir": "ok", "x": [1, {"run_name": "a\\u001bb"}]}'})
    assert "x[1].run_name" in e.value.problems["extra_args"] and "\\x1b" in e.value.problems["extra_args"]
    assert spec.from_dict({"extra_args": {"run_name": "$ZB_HEAD$(touch PWNED2)`id`"}}).extra_args["run_name"]


@pytest.mark.parametrize("argv", [["export", "runs/a\nb", "out"], ["export", "runs/a", "out\x1b[2J"],
                                  ["merge", "runs/a", "o\rut"], ["chat", "runs/\x00a"], ["stop", "runs/a\tb"],
                                  ["runs", "show", "runs/a\x7f"], ["runs", "compare", "runs/a", "runs/b\u2028"],
                                  ["check", "runs/a\nb"], ["consolidate", "x\ny", "out"], ["validate", "job\n.yaml"],
                                  ["train", "examples/demo.yaml", "--allow-path", "/tmp/a\nb"]],
                         ids=lambda a: " ".join(a[:2]))
def test_command_line_paths_with_control_characters_are_refused_naming_the_argument(argv, capsys):
    with pytest.raises(SystemExit) as e:
        cli_main(argv)
    assert e.value.code == 2
    err = capsys.readouterr().err
    assert "error: argument" in err and "control character" in err and "Traceback" not in err, err


@pytest.mark.parametrize("lang", ["en", "zh"])
def test_the_docs_list_exactly_the_allowed_extra_options(root, lang):
    text = (root / "docs" / lang / "queue-and-cluster.md").read_text(encoding="utf-8")
    start = text.index("`slurm_extra`)")
    listed = text[start:text.index("-C`", start)]
    assert set(re.findall(r"`--([a-z-]+)`", listed)) == slurm.EXTRA_ALLOWED
