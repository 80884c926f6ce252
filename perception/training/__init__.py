"""Criteria, the LightningModule, checkpoints and the trainer wiring."""
