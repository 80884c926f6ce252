"""Datasets, label caches, augmentation and the LightningDataModule."""
