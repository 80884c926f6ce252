"""Running a trained or exported camera model on images outside the training pipeline."""
