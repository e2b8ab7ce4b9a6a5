"""Adapters: everything that touches the world (Docker engine, registry, host, hipify) behind small interfaces."""
