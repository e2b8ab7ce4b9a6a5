"""Rendering: a target and its templates -> build args, labels, the image fingerprint, and Dockerfile text.

- renderer: the Renderer, planned images and their fingerprints, the Jinja sandbox;
- shapes: symbolic rendering (one render of a template stands for every target that reads the same values);
- guard: what an image's GPU guard knows about the image.
"""
