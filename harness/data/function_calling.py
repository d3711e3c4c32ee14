"""A deterministic generator of function-calling chat examples in the style of W1/W4.

Each example is what a JSONL line of the `messages` format holds: a developer turn that
lists the offered tool signatures, a user request, and the assistant's answer: one tool
call (`single`), one call chosen among many offered tools (`multiple`), several calls at
once (`parallel`), or a plain refusal when no offered tool applies (`irrelevance`: the
case that teaches a model not to invent tools). Seeded: the same seed gives the same
examples on every machine and backend.
"""

from __future__ import annotations

import json
import random
from dataclasses import dataclass
from typing import Any

# A fitness-tracker API like W1's. Each tool: parameter -> generator kind.
TOOLS: dict[str, dict[str, Any]] = {
    "get_body_battery_level": {"doc": "Body battery energy level (0-100) for a date.", "params": {"date": "date"}},
    "get_steps": {"doc": "Step count for a date.", "params": {"date": "date"}},
    "get_sleep_score": {"doc": "Sleep score and stages for the night before a date.", "params": {"date": "date"}},
    "get_heart_rate": {
        "doc": "Resting or maximum heart rate for a date.",
        "params": {"date": "date", "kind": "hr_kind"},
    },
    "get_stress_level": {"doc": "Average stress level for a date.", "params": {"date": "date"}},
    "get_calories_burned": {"doc": "Active and total calories for a date.", "params": {"date": "date"}},
    "get_vo2_max": {"doc": "Latest VO2 max estimate.", "params": {}},
    "log_workout": {
        "doc": "Record a workout.",
        "params": {"activity": "activity", "duration_min": "minutes", "date": "date"},
    },
    "log_water": {"doc": "Record water intake in millilitres.", "params": {"amount_ml": "ml"}},
    "set_daily_goal": {"doc": "Set a daily goal for a metric.", "params": {"metric": "metric", "value": "goal"}},
}

REQUESTS: dict[str, tuple[str, ...]] = {
    "get_body_battery_level": ("How much energy do I have {date}?", "What's my body battery {date}?"),
    "get_steps": ("How many steps did I walk {date}?", "Show my step count {date}."),
    "get_sleep_score": ("How well did I sleep {date}?", "Give me my sleep score {date}."),
    "get_heart_rate": ("What was my {kind} heart rate {date}?",),
    "get_stress_level": ("Was I stressed {date}?", "What's my stress level {date}?"),
    "get_calories_burned": ("How many calories did I burn {date}?",),
    "get_vo2_max": ("What's my VO2 max?", "How fit am I, VO2 max wise?"),
    "log_workout": (
        "Log a {duration_min} minute {activity} {date}.",
        "I did {activity} for {duration_min} minutes {date}, save it.",
    ),
    "log_water": ("I drank {amount_ml} ml of water.", "Add {amount_ml} ml to my water log."),
    "set_daily_goal": ("Set my daily {metric} goal to {value}.", "Change my {metric} target to {value} per day."),
}

# Requests no fitness tool can serve: the right answer is no call at all.
OFF_TOPIC = (
    "Book me a table for two tonight.",
    "What's the weather in Lisbon tomorrow?",
    "Translate 'good morning' into Japanese.",
    "Play some relaxing music.",
    "Order new running shoes in size 42.",
    "What's the capital of Australia?",
)

DEVELOPER_PROMPT = "You are a model that can do function calling with the following functions"
REFUSAL = "I can't help with that using the available tools."

_DATES = ("today", "yesterday", "on 2026-03-14", "on 2026-07-02", "last Monday", "on 2026-11-20")
_ACTIVITIES = ("running", "cycling", "swimming", "yoga", "strength training", "rowing")
_METRICS = ("steps", "water", "active minutes", "sleep hours")


@dataclass(frozen=True)
class Example:
    kind: str
    messages: tuple[dict[str, str], ...]
    tools: tuple[dict[str, Any], ...]

    def to_json(self) -> dict[str, Any]:
        return {"messages": list(self.messages), "tools": list(self.tools), "kind": self.kind}


def tool_schema(name: str) -> dict[str, Any]:
    """The tool's JSON-schema declaration, as listed in the developer turn."""
    params = TOOLS[name]["params"]
    props = {p: {"type": "integer" if kind in ("minutes", "ml", "goal") else "string"} for p, kind in params.items()}
    return {
        "name": name,
        "description": TOOLS[name]["doc"],
        "parameters": {"type": "object", "properties": props, "required": list(params)},
    }


def _value(kind: str, rng: random.Random) -> Any:
    choices = {
        "date": lambda: rng.choice(_DATES),
        "hr_kind": lambda: rng.choice(("resting", "maximum")),
        "activity": lambda: rng.choice(_ACTIVITIES),
        "minutes": lambda: rng.randrange(10, 120, 5),
        "ml": lambda: rng.randrange(100, 1500, 50),
        "metric": lambda: rng.choice(_METRICS),
        "goal": lambda: rng.randrange(1000, 15000, 500),
    }
    return choices[kind]()


def _call(name: str, rng: random.Random) -> tuple[str, str]:
    """(user phrase, assistant call text) for one call of `name`."""
    args = {p: _value(kind, rng) for p, kind in TOOLS[name]["params"].items()}
    phrase = rng.choice(REQUESTS[name]).format(**{k: v for k, v in args.items()})
    call_args = {k: (str(v).removeprefix("on ") if isinstance(v, str) else v) for k, v in args.items()}
    text = f"<start_function_call>call:{name}{json.dumps(call_args, separators=(',', ':'))}<end_function_call>"
    return phrase, text


def _example(kind: str, rng: random.Random) -> Example:
    names = list(TOOLS)
    offered = rng.sample(names, rng.randint(2, 3) if kind == "single" else rng.randint(5, len(names)))
    if kind == "irrelevance":
        user, answer = rng.choice(OFF_TOPIC), REFUSAL
    else:
        count = rng.randint(2, 3) if kind == "parallel" else 1
        calls = [_call(name, rng) for name in rng.sample(offered, count)]
        user = " Also, ".join(phrase for phrase, _ in calls)
        answer = "".join(text for _, text in calls)
    tools = tuple(tool_schema(n) for n in offered)
    developer = DEVELOPER_PROMPT + "\n" + "\n".join(json.dumps(t, separators=(",", ":")) for t in tools)
    messages = (
        {"role": "developer", "content": developer},
        {"role": "user", "content": user},
        {"role": "assistant", "content": answer},
    )
    return Example(kind, messages, tools)


def generate(num_examples: int, seed: int, mix: dict[str, float]) -> list[Example]:
    """`num_examples` examples whose kinds follow `mix`, the same for a given seed."""
    rng = random.Random(seed)
    kinds = [k for k, w in mix.items() if w > 0]
    if not kinds:
        raise ValueError("data.mix: every share is zero")
    weights = [mix[k] for k in kinds]
    return [_example(rng.choices(kinds, weights)[0], rng) for _ in range(num_examples)]
