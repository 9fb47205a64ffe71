"""`riverbed pipeline run|list` (the CLI side only; the pipelines are tested end to end)."""

from __future__ import annotations

import json
import shlex
from pathlib import Path

import pytest

from riverbed.cli import pipeline
from riverbed.cli.main import main

REPO = Path(__file__).resolve().parents[2]

PIPELINE = '''"""Records how it was called."""
import json, sys
from pathlib import Path


def main(argv=None):
    Path(__file__).with_suffix(".json").write_text(json.dumps(argv))
    return 3
'''


def test_run_passes_the_bootstrap_server_and_the_arguments(tmp_path: Path) -> None:
    script = tmp_path / "echo_pipeline.py"
    script.write_text(PIPELINE)
    assert main(["pipeline", "run", "-b", "h:1", str(script), "--events", "5", "--", "x"]) == 3
    assert json.loads(script.with_suffix(".json").read_text()) == [
        "--bootstrap-server",
        "h:1",
        "--events",
        "5",
        "--",
        "x",
    ]
    assert main(["pipeline", "run", str(script)]) == 3
    assert json.loads(script.with_suffix(".json").read_text())[:2] == [
        "--bootstrap-server",
        "localhost:9092",
    ]


def test_run_and_list_report_bad_input(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["pipeline", "run", str(tmp_path / "missing.py")]) == 1
    assert "does not exist" in capsys.readouterr().err
    (tmp_path / "no_main.py").write_text("x = 1\n")
    assert main(["pipeline", "run", str(tmp_path / "no_main.py")]) == 1
    assert "defines no main(argv)" in capsys.readouterr().err
    (tmp_path / "p.py").write_text(PIPELINE)
    assert main(["pipeline", "list", str(tmp_path)]) == 0
    out = capsys.readouterr().out
    assert "p.py  Records how it was called." in out and "no_main.py" not in out


MASTER_PIPELINE = '''"""Records the Spark master it would use."""
import json, os
from pathlib import Path


def main(argv=None):
    master = os.environ.get("RIVERBED_SPARK_MASTER")
    Path(__file__).with_suffix(".json").write_text(json.dumps(master))
    return 0
'''


def test_run_passes_the_master_to_the_session(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    # set (to "": no master) so that monkeypatch restores what the run sets
    monkeypatch.setenv("RIVERBED_SPARK_MASTER", "")
    script = tmp_path / "master_pipeline.py"
    script.write_text(MASTER_PIPELINE)
    assert main(["pipeline", "run", "--master", "spark://h:7077", str(script)]) == 0
    assert json.loads(script.with_suffix(".json").read_text()) == "spark://h:7077"
    from riverbed.spark.session import local_session_master

    assert local_session_master(2) == "spark://h:7077"
    monkeypatch.delenv("RIVERBED_SPARK_MASTER")
    assert local_session_master(2) == "local[2]"


def test_the_examples_in_the_verbs_help_parse() -> None:
    """Each `riverbed pipeline run ... FILE ARGS` line of the verb's help names an example
    whose own parser takes ARGS (``--help`` after them: exit 0 only if they parsed)."""
    assert pipeline.__doc__ is not None
    lines = [ln.split() for ln in pipeline.__doc__.splitlines() if "riverbed pipeline run " in ln]
    examples = [words for words in lines if any(w.startswith("examples/") for w in words)]
    assert len(examples) == 3
    for words in examples:
        at = next(i for i, w in enumerate(words) if w.startswith("examples/"))
        example_main = pipeline.load_main(REPO / words[at])
        with pytest.raises(SystemExit) as exited:
            example_main(["--bootstrap-server", "h:1", *words[at + 1 :], "--help"])
        assert exited.value.code == 0, shlex.join(words)
