"""The in-process serving engine (`serve.engine: local`): transformers `generate` on the
scenario's model, one request at a time, with a timestamp per generated token. The
default where no server is available; it produces the same raw records as the HTTP
client, so every serving metric is computed the same way."""

from __future__ import annotations

import time
from typing import Any

import torch

from backends.hf_common.model import build_model
from backends.hf_common.serving import local_device
from harness.data.tokenizer import load_tokenizer
from harness.provenance import cpu_name
from harness.serving.client import RequestRecord, arrival_delays
from harness.serving.engines import Engine
from harness.serving.prompts import build_prompts


class TokenClock:
    """A generate() streamer that stamps the arrival of every generated token."""

    def __init__(self, origin: float, record: RequestRecord) -> None:
        self.origin, self.record, self.prompt_seen = origin, record, False

    def put(self, value) -> None:
        if not self.prompt_seen:  # generate() first hands over the prompt
            self.prompt_seen = True
            return
        self.record.chunk_s.append(time.perf_counter() - self.origin)

    def end(self) -> None:
        pass


def serve_locally(scenario, events, origin: float) -> dict[str, Any]:
    spec = scenario.serve
    device = torch.device("cuda" if torch.cuda.is_available() else "cpu")
    model = build_model(scenario).to(device).eval()
    tok = scenario.data.tokenizer
    handle = load_tokenizer(tok.kind, tok.vocab_size, tok.path)
    prompts = build_prompts(scenario, spec.warmup_requests + spec.num_requests)
    warm = spec.warmup_requests
    delays = [0.0] * warm + arrival_delays(spec.num_requests, spec.load)
    records = []
    measured_start = None
    open_loop = spec.load.open_loop
    for index, (prompt, delay) in enumerate(zip(prompts, delays)):
        if index == warm:
            measured_start = time.perf_counter()
        arrival = None
        if measured_start is not None and open_loop:  # a request waits for its arrival time
            arrival = measured_start + delay
            time.sleep(max(0.0, arrival - time.perf_counter()))
        record = RequestRecord(index, index < warm, 0.0)
        # Open loop: the clock starts at the request's arrival, so the time it queued
        # behind earlier requests (one at a time here) is in its TTFT and E2EL, as a
        # server's queue would be. Closed loop: it is sent when the previous one ends.
        _generate(model, handle, prompt, spec, record, origin, device, arrival)
        records.append(record)
        if not record.warmup:
            events.emit("request", index=index, total=spec.num_requests, error=record.error)
    return {
        "requests": [r.to_json() for r in records],
        "server": {
            "engine": "transformers generate (in process)",
            "model": scenario.model.preset or scenario.model.path,
        },
        "accelerator": {
            "kind": device.type,
            "count": 1,
            "name": torch.cuda.get_device_name(0) if device.type == "cuda" else cpu_name(),
        },
        "versions": {"torch": torch.__version__, "transformers": __import__("transformers").__version__},
    }


@torch.no_grad()
def _generate(
    model,
    handle,
    prompt: dict[str, Any],
    spec,
    record: RequestRecord,
    origin: float,
    device,
    arrival: float | None = None,
) -> None:
    ids = ([handle.bos_id] if handle.bos_id is not None else []) + handle.encode(prompt["text"])
    length = prompt["output_tokens"]
    input_ids = torch.tensor([ids], device=device)
    record.sent_s = (arrival if arrival is not None else time.perf_counter()) - origin
    out = model.generate(
        input_ids=input_ids,
        attention_mask=torch.ones_like(input_ids),
        max_new_tokens=length,
        min_new_tokens=length if spec.force_output_length else None,
        do_sample=False,
        streamer=TokenClock(origin, record),
        pad_token_id=handle.pad_id,
        eos_token_id=handle.eos_id,
    )
    if device.type == "cuda":
        torch.cuda.synchronize()
    record.end_s = time.perf_counter() - origin
    record.prompt_tokens, record.output_tokens, record.status = len(ids), int(out.shape[1] - len(ids)), 200


ENGINE = Engine(
    "local",
    serve_locally,
    local_device,  # never asked: serve_locally reports the device it generated on
    notes=("local engine: one request at a time (transformers generate), per-token timestamps",),
)
