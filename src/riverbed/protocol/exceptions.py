"""The one exception type the codec raises for bad input."""

from __future__ import annotations


class ProtocolError(Exception):
    """Bytes that do not decode as the Kafka protocol says they must.

    Carries what is known of where decoding failed so that the log line (and the error
    returned to a client) names the problem: the API key and version being decoded and the
    field that failed.
    """

    def __init__(
        self,
        message: str,
        *,
        api_key: int | None = None,
        api_version: int | None = None,
        field: str | None = None,
    ) -> None:
        self.reason = message
        self.api_key = api_key
        self.api_version = api_version
        self.field = field
        super().__init__(self._describe())

    def _describe(self) -> str:
        where = []
        if self.api_key is not None:
            where.append(f"api_key={self.api_key}")
        if self.api_version is not None:
            where.append(f"version={self.api_version}")
        if self.field is not None:
            where.append(f"field={self.field}")
        return f"{self.reason} ({', '.join(where)})" if where else self.reason

    def with_context(
        self,
        *,
        api_key: int | None = None,
        api_version: int | None = None,
        field: str | None = None,
    ) -> ProtocolError:
        """A copy with missing context filled in (inner fields win over outer ones)."""
        return ProtocolError(
            self.reason,
            api_key=self.api_key if self.api_key is not None else api_key,
            api_version=self.api_version if self.api_version is not None else api_version,
            field=self.field if self.field is not None else field,
        )
