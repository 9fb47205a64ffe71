"""Tiered storage's broker configs are validated when the node starts."""

from __future__ import annotations

from pathlib import Path

import pytest

from riverbed.server.config import ServerConfig
from riverbed.server.node import NodeConfigError, _remote_log_setup


def _cfg(**overrides: str) -> ServerConfig:
    return ServerConfig.embedded_default().with_overrides(overrides)


def test_disabled_by_default_and_nothing_changes() -> None:
    settings, rsm = _remote_log_setup(_cfg())
    assert not settings.enabled and rsm is None
    assert settings.fetch_max_wait_ms == 500 and settings.reader_threads == 10
    assert settings.copier_threads == 10  # -1: remote.log.manager.thread.pool.size


def test_enabled_with_a_file_url(tmp_path: Path) -> None:
    cfg = _cfg(
        **{
            "remote.log.storage.system.enable": "true",
            "rsm.config.url": f"file://{tmp_path}",
            "remote.log.manager.copier.thread.pool.size": "2",
        }
    )
    assert not cfg.unknown_keys  # rsm.config.* belong to the remote storage manager
    settings, rsm = _remote_log_setup(cfg)
    assert settings.enabled and settings.copier_threads == 2 and rsm is not None


@pytest.mark.parametrize(
    ("overrides", "message"),
    [
        ({"remote.log.storage.system.enable": "true"}, "rsm.config.url"),
        (
            {
                "remote.log.storage.system.enable": "true",
                "rsm.config.url": "file:///tmp/x",
                "remote.log.storage.manager.class.name": "com.example.Other",
            },
            "class.name",
        ),
        (
            {
                "remote.log.manager.task.retry.backoff.ms": "5000",
                "remote.log.manager.task.retry.backoff.max.ms": "100",
            },
            "backoff.max.ms",
        ),
        ({"remote.log.manager.copier.thread.pool.size": "0"}, "copier.thread.pool.size"),
    ],
)
def test_bad_configs_stop_the_start(overrides: dict[str, str], message: str) -> None:
    with pytest.raises(NodeConfigError, match=message.replace(".", r"\.")):
        _remote_log_setup(_cfg(**overrides))


def test_out_of_range_values_are_refused_by_the_config() -> None:
    with pytest.raises(ValueError, match=r"remote\.fetch\.max\.wait\.ms"):
        _cfg(**{"remote.fetch.max.wait.ms": "0"})


def test_cache_and_index_rotation_keys(tmp_path: Path) -> None:
    settings, _ = _remote_log_setup(
        _cfg(
            **{
                "riverbed.remote.log.reader.cache.size.bytes": "2097152",
                "riverbed.remote.log.index.segment.bytes": "8192",
                "riverbed.remote.log.index.roll.ms": "60000",
            }
        )
    )
    assert settings.read_cache_bytes == 2097152
    assert (settings.index_file_bytes_max, settings.index_roll_ms) == (8192, 60000)
    for key, bad in (
        ("riverbed.remote.log.reader.cache.size.bytes", "1000"),
        ("riverbed.remote.log.index.segment.bytes", "10"),
        ("riverbed.remote.log.index.roll.ms", "0"),
    ):
        with pytest.raises(ValueError, match=key.replace(".", r"\.")):
            _cfg(**{key: bad})
