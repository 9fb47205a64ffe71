"""scripts/gen_schemas.py on a small spec (the committed tables need no reference dir)."""

from __future__ import annotations

import importlib.util
import json
from pathlib import Path
from types import ModuleType

import pytest

from riverbed.protocol.messages import ProduceRequest, message_spec
from riverbed.protocol.schema import VERSION_MAX, VersionRange, build_all, snake_case
from riverbed.protocol.schemas.generated import SCHEMAS

SCRIPT = Path(__file__).resolve().parents[3] / "scripts" / "gen_schemas.py"


def _load_script() -> ModuleType:
    spec = importlib.util.spec_from_file_location("gen_schemas", SCRIPT)
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


SPEC_TEXT = """// Licensed to the Apache Software Foundation (ASF)
{
  "apiKey": 99,
  "type": "request",
  "name": "DemoRequest",
  // a comment between keys
  "validVersions": "0-2",
  "flexibleVersions": "2+",
  "fields": [
    { "name": "Url", "type": "string", "versions": "0+", "default": "http://x//y",
      "about": "a // that is not a comment" },
    { "name": "Items", "type": "[]Item", "versions": "1+", "fields": [
      { "name": "Id", "type": "int32", "versions": "1+" }
    ]},
    { "name": "Hint", "type": "int64", "versions": "2+", "taggedVersions": "2+", "tag": 0,
      "default": "-1" }
  ]
}
"""


def test_strip_comments_keeps_slashes_in_strings() -> None:
    gen = _load_script()
    data = json.loads(gen.strip_comments(SPEC_TEXT))
    assert data["fields"][0]["default"] == "http://x//y"
    assert data["fields"][0]["about"] == "a // that is not a comment"


def test_tables_and_classes_from_a_spec(tmp_path: Path) -> None:
    gen = _load_script()
    (tmp_path / "message").mkdir()
    (tmp_path / "message" / "DemoRequest.json").write_text(SPEC_TEXT)
    tables = gen.load_tables(tmp_path)
    assert list(tables) == ["DemoRequest"]
    table = tables["DemoRequest"]
    assert table["source"] == "message/DemoRequest.json"
    assert "about" not in table["fields"][0]  # documentation is not carried
    source = gen.write_classes(build_all(tables))
    namespace: dict[str, object] = {}
    exec(compile(source, "classes.py", "exec"), namespace)
    demo = namespace["DemoRequest"]
    obj = demo(items=[demo.Item(id=3)])  # type: ignore[attr-defined, operator]
    assert obj.url == "http://x//y" and obj.hint == -1 and obj.items[0].id == 3
    tables_source = gen.write_tables(tables)
    ns: dict[str, object] = {}
    exec(compile(tables_source, "generated.py", "exec"), ns)
    assert ns["SCHEMAS"] == tables


def test_committed_tables_cover_the_reference_dirs() -> None:
    sources = {t["source"].split("/")[0] for t in SCHEMAS.values()}
    assert sources == {
        "message",
        "metadata",
        "raft",
        "group-coordinator",
        "transaction-coordinator",
    }
    # Kafka 4.1's spec (scripts/kafka-specs/message) replaces the reference's 0-11
    assert message_spec(ProduceRequest).valid_versions == VersionRange(0, 13)


def test_a_later_directory_replaces_a_spec_of_the_same_name(tmp_path: Path) -> None:
    gen = _load_script()
    old, new = tmp_path / "reference", tmp_path / "extra"
    for d, versions in ((old, "0-2"), (new, "0-3")):
        (d / "message").mkdir(parents=True)
        text = SPEC_TEXT.replace('"validVersions": "0-2"', f'"validVersions": "{versions}"')
        (d / "message" / "DemoRequest.json").write_text(text)
    assert gen.load_tables(old, new)["DemoRequest"]["validVersions"] == "0-3"
    (old / "metadata").mkdir()
    (old / "metadata" / "DemoRequest.json").write_text(SPEC_TEXT)
    with pytest.raises(SystemExit, match="duplicate spec name DemoRequest"):
        gen.load_tables(old, new)  # twice in one directory is still a mistake


def test_version_ranges_and_names() -> None:
    assert VersionRange.parse("3+") == VersionRange(3, VERSION_MAX)
    assert 5 in VersionRange.parse("3-5") and 6 not in VersionRange.parse("3-5")
    assert VersionRange.parse("none").empty and str(VersionRange.parse("1")) == "1"
    assert snake_case("ThrottleTimeMs") == "throttle_time_ms"
    assert snake_case("isKRaftController") == "is_kraft_controller"
    assert snake_case("KRaftVersion") == "kraft_version"
    assert snake_case("leaderEpoch") == "leader_epoch"
