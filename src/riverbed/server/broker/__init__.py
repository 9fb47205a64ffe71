"""Kafka request handlers of the broker (one module per group of APIs)."""
