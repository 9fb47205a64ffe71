"""The replication shell: partition cores on the broker, replica fetchers, AlterPartition."""
