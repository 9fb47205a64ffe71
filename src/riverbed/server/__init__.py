"""The riverbed node process: network layer, request handlers and the wiring of layers."""
