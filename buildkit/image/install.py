"""torch's install inside an image build. It runs INSIDE the build: standard library only, no buildkit.

The rendered Dockerfile mounts this file from the build context (it never reaches a layer) and calls:

    python /buildkit/install.py check-backend cuda 13.0
        the same RUN that installed torch proves it is that backend's build: torch.version.cuda (or hip)
        names the target's backend version and the other backend is absent. A mislabelled or CPU wheel
        fails here, in seconds, not in the smoke test.

Each command exits non-zero with one line saying what is wrong; that line is what `buildkit build`
reports as the failing step's reason.
"""

import sys

USAGE = "usage: install.py check-backend cuda|rocm VERSION"


def check_backend(backend, version):
    """Exit with a message unless the installed torch is the `backend` `version` build (major.minor)."""
    try:
        import torch
    except Exception as error:  # a broken wheel or a missing library: say so, not a traceback
        sys.exit(f"torch does not import after its install: {type(error).__name__}: {error}")
    built = torch.version.cuda if backend == "cuda" else torch.version.hip
    other = torch.version.hip if backend == "cuda" else torch.version.cuda
    label = {"cuda": "CUDA", "rocm": "ROCm"}[backend]
    if other is None and ".".join((built or "").split(".")[:2]) == version:
        return
    sys.exit(f"torch {torch.__version__} is not a {label} {version} build "
             f"(torch.version.cuda={torch.version.cuda}, hip={torch.version.hip})")


def main(argv):
    if len(argv) == 3 and argv[0] == "check-backend" and argv[1] in ("cuda", "rocm"):
        check_backend(argv[1], argv[2])
        return
    sys.exit(USAGE)


if __name__ == "__main__":
    main(sys.argv[1:])
