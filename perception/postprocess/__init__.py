"""Network outputs + per-image meta -> predictions in dataset terms (shared by eval, demo, ONNX)."""
