"""Matching and loss functions per task: plain ``nn.Module`` criteria, no Lightning.

The engine (``perception.training``) weights and sums what these return.
"""
