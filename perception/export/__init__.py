"""ONNX export of the package's networks (the export logic; tools/export_onnx.py is a thin CLI)."""
