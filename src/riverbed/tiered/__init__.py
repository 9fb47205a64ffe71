"""riverbed.tiered: tiered storage (KIP-405) below the server.

Remote index formats (:mod:`~riverbed.tiered.remote_log_index`,
:mod:`~riverbed.tiered.remote_offset_index`, :mod:`~riverbed.tiered.remote_time_index`,
grouped and rotated by :mod:`~riverbed.tiered.remote_indexes`), the remote storage
manager over fsspec (:mod:`~riverbed.tiered.rsm`), segment chunking
(:mod:`~riverbed.tiered.segment_chunks`) and the remote log manager's sans-I/O logic
(:mod:`~riverbed.tiered.rlm`). The shell with its bounded pools is
``riverbed.server.remote_log``.
"""
