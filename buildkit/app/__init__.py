"""Use cases, one per module: each turns command-line choices into calls on the core and the adapters.

The vocabularies the command line offers are the core's, named here so the CLI's parser can list them
without restating them and without importing the use cases that load the docker SDK (buildkit.app.smoke,
buildkit.app.build).
"""

from buildkit.core.matrix.fields import CHANNELS, COMPRESSIONS, SELECTOR_KEYS
from buildkit.core.release.judge import GPU_MODES
from buildkit.core.targets.plan import ALL_VENDORS
from buildkit.core.vendors import VENDOR_NAMES

VENDOR_CHOICES = (*VENDOR_NAMES, ALL_VENDORS)

__all__ = ["ALL_VENDORS", "CHANNELS", "COMPRESSIONS", "GPU_MODES", "SELECTOR_KEYS", "VENDOR_CHOICES"]
