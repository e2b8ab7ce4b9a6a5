"""buildkit: matched NVIDIA CUDA and AMD ROCm PyTorch images from one TOML matrix."""

__version__ = "0.1.0"
