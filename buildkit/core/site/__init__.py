"""The nightly's page (`buildkit report --html`), as values: pure, the documents come in read and parsed.

- evidence: what build and publish reports, `buildkit verify --json` and CycloneDX SBOMs say about each image;
- diff: the packages an image gained, lost or changed since the previous nightly;
- charts: the geometry of the page's bar charts;
- chooser: a GPU, a torch release and a Python to the image that fits, by the routing `buildkit run` uses;
- model: the site itself (pages, the pair matrix, each image's facts), split so that no page grows unbounded.
"""
