"""Every `physskin-gs ...` command line shown in the README and in docs/usage.md (where the README's full command
reference lives) parses with the real CLI (flags and values exist as written), and every subcommand's --help works:
the documentation cannot drift away from the CLI unnoticed."""

import re
import shlex
from pathlib import Path

import pytest

from physskin_gs.cli import COMMANDS, build_parser, join_negative_values

README = Path(__file__).resolve().parents[1] / "README.md"
USAGE = README.parent / "docs" / "usage.md"

# placeholders of the README's synopsis rows -> a value of the right kind
PLACEHOLDERS = {"PATH": "scene.ply", "IN": "in.ply", "OUT.ply": "out.ply", "OUT.png": "out.png", "OUT.mp4": "o.mp4",
                "DIR": "outdir", "N": "3", "CKPT": "model.safetensors", "PTS.npy": "pts.npy", "OUT": "out.json",
                "weights.npz": "weights.npz", "MOTION.json": "motion.json", "...": "x.obj"}


def readme_commands():
    """The physskin-gs command lines of the README: fenced lines and inline code spans (with the synopsis rows'
    optional groups dropped and placeholders filled in)."""
    text = README.read_text() + "\n" + USAGE.read_text()
    found = []
    for block in re.findall(r"```[a-z]*\n(.*?)```", text, flags=re.S):
        for line in block.splitlines():
            if "physskin-gs " in line:
                found.append(line[line.index("physskin-gs "):])
    prose = re.sub(r"```[a-z]*\n.*?```", "", text, flags=re.S)
    for span in re.findall(r"`([^`\n]+)`", prose):
        if span.startswith("physskin-gs ") and len(span.split()) > 1:
            found.append(span)
    out = []
    for cmd in found:
        cmd = cmd.split("  #")[0].split(" # ")[0].split("&&")[0].strip()
        out.append(re.sub(r"\s*\[[^\]]*\]", "", cmd))  # the synopsis without its optional groups
        # ... and with all of them, taking the first of the alternatives a|b|c
        full = re.sub(r"\\?\|[^\s\]]*", "", cmd).replace("[", "").replace("]", "")
        out.append(full)
    return sorted(set(out))


COMMAND_LINES = readme_commands()


def test_the_readme_shows_commands():
    subs = {c.split()[1] for c in COMMAND_LINES}
    assert {"animate", "render", "skin", "evaluate", "train", "convert", "info"} <= subs


@pytest.mark.parametrize("cmd", COMMAND_LINES)
def test_readme_command_parses(cmd):
    words = [PLACEHOLDERS.get(w, w) for w in shlex.split(cmd)[1:]]
    parser = build_parser()
    try:
        args = parser.parse_args(join_negative_values(words))
    except SystemExit as exc:  # argparse rejects: name the command line
        pytest.fail(f"README command does not parse ({exc.code}): {cmd}")
    assert callable(args.func)


@pytest.mark.parametrize("sub", COMMANDS)
def test_every_help_works(sub, capsys):
    with pytest.raises(SystemExit) as exc:
        build_parser().parse_args([sub, "--help"])
    assert exc.value.code == 0
    assert sub in capsys.readouterr().out
