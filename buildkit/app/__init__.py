"""Use cases, one per module: each turns command-line choices into calls on the core and the adapters."""
