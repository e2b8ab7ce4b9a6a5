"""The container engine, through the docker SDK and the docker CLI.

The docker SDK (docker_sdk), BuildKit through buildx (buildx), one container run under a deadline (containers), the
smoke-test probe run in an image (probe_runner), and the images this machine has already proven (proven).
"""
