"""Code shared by the backends that run a transformers model (torch, gpu-fsdp, xla, torchax)."""
