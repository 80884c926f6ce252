"""Scoring helpers the task specs use at evaluation: the devkit submission and per-frame report figures."""
