"""Getting images out: how they are built, proven, shared and published.

Built (build cache, bake files, layer compression), proven (the smoke test's judge, twin parity), shared (layers
images share) and published (which tags move, what is skipped).

- decisions: publish decisions (skip or build, tag moves, retention);
- build_cache: which registry cache refs a build reads and writes;
- bake: the selection as a buildx bake file;
- compression: how an image's layers are compressed;
- layer_sharing: which layers images share, and what a node pays to add one;
- judge: a probe's report judged against the image's labels;
- parity: a pair's twins alike except where they must differ.
"""
