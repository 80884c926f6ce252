"""The bottom layer: what data, models, losses, post-processing and the tools all share.

Class names and their order, how targets are encoded as network outputs (and decoded back),
camera geometry, the errors the tools report, loading model weights and progress bars. Nothing
here imports from another part of the package (the layers contract in ``.importlinter`` checks it).
"""
