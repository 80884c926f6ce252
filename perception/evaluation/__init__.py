"""Offline evaluation of a checkpoint on a split (tools/test.py)."""
