"""The serving benchmark: prompts, a streaming load client, servers the harness launches,
and the worker-side driver. Latency metrics are computed by `harness.figures.metrics`."""
