"""Porting: the hipify preflight's pure side, what a CUDA tree needs before it runs on AMD GPUs.

A closed subsystem: it imports only itself and buildkit.errors, and only the hipify paths
(buildkit.adapters.hipify, buildkit.app.hipify_preflight and their view, buildkit.ui.hipify) import it
(tests/unit/test_layout.py).

- analysis: what will not port as it is (the static report) and the compile verdicts;
- preprocessor: which lines of a C/C++/HIP file a build compiles (#if branches under its macros);
- cuda_constants: what a name in CUDA code stands for (a warp mask's width, a block size), through macros;
- setup_py: the build flags a project's setup.py gives torch's extension build, read without running it;
- report: what one `buildkit hipify` run found, and whether the tree passed.
"""
