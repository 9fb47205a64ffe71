"""Sans-I/O KRaft: roles, votes, fetch replication, high watermark, KIP-630 snapshots."""
