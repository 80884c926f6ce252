"""A synthetic driving world written in the real nuScenes on-disk format.

The world (roads, lanes, agents, traffic lights) is generated from a seed; labels and
images are both produced from that one geometry, so a model can learn from the images
what the labels say.
"""
