"""`bench cost --speedup X --a FLEET --b FLEET`: what a speed-up means in money."""

from __future__ import annotations

import json

from harness.commands.common import PRICES_HELP


def add_parser(sub) -> None:
    cost = sub.add_parser("cost", help="what a speed-up means in money: cost ratio, price ratio, sensitivity")
    cost.add_argument("--speedup", type=float, required=True, help="how many times faster a is than b")
    cost.add_argument("--a", required=True, help="ACCELERATOR:CHIPS or TPU slice, e.g. v5p-8")
    cost.add_argument("--b", required=True, help="ACCELERATOR:CHIPS, e.g. h100-sxm:2")
    cost.add_argument("--prices", help=PRICES_HELP)
    cost.add_argument("--json", action="store_true")


def run(args) -> int:
    from rich.console import Console

    from harness.figures.cost import check_speedup, cost_ratio, cost_statement, load_catalog, parse_fleet, sensitivity

    check_speedup(args.speedup)
    catalog = load_catalog(args.prices)
    a, b = parse_fleet(args.a, catalog, "--a"), parse_fleet(args.b, catalog, "--b")
    result = cost_ratio(args.speedup, a, b, catalog)
    rows = sensitivity(args.speedup, a, b, catalog)
    if args.json:
        print(json.dumps({**result, "sensitivity": rows}, indent=1))
        return 0
    console = Console()
    console.print(cost_statement(result))
    for p in result["prices"]:
        console.print(
            f"  price {p['accelerator']}: ${p['usd_per_chip_hour']}/chip-h ({p['pricing']}; {p['source']}, {p['date']})"
        )
    console.print(_sensitivity_table(a, b, rows))
    return 0


def _sensitivity_table(a, b, rows: list[dict]):
    from rich.table import Table

    table = Table(title="cost ratio (a/b) as one side's price varies")
    for column in ("price x", f"{a} price scaled", f"{b} price scaled"):
        table.add_column(column, justify="right")
    for row in rows:
        table.add_row(
            f"{row['price_factor']:.2f}",
            f"{row['cost_ratio_if_a_price_scaled']:.3f}",
            f"{row['cost_ratio_if_b_price_scaled']:.3f}",
        )
    return table
