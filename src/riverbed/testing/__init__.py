"""Test support: simulation harnesses, fakes, launchers."""
