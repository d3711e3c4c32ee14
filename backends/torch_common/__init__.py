"""Pieces shared by the torch backends (torch, gpu-fsdp) that are not the model."""
