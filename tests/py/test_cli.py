"""The weft command line as a user meets it: top-level usage, --help for
every command, and configuration errors that name the file, line and key."""
import re
import subprocess

import pytest

from conftest import BUILD, run_weft_cmd


def _commands():
    out = subprocess.run([str(BUILD / "weft"), "--help"], capture_output=True, text=True).stdout
    cmds = []
    for line in out.split("commands:")[1].splitlines():
        m = re.match(r"  (\S+(?: \S+)?)\s{2,}", line)
        if m:
            cmds.append(m.group(1))
    return cmds


def test_usage_and_unknown_command(weft_bin):
    p = run_weft_cmd([], check=False)
    assert p.returncode == 2 and "usage: weft <command>" in p.stderr
    p = run_weft_cmd(["--help"])
    assert "tokenizer train" in p.stdout and "tokenize" in p.stdout
    p = run_weft_cmd(["frobnicate"], check=False)
    assert p.returncode == 2 and "unknown command 'frobnicate'" in p.stderr
    p = run_weft_cmd(["tokenizer"], check=False)
    assert p.returncode == 2 and "needs a subcommand" in p.stderr and "tokenizer train" in p.stderr
    assert run_weft_cmd(["--version"]).stdout.startswith("weft ")


def test_commands_are_listed():
    cmds = _commands()
    for c in ["tokenizer train", "tokenizer encode", "tokenizer decode", "tokenizer info", "tokenize",
              "data inspect", "data dump", "data batch"]:
        assert c in cmds


@pytest.mark.parametrize("cmd", [c for c in _commands() if c != "version"])
def test_every_command_has_help_with_defaults(cmd):
    p = run_weft_cmd(cmd.split() + ["--help"])
    assert p.stdout.startswith("usage: weft " + cmd)
    opts = [l for l in p.stdout.splitlines() if l.startswith("  --") and not l.startswith("  --config")]
    assert opts, f"weft {cmd} --help lists no options"
    # every option is followed by its meaning and default
    body = p.stdout
    assert body.count("(default: ") >= len(opts)


def test_config_file_errors_name_file_line_key(tmp_path):
    cfg = tmp_path / "tok.toml"
    cfg.write_text("# tokenizer settings\nvocab_size = \"large\"\n")
    p = run_weft_cmd(["tokenizer", "train", "--config", cfg, "--output", tmp_path / "t.json", "x.txt"], check=False)
    assert p.returncode == 1
    assert f"{cfg}:2: key 'vocab_size' expects an integer, got a string" in p.stderr
    cfg.write_text("vocab_sise = 300\n")
    p = run_weft_cmd(["tokenizer", "train", "--config", cfg, "x.txt"], check=False)
    assert p.returncode == 1
    assert f"{cfg}:1: unknown key 'vocab_sise' (did you mean 'vocab_size'?)" in p.stderr
    cfg.write_text("vocab_size = 100\n")
    p = run_weft_cmd(["tokenizer", "train", "--config", cfg, "x.txt"], check=False)
    assert p.returncode == 1 and f"{cfg}:1: key 'vocab_size' = 100 is out of range" in p.stderr
    assert not (tmp_path / "t.json").exists()


def test_config_file_and_override(tmp_path, corpus_dir):
    cfg = tmp_path / "tok.toml"
    cfg.write_text(f'vocab_size = 300\noutput = "{tmp_path / "from_file.json"}"\n')
    inputs = sorted(corpus_dir.glob("*.txt"))[:3]
    run_weft_cmd(["tokenizer", "train", "--config", cfg, "--vocab_size=400"] + inputs)
    p = run_weft_cmd(["tokenizer", "info", "--tokenizer", tmp_path / "from_file.json"])
    assert "400" in p.stdout


def test_command_line_errors():
    p = run_weft_cmd(["tokenizer", "train", "--vocab-size=abc", "x.txt"], check=False)
    assert p.returncode == 1
    assert "command line '--vocab-size=abc': key 'vocab_size' expects an integer, got 'abc'" in p.stderr
    p = run_weft_cmd(["tokenize", "--bogus=1", "x"], check=False)
    assert p.returncode == 1 and "unknown key 'bogus'" in p.stderr
    p = run_weft_cmd(["tokenize"], check=False)
    assert p.returncode == 1 and "usage:" in p.stderr
