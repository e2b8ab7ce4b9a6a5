"""Package indexes over HTTP, bounded.

PyTorch's wheel index pages (wheel_index), a project's files on any simple index (package_index), and a few
members of a remote wheel read by byte ranges (remote_wheel).
"""
