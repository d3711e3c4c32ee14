"""Which batched decoding should the local engine use? Answer: docs/measurements/serving.md, "The local serving engine".
Which batched decoding the local serving engine should use where it runs: tiny Gemma 3
(scenarios/tiny.yaml's model, fp32, KV cache on), 8 requests of 32 output tokens after
prompts of PROMPT tokens, greedy, forced length. Wall time of each way, best of REPEATS
once warm (each way warmed once first):

- `generate_batch`: transformers' continuous batching (paged cache, its own scheduler);
- one at a time: eight `generate` calls;
- one padded batch: the eight left-padded into one `generate` call (what the local
  engine does with the requests in flight);
- the local engine itself at concurrency 8 (closed loop, its own timestamps): output
  tokens/s over the measured span.

    python benchmarks/probes/local_engine_batching.py [--prompt 256] [--repeats 3] [--threads 1]

Prints one JSON document (seconds; tokens/s).
"""

from __future__ import annotations

import argparse
import json
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT))

REQUESTS, OUTPUT = 8, 32


def scenario(prompt_words: int, concurrency: int):
    from harness.scenario.loader import document_from_text, validate

    doc = document_from_text((ROOT / "scenarios" / "tiny.yaml").read_text(), "tiny.yaml")
    doc["tasks"] = ["serve"]
    doc["serve"] = {
        "engine": "local",
        "precision": "fp32",
        "prompts": {"source": "synthetic", "input_words": prompt_words},
        "output_tokens": OUTPUT,
        "num_requests": REQUESTS,
        "warmup_requests": 1,
        "load": {"concurrency": concurrency},
    }
    return validate(doc, "tiny.yaml")


def best(fn, repeats: int) -> float:
    fn()  # warm
    times = []
    for _ in range(repeats):
        start = time.perf_counter()
        fn()
        times.append(time.perf_counter() - start)
    return min(times)


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--prompt", type=int, default=256, help="prompt length in tokens")
    parser.add_argument("--repeats", type=int, default=3)
    parser.add_argument("--threads", type=int, default=None, help="torch intra-op threads (default: torch's)")
    args = parser.parse_args()

    import torch

    if args.threads:
        torch.set_num_threads(args.threads)
    import transformers
    from transformers import GenerationConfig

    from backends.torch_eager.serve_local import load_model, serve_locally

    torch.manual_seed(0)
    sc = scenario(args.prompt, REQUESTS)
    model = load_model(sc, torch.device("cpu"), torch.float32)
    prompts = [torch.randint(10, 8000, (args.prompt,)).tolist() for _ in range(REQUESTS)]
    fixed = dict(max_new_tokens=OUTPUT, min_new_tokens=OUTPUT, do_sample=False, use_cache=True, pad_token_id=0)

    @torch.no_grad()
    def one_at_a_time():
        for ids in prompts:
            x = torch.tensor([ids])
            model.generate(input_ids=x, attention_mask=torch.ones_like(x), **fixed)

    @torch.no_grad()
    def padded_batch():
        x = torch.tensor(prompts)  # equal lengths: no padding needed, the same call shape
        model.generate(input_ids=x, attention_mask=torch.ones_like(x), **fixed)

    @torch.no_grad()
    def continuous():
        config = GenerationConfig(max_new_tokens=OUTPUT, do_sample=False, eos_token_id=-1, pad_token_id=0)
        model.generate_batch(inputs=prompts, generation_config=config)

    out = {
        "machine": "cpu-2c (shared)",
        "torch": torch.__version__,
        "threads": torch.get_num_threads(),
        "transformers": transformers.__version__,
        "requests": REQUESTS,
        "output_tokens": OUTPUT,
        "prompt_tokens": args.prompt,
        "one_at_a_time_s": best(one_at_a_time, args.repeats),
        "padded_batch_s": best(padded_batch, args.repeats),
    }
    try:
        out["generate_batch_s"] = best(continuous, args.repeats)
    except Exception as exc:  # noqa: BLE001 - reported, not hidden: the comparison says it failed
        out["generate_batch_s"] = None
        out["generate_batch_error"] = f"{type(exc).__name__}: {exc}"[:300]
    for concurrency in (1, REQUESTS):
        facts = serve_locally(scenario(args.prompt, concurrency), _Quiet(), time.perf_counter())
        measured = [r for r in facts["requests"] if not r["warmup"]]
        span = max(r["end_s"] for r in measured) - min(r["sent_s"] for r in measured)
        out[f"local_engine_c{concurrency}_output_tok_s"] = sum(r["output_tokens"] for r in measured) / span
    print(json.dumps(out, indent=1))


class _Quiet:
    def emit(self, *args, **kwargs) -> None:
        pass


if __name__ == "__main__":
    main()
