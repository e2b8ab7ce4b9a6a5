"""Use cases, one per module: each turns command-line choices into calls on the core and the adapters."""

# The smoke test's --gpu modes, here so the CLI's parser offers them without importing the use cases that
# load the docker SDK (buildkit.app.smoke, buildkit.app.build).
from buildkit.core.judge import GPU_MODES

__all__ = ["GPU_MODES"]
