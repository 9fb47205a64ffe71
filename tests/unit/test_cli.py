import subprocess
import sys

from riverbed.cli.main import main


def test_help_exits_zero(capsys):
    assert main([]) == 0
    assert "riverbed" in capsys.readouterr().out


def test_console_script_runs():
    out = subprocess.run(
        [sys.executable, "-m", "riverbed.cli.main", "--version"],
        capture_output=True,
        text=True,
        check=True,
    )
    assert out.stdout.startswith("riverbed ")
