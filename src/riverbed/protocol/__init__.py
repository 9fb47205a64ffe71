"""riverbed.protocol: the Kafka wire format (primitives, messages, record batches)."""
