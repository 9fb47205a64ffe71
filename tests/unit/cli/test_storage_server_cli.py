"""`riverbed storage ...` and `riverbed server start` argument/config errors (no network)."""

import json

from riverbed.cli.main import main
from riverbed.metadata.storage_format import read_meta_properties


def write_config(tmp_path, **extra):
    data = tmp_path / "data"
    lines = [
        "process.roles=broker,controller",
        "node.id=5",
        "listeners=PLAINTEXT://127.0.0.1:0",
        f"log.dirs={data}",
    ] + [f"{k.replace('_', '.')}={v}" for k, v in extra.items()]
    f = tmp_path / "server.properties"
    f.write_text("\n".join(lines) + "\n")
    return f, data


def test_random_uuid(capsys):
    assert main(["storage", "random-uuid"]) == 0
    out = capsys.readouterr().out.strip()
    assert len(out) == 22


def test_format_then_refuse_then_ignore(tmp_path, capsys):
    cfg, data = write_config(tmp_path)
    assert (
        main(["storage", "format", "--config", str(cfg), "--cluster-id", "MkU3OEVBNTcwNTJENDM2Qg"])
        == 0
    )
    meta = read_meta_properties(data)
    assert meta is not None and meta.cluster_id == "MkU3OEVBNTcwNTJENDM2Qg" and meta.node_id == 5
    capsys.readouterr()
    assert main(["storage", "format", "--config", str(cfg), "-t", "MkU3OEVBNTcwNTJENDM2Qg"]) == 1
    assert "already formatted" in capsys.readouterr().err
    assert main(["storage", "format", "-c", str(cfg), "-t", "MkU3OEVBNTcwNTJENDM2Qg", "-g"]) == 0
    assert main(["storage", "info", "-c", str(cfg), "--json"]) == 0
    rows = json.loads(capsys.readouterr().out.split("\n", 1)[1])
    assert rows[0]["formatted"] is True and rows[0]["node_id"] == 5


def test_format_rejects_bad_cluster_id(tmp_path, capsys):
    cfg, _ = write_config(tmp_path)
    assert main(["storage", "format", "--config", str(cfg), "--cluster-id", "nope"]) == 1
    assert "valid UUID" in capsys.readouterr().err


def test_format_random_cluster_id_by_default(tmp_path, capsys):
    cfg, data = write_config(tmp_path)
    assert main(["storage", "format", "--config", str(cfg)]) == 0
    assert read_meta_properties(data) is not None


def test_server_start_bad_config_names_key(tmp_path, capsys):
    cfg, _ = write_config(tmp_path, num_partitions="zero")
    assert main(["server", "start", "--config", str(cfg)]) == 2
    err = capsys.readouterr().err
    assert "num.partitions" in err and "invalid configuration" in err


def test_server_start_bad_override(capsys):
    assert main(["server", "start", "--override", "log.retention.ms"]) == 2
    assert "key=value" in capsys.readouterr().err


def test_config_errors_in_storage_format(tmp_path, capsys):
    assert main(["storage", "format", "--config", str(tmp_path / "missing.properties")]) == 2
    assert "does not exist" in capsys.readouterr().err


def test_dump_metadata(tmp_path, capsys):
    import asyncio

    from riverbed.protocol.messages import FeatureLevelRecord
    from riverbed.server.metadata_log import LocalMetadataLog

    cfg, data = write_config(tmp_path)
    log = LocalMetadataLog(data)
    asyncio.run(log.append([FeatureLevelRecord(name="metadata.version", feature_level=21)]))
    log.close()
    assert main(["storage", "dump-metadata", "--config", str(cfg), "--json"]) == 0
    (line,) = capsys.readouterr().out.splitlines()
    assert json.loads(line) == {
        "offset": 0,
        "type": "FeatureLevelRecord",
        "name": "metadata.version",
        "feature_level": 21,
    }
    assert main(["storage", "dump-metadata", "--override", f"log.dirs={tmp_path}/none"]) == 1
    assert "no metadata log" in capsys.readouterr().err


def test_produce_input_file_missing(tmp_path, capsys):
    rc = main(["produce", "-b", "127.0.0.1:1", "-t", "x", "--input", str(tmp_path / "nope.txt")])
    assert rc == 1
    assert "cannot read" in capsys.readouterr().err


def test_server_start_port_in_use(tmp_path, capsys):
    import socket

    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        s.listen()
        port = s.getsockname()[1]
        # no HTTP listener: the embedded default's fixed 9644 is bound first, and another
        # node on the machine (or test worker) may hold it
        rc = main(["server", "start", "--override", f"listeners=PLAINTEXT://127.0.0.1:{port}",
                   "--override", f"log.dirs={tmp_path}/data",
                   "--override", "riverbed.http.listeners="])  # fmt: skip
    assert rc == 1
    err = capsys.readouterr().err
    # the refusal names the held port (with 9644 held elsewhere, the HTTP listener's looked alike)
    assert f"cannot listen on PLAINTEXT://127.0.0.1:{port}" in err
    assert "address already in use" in err


def test_broken_pipe_ends_quietly(tmp_path):
    import asyncio
    import subprocess
    import sys
    import uuid

    from riverbed.protocol.messages import TopicRecord
    from riverbed.server.metadata_log import LocalMetadataLog

    log = LocalMetadataLog(tmp_path)
    asyncio.run(
        log.append([TopicRecord(name=f"t{i}", topic_id=uuid.UUID(int=i + 9)) for i in range(5000)])
    )
    log.close()
    proc = subprocess.Popen(
        [sys.executable, "-m", "riverbed.cli.main", "storage", "dump-metadata",
         "--override", f"log.dirs={tmp_path}"],
        stdout=subprocess.PIPE, stderr=subprocess.PIPE,
    )  # fmt: skip
    assert proc.stdout is not None
    first = proc.stdout.readline()
    proc.stdout.close()  # the reader goes away, like `| head -1`
    err = proc.stderr.read() if proc.stderr else b""
    assert proc.wait(timeout=60) == 141
    assert first.startswith(b"0\tTopicRecord")
    assert b"Traceback" not in err and b"error" not in err


def test_random_uuid_and_format_json(tmp_path, capsys):
    assert main(["storage", "random-uuid", "--json"]) == 0
    cid = json.loads(capsys.readouterr().out)["cluster_id"]
    assert len(cid) == 22
    cfg, data = write_config(tmp_path)
    assert main(["storage", "format", "-c", str(cfg), "-t", cid, "--json"]) == 0
    out = json.loads(capsys.readouterr().out)
    assert out == {"cluster_id": cid, "node_id": 5, "formatted": [str(data)]}
    assert main(["storage", "format", "-c", str(cfg), "-t", cid, "-g", "--json"]) == 0
    assert json.loads(capsys.readouterr().out)["formatted"] == []
