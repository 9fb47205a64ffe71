"""Group coordinator cores: classic group state machines, offsets and their record formats.

Sans-I/O: requests and ``now_ms`` in; responses, records to append to
``__consumer_offsets`` and deadlines out. The asyncio shell is
`riverbed.server.coordinator`.
"""
