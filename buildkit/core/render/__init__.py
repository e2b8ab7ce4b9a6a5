"""The render room: a target and its templates -> build args, labels, the image fingerprint, and Dockerfile text.

- planned: the planned image (everything but its text), the build context's layout, what a template reads;
- fingerprint: sha256 over everything that determines an image;
- sandbox: the Jinja sandbox templates run in, its code generator and filters, template errors located;
- shapes: symbolic rendering (one render of a template stands for every target that reads the same values);
- renderer: the Renderer, which plans and renders targets, keeping what it read for the next;
- guard: what an image's GPU guard knows about the image.
"""
