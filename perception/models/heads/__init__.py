"""Task heads, one file each. Every head reads the FPN levels and returns named tensors."""
