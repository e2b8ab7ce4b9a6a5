"""A second, throwaway dockerd for tests: its own socket, data and exec folders, and a bridge of its own (a
daemon started with `--bridge none` takes the host's docker0 with it when it stops). The local base image is
loaded into it, so it starts with an empty build cache and nothing else, as a fresh CI runner or a remote
builder does (a puller may start with no image at all). A docker context names it, so buildkit can build there with `--builder CONTEXT`. It takes the
host engine's configuration (/etc/docker/daemon.json); `classic` turns the containerd image store off in it,
as on an engine before Docker 29 that never turned it on."""

from __future__ import annotations

import json
import os
import shutil
import signal
import subprocess
import time
import uuid
from dataclasses import dataclass
from pathlib import Path


@dataclass
class SpareEngine:
    docker: str  # the docker CLI
    log: Path
    root: Path | None = None  # set by start(): the engine's own folder, which stop() removes
    bridge: str = ""
    context: str = ""
    daemon: subprocess.Popen[bytes] | None = None
    classic: bool = False  # the classic image store (graph drivers), not containerd's

    @property
    def socket(self) -> Path:
        if self.root is None:
            raise RuntimeError("the spare dockerd has not been started")
        return self.root / "docker.sock"

    @property
    def env(self) -> dict[str, str]:
        """The environment of a process that talks to this engine (DOCKER_HOST)."""
        return {**os.environ, "DOCKER_HOST": f"unix://{self.socket}", "BUILDKIT_DOCKER": self.docker}

    def start(self, *base_images: str, context: bool = False) -> SpareEngine:
        tag = uuid.uuid4().hex[:8]
        self.root = root = Path(f"{FOLDER_PREFIX}{tag}")
        root.mkdir()
        self.bridge = _bridge(tag)
        subprocess.run(["ip", "link", "add", self.bridge, "type", "bridge"], check=True)
        host_config = Path("/etc/docker/daemon.json")
        config = json.loads(host_config.read_text()) if host_config.is_file() else {}
        if self.classic:
            config["features"] = {**config.get("features", {}), "containerd-snapshotter": False}
        (root / "daemon.json").write_text(json.dumps(config))
        with open(self.log, "w") as log:  # the child keeps its own copy of the descriptor
            self.daemon = subprocess.Popen(
                [
                    "dockerd",
                    "--config-file",
                    str(root / "daemon.json"),
                    "--host",
                    f"unix://{self.socket}",
                    "--data-root",
                    str(root / "data"),
                    "--exec-root",
                    str(root / "exec"),
                    "--pidfile",
                    str(root / "docker.pid"),
                    "--bridge",
                    self.bridge,
                    "--iptables=false",
                    "--ip-masq=false",
                ],
                stdout=log,
                stderr=subprocess.STDOUT,
            )
        deadline = time.monotonic() + 60
        while subprocess.run([self.docker, "info"], env=self.env, capture_output=True).returncode != 0:
            if time.monotonic() > deadline:
                self.stop()
                raise RuntimeError("the spare dockerd did not start: " + self.log.read_text()[-2000:])
            time.sleep(0.5)
        for base_image in base_images:
            save = subprocess.Popen([self.docker, "save", base_image], stdout=subprocess.PIPE)
            subprocess.run([self.docker, "load"], stdin=save.stdout, env=self.env, check=True, capture_output=True)
            save.wait()
        if context:
            self.context = _context(tag)
            subprocess.run([self.docker, "context", "create", self.context, "--docker", f"host=unix://{self.socket}"], check=True, capture_output=True)
        return self

    def stop(self) -> None:
        """Stops the daemon and removes its folder. An engine that never started has nothing to stop: a test that
        fails before start() still calls stop() from its `finally`, and umount and rmtree must not get a path."""
        if self.root is None:
            return
        if self.daemon is not None and self.daemon.poll() is None:
            self.daemon.send_signal(signal.SIGTERM)
            self.daemon.wait(timeout=60)
        _remove(self.docker, self.root, self.bridge, self.context)
        self.root = None


FOLDER_PREFIX = "/tmp/bk-engine-"  # short: unix socket paths are limited to 108 bytes


def _bridge(tag: str) -> str:
    return f"bk{tag}"  # interface names have at most 15 characters


def _context(tag: str) -> str:
    return f"bk-{tag}"


def _remove(docker: str, root: Path, bridge: str, context: str) -> None:
    """An engine's docker context, what is mounted in its folder (deepest first: its network namespace, and its
    containers' and builds' file systems where its daemon was killed), its bridge and its folder."""
    if context:
        subprocess.run([docker, "context", "rm", "-f", context], capture_output=True)
    below = [fields[1] for fields in map(str.split, Path("/proc/self/mounts").read_text().splitlines()) if fields[1].startswith(f"{root}/")]
    for point in sorted(below, key=len, reverse=True):
        subprocess.run(["umount", "--lazy", point], capture_output=True)
    subprocess.run(["ip", "link", "del", bridge], capture_output=True)
    shutil.rmtree(root, ignore_errors=True)


def remove_abandoned(docker: str) -> list[Path]:
    """Removes the spare engines whose daemon is gone (a test session killed before its stop()), and returns
    their folders; those of a session running now stay."""
    removed = []
    for root in Path(FOLDER_PREFIX).parent.glob(f"{Path(FOLDER_PREFIX).name}*"):
        try:
            os.kill(int((root / "docker.pid").read_text().strip()), 0)
            continue  # its daemon runs
        except (OSError, ValueError):
            pass
        tag = root.name.removeprefix(Path(FOLDER_PREFIX).name)
        _remove(docker, root, _bridge(tag), _context(tag))
        removed.append(root)
    return removed
