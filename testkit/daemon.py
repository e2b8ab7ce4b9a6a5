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
    daemon: subprocess.Popen | None = None
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
        self.root = root = Path(f"/tmp/bk-engine-{tag}")  # short: unix socket paths are limited to 108 bytes
        root.mkdir()
        self.bridge = f"bk{tag}"  # interface names have at most 15 characters
        subprocess.run(["ip", "link", "add", self.bridge, "type", "bridge"], check=True)
        host_config = Path("/etc/docker/daemon.json")
        config = json.loads(host_config.read_text()) if host_config.is_file() else {}
        if self.classic:
            config["features"] = {**config.get("features", {}), "containerd-snapshotter": False}
        (root / "daemon.json").write_text(json.dumps(config))
        with open(self.log, "w") as log:  # the child keeps its own copy of the descriptor
            self.daemon = subprocess.Popen(
                ["dockerd", "--config-file", str(root / "daemon.json"), "--host", f"unix://{self.socket}",
                 "--data-root", str(root / "data"), "--exec-root", str(root / "exec"),
                 "--pidfile", str(root / "docker.pid"), "--bridge", self.bridge, "--iptables=false", "--ip-masq=false"],
                stdout=log, stderr=subprocess.STDOUT,
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
            self.context = f"bk-{tag}"
            subprocess.run([self.docker, "context", "create", self.context, "--docker", f"host=unix://{self.socket}"],
                           check=True, capture_output=True)
        return self

    def stop(self) -> None:
        """Stops the daemon and removes its folder. An engine that never started has nothing to stop: a test that
        fails before start() still calls stop() from its `finally`, and umount and rmtree must not get a path."""
        if self.root is None:
            return
        if self.daemon is not None and self.daemon.poll() is None:
            self.daemon.send_signal(signal.SIGTERM)
            self.daemon.wait(timeout=60)
        if self.context:
            subprocess.run([self.docker, "context", "rm", "-f", self.context], capture_output=True)
        subprocess.run(["umount", "-R", str(self.root)], capture_output=True)
        subprocess.run(["ip", "link", "del", self.bridge], capture_output=True)
        shutil.rmtree(self.root, ignore_errors=True)
        self.root = None
