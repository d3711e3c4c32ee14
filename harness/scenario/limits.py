"""The numeric limits of a scenario's fields, shared by the core sections and every task's.

Each is generous (far beyond any run this harness is for) but finite: a value past it is
a typo or a unit mistake (`steps: 1e9`, `max_length: 5000000`), and would otherwise run
until the time limit, or exhaust memory, before saying anything.
"""

from __future__ import annotations

from typing import Annotated

from pydantic import Field

# A sweep larger than this is almost certainly a typo (and would take weeks).
MAX_RUNS = 1000
# Steps, windows: a million optimizer steps is weeks of pre-training, not a benchmark.
MAX_STEPS = 1_000_000
# Examples to generate or read: 10M synthetic chats would take hours to build alone.
MAX_EXAMPLES = 10_000_000
# Tokens in a sequence: 1M is the longest context any released model takes.
MAX_SEQUENCE = 1 << 20
# Rows per optimizer step (or micro-batch): 64k rows is more than the largest published
# pre-training batches (a few thousand rows of 4k tokens).
MAX_BATCH = 65_536
# Devices (and each parallel axis): a full TPU v5p pod is 8,960 chips.
MAX_DEVICES = 65_536
# A LoRA rank past the widest hidden size is no longer low-rank.
MAX_LORA_RANK = 16_384
# Vocabulary: the largest released tokenizers have ~262k entries.
MAX_VOCAB = 1 << 20
# Model shape fields (hidden, intermediate sizes; layers; heads; head_dim).
MAX_WIDTH = 1 << 18
MAX_LAYERS = 1024
MAX_HEADS = 4096
# Seeds: numpy accepts 0 .. 2**32 - 1 (a negative seed crashes it mid-run).
MAX_SEED = 2**32 - 1
# A learning rate past 10 (SGD included) diverges at the first step.
MAX_LR = 10.0
# Serving: requests, tokens, concurrency and rates a single benchmark can drive.
MAX_REQUESTS = 1_000_000
MAX_OUTPUT_TOKENS = 1 << 20
MAX_CONCURRENCY = 100_000
MAX_REQUEST_RATE = 1_000_000.0
# Seconds: a week, for run time limits, timeouts and SLO targets.
MAX_SECONDS = 7 * 24 * 3600.0
# $ per chip-hour: list prices are $0.05 to ~$15; $1000 is a misplaced decimal point.
MAX_USD_PER_CHIP_HOUR = 1000.0

Seed = Annotated[int, Field(ge=0, le=MAX_SEED)]
