"""Cluster metadata: records, the immutable image, controller logic and the metadata log.

See docs/CONTRACTS.md ("riverbed.metadata") for the names other layers use.
"""
