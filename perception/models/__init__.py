"""Networks: tensors in, named tensors out. No losses, no targets, no numpy."""
