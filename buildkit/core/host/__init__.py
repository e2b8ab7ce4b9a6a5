"""The host room: what a host offers GPU containers, and what follows for an image.

Pure: the facts come in (from buildkit.adapters.host reading /sys, /proc, /dev and the CDI specs, and from the
engine); verdicts go out.

- facts: the host as the adapter read it (GPUs, drivers, device nodes, CDI specs, the engine);
- fit: whether an image's backend and arch list can use the host's GPUs (driver minimums, arch coverage);
- access: what a container needs to reach the GPUs (device nodes, groups, CDI names) and what keeps it from them;
- routing: one set of findings for `detect`, `doctor` and `run`, and the target that fits the host.
- kube: Kubernetes manifests for a pair's twins, each placed only on nodes whose GPUs it has code for.
"""
