"""Code that runs inside the images: standard library and torch only, nothing from buildkit."""
