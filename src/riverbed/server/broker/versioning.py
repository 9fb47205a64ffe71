"""Fit a response built for the newest version to the version the client asked for.

Handlers build one response shape for all versions; fields a lower version cannot carry
are reset to their schema defaults here (the codec refuses to write a non-default value
of a non-ignorable field that the version lacks, rightly: the client would never see
it). Produce and Fetch skip this walk (hot path) and are built version-correct.
"""

from __future__ import annotations

from typing import Any

from riverbed.protocol.messages import message_spec


def _fit_struct(obj: Any, spec: Any, version: int) -> None:
    for f in spec.fields:
        if version not in f.versions:
            if not f.ignorable:
                setattr(obj, f.attr, f.default())
            continue
        if f.struct is None:
            continue
        value = getattr(obj, f.attr)
        if value is None:
            continue
        if f.is_array:
            for item in value:
                _fit_struct(item, f.struct, version)
        else:
            _fit_struct(value, f.struct, version)


def fit_to_version(msg: Any, version: int) -> Any:
    """Reset, in place, the fields ``msg`` cannot carry at ``version``; returns ``msg``."""
    _fit_struct(msg, message_spec(msg).struct, version)
    return msg
