"""Metrics shared by validation, tools/test.py and the demo."""
