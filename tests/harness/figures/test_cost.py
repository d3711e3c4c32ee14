"""Cost: by hand from a record, every figure with its price source, and W3's ratio."""

from __future__ import annotations

import json
import shutil
import subprocess
import sys

import pytest

from harness.basics.errors import SpecError
from harness.figures.accelerators import catalog_key, chips_in_slice
from harness.figures.cost import (
    Fleet,
    Price,
    cost_ratio,
    cost_statement,
    fine_tune_cost,
    load_catalog,
    parse_fleet,
    price_for,
    scaled_cost_ratios,
    sensitivity,
    serving_cost,
    training_cost,
    workload_cost,
)
from harness.scenario.spec import CostSpec

from conftest import bench
from records import make_record


def test_record_cost_recomputes_by_hand():
    record = make_record([0.5] * 4, kind="tpu", device="TPU v5 lite", catalog_key="tpu-v5e", chips=8)
    cost, m = record["cost"], record["metrics"]
    assert cost["usd_run"] == pytest.approx(8 * m["run_time_s"] / 3600 * 1.20)
    assert cost["usd_steady_state"] == pytest.approx(8 * 2.0 / 3600 * 1.20)
    assert cost["usd_per_1m_tokens_real"] == pytest.approx(8 * 1.20 / 3600 / m["tokens_per_s_real"] * 1e6)
    assert cost["price"]["source"] and cost["price"]["date"] and cost["price"]["pricing"] == "on_demand"


def test_scenario_prices_override_the_catalog_and_say_so():
    spec = CostSpec.model_validate(
        {"prices": {"h100-sxm": {"usd_per_chip_hour": 2.5, "source": "our contract", "date": "2026-10"}}}
    )
    price = price_for("h100-sxm", spec, load_catalog())
    assert (price.usd_per_chip_hour, price.pricing, price.source) == (2.5, "custom", "our contract")
    assert (
        price_for("tpu-v6e", CostSpec(pricing="spot"), load_catalog()).usd_per_chip_hour
        == load_catalog()["tpu-v6e"]["spot"]
    )
    assert training_cost({"run_time_s": 1, "measured_time_s": 1, "tokens_per_s_real": 1}, 1, None) is None


def test_chip_counting_lives_in_one_place():
    assert chips_in_slice("v5p-8") == 4 and chips_in_slice("v4-8") == 4
    assert chips_in_slice("v5litepod-8") == 8 and chips_in_slice("v6e-8") == 8
    assert catalog_key("tpu", "TPU v5 lite") == "tpu-v5e" and catalog_key("cuda", "NVIDIA H100 80GB HBM3") == "h100-sxm"
    assert catalog_key("cuda", "NVIDIA H100 PCIe") == "h100-pcie"
    assert parse_fleet("v5p-8").chips == 4 and parse_fleet("h100-sxm:2").chips == 2


def test_w3_published_training_ratio_reproduces_at_w3s_prices(tmp_path):
    """W3: TPU v5p-8 1.61x faster than 2x H100 -> 2.12x cheaper at the ~$11/GPU-hour H100
    price it assumed; at the catalog's current GCP us-central1 price (~$5.38) the same
    speed-up is only ~1.03x cheaper (metrics.md): the price decides the answer."""
    prices = tmp_path / "w3-prices.yaml"
    prices.write_text(
        'h100-sxm: {on_demand: 11.06, source: "W3\'s assumed H100 price (GCP A3, other regions)", date: "2025"}\n'
    )
    result = cost_ratio(1.61, parse_fleet("v5p-8"), parse_fleet("h100-sxm:2"), load_catalog(prices))
    assert result["price_ratio"] == pytest.approx((4 * 4.20) / (2 * 11.06))
    assert 1 / result["cost_ratio"] == pytest.approx(2.12, abs=0.01)
    current = cost_ratio(1.61, parse_fleet("v5p-8"), parse_fleet("h100-sxm:2"), load_catalog())
    catalog = load_catalog()
    assert current["price_ratio"] == pytest.approx(
        (4 * catalog["tpu-v5p"]["on_demand"]) / (2 * catalog["h100-sxm"]["on_demand"])
    )
    assert 1 / current["cost_ratio"] == pytest.approx(1.03, abs=0.01)
    done = bench("cost", "--speedup", "1.61", "--a", "v5p-8", "--b", "h100-sxm:2", "--prices", str(prices))
    assert done.returncode == 0
    text = " ".join(done.stdout.split())
    assert "2.12x cheaper" in text and "price ratio 0.759" in text


def test_workload_cost_is_the_weighted_sum():
    assert workload_cost(train_usd=10.0, fine_tunes=2, serve_usd_per_1m_tokens=0.5, served_tokens_millions=100) == 70.0


def test_pytest_benchmark_compare_reads_our_export(tmp_path):
    results = tmp_path / "r"
    results.mkdir()
    for i, median in enumerate((0.5, 0.6)):
        (results / f"{i}.json").write_text(json.dumps(make_record([median] * 5, repeat=i)))
    out = tmp_path / "export.json"
    assert bench("export", str(results), "-o", str(out)).returncode == 0
    document = json.loads(out.read_text())
    assert [b["stats"]["median"] for b in document["benchmarks"]] == [0.5, 0.6]
    tool = shutil.which("pytest-benchmark", path=str(__import__("pathlib").Path(sys.executable).parent))
    assert tool, "pytest-benchmark's CLI is installed with the test extra"
    done = subprocess.run([tool, "compare", str(out)], capture_output=True, text=True)
    assert done.returncode == 0 and "tiny[default-torch-cpu-r0]" in done.stdout, done.stderr


# Device names exactly as the runtimes report them (torch.cuda.get_device_name, JAX's
# device_kind, TPU_ACCELERATOR_TYPE slices) -> catalog key; None: unknown.
DEVICE_NAMES = [
    ("cuda", "NVIDIA H100 80GB HBM3", "h100-sxm"),
    ("cuda", "NVIDIA H100 PCIe", "h100-pcie"),
    ("cuda", "NVIDIA H100 NVL", "h100-nvl"),
    ("cuda", "NVIDIA H200", "h200"),
    ("cuda", "NVIDIA GH200 480GB", "gh200"),
    ("cuda", "NVIDIA L40S", "l40s"),
    ("cuda", "NVIDIA L40", "l40"),
    ("cuda", "NVIDIA L4", "l4"),
    ("cuda", "NVIDIA A100-SXM4-80GB", "a100-80gb"),
    ("cuda", "NVIDIA A100-SXM4-40GB", "a100-40gb"),
    ("cuda", "NVIDIA B200", "b200"),
    ("cuda", "NVIDIA GeForce RTX 4090", None),
    ("cuda", "NVIDIA H800", None),
    ("tpu", "TPU v4", "tpu-v4"),
    ("tpu", "TPU v5 lite", "tpu-v5e"),
    ("tpu", "TPU v5", "tpu-v5p"),
    ("tpu", "TPU v5p", "tpu-v5p"),
    ("tpu", "TPU v6 lite", "tpu-v6e"),
    ("tpu", "TPU7x", "tpu-7x"),
    ("tpu", "v5litepod-8", "tpu-v5e"),
    ("tpu", "v5p-8", "tpu-v5p"),
    ("tpu", "TPU v9 hyper", None),
]


@pytest.mark.parametrize("kind,name,key", DEVICE_NAMES)
def test_device_names_map_to_their_own_catalog_key_or_none(kind, name, key):
    from harness.figures.accelerators import PEAK_BF16_FLOPS, catalog_key, identify

    assert identify(kind, name) == key
    if key is None:  # unknown: no peak and no price, never a neighbour's
        unknown = catalog_key(kind, name)
        assert unknown == f"{kind}-unknown" and unknown not in PEAK_BF16_FLOPS
        assert price_for(unknown, CostSpec(), load_catalog()) is None


def test_a_run_on_an_unknown_device_gets_no_mfu_no_price_and_a_warning():
    from harness.figures.metrics import FlopsModel, training_metrics
    from harness.records.record import accelerator_from

    acc = accelerator_from({"accelerator": {"kind": "cuda", "name": "NVIDIA H800", "count": 1}}, None)
    assert acc["catalog_key"] == "cuda-unknown" and "NVIDIA H800" in acc["warning"]
    raw = {
        "loop": {
            "steps": [
                {
                    "phase": "measure",
                    "time_s": 1.0,
                    "tokens_real": 10,
                    "tokens_padded": 10,
                    "seq_len": 8,
                    "num_compiles": 0,
                    "compile_s": 0.0,
                    "loss": 1.0,
                    "row_tokens": [10],
                }
            ],
            "window": None,
        },
        "memory": {},
    }
    arch = {
        "vocab_size": 10,
        "hidden_size": 4,
        "intermediate_size": 8,
        "num_layers": 1,
        "num_heads": 1,
        "num_kv_heads": 1,
        "head_dim": 4,
    }
    metrics = training_metrics(raw, acc, FlopsModel(arch, lora=False, adapter_params=0))
    assert metrics["mfu"] is None and metrics["model_tflops_per_s"] > 0


@pytest.mark.parametrize(
    "text, message",
    [
        ("v5p-7", "2 per chip"),  # TensorCores: 7 is 3.5 chips, not 3
        ("v4-1", "2 per chip"),
        ("h100:2", "known: "),
        ("v9-8", "unknown accelerator 'v9-8'"),
        ("h100-sxm:0", "chip count"),
        ("h100-sxm:99999999", "chip count"),
    ],
)
def test_a_fleet_that_is_not_one_is_refused(text, message):
    with pytest.raises(SpecError, match=message):
        parse_fleet(text, load_catalog(), "--a")


@pytest.mark.parametrize("speedup", [0, -1.0, float("nan"), float("inf")])
def test_a_speedup_must_be_positive_and_finite(speedup):
    with pytest.raises(SpecError, match="--speedup"):
        cost_ratio(speedup, parse_fleet("v5p-8"), parse_fleet("h100-sxm:2"), load_catalog())


@pytest.fixture
def round_prices(tmp_path):
    """Round prices laid over the catalog, so every figure below is checkable by hand."""
    path = tmp_path / "prices.yaml"
    path.write_text(
        'tpu-v5p: {on_demand: 4.0, spot: 1.0, source: "test", date: "2026-11"}\n'
        'h100-sxm: {on_demand: 3.0, spot: 2.0, source: "test", date: "2026-11"}\n'
    )
    return load_catalog(path)


@pytest.mark.parametrize("b_chips, break_even", [(1, 10.0), (2, 5.0), (4, 2.5)])
def test_break_even_is_the_b_chip_price_at_which_a_job_costs_the_same(round_prices, b_chips, break_even):
    """4 v5p chips at $4 = $16/h run a job in T; b's chips at price p take 1.6 T, so the
    same cost needs b_chips x p x 1.6 = 16: p = 10 / b_chips. Priced at it, the ratio is 1."""
    b = parse_fleet(f"h100-sxm:{b_chips}")
    result = cost_ratio(1.6, parse_fleet("v5p-8"), b, round_prices)
    assert result["break_even_usd_per_chip_hour_b"] == pytest.approx(break_even)
    assert result["usd_per_hour_a"] == 16.0 and result["usd_per_hour_b"] == pytest.approx(3.0 * b_chips)
    assert result["price_ratio"] == pytest.approx(16.0 / (3.0 * b_chips))
    assert result["cost_ratio"] == pytest.approx(16.0 / (1.6 * 3.0 * b_chips))
    at_break_even = {**round_prices, "h100-sxm": {**round_prices["h100-sxm"], "on_demand": break_even}}
    assert cost_ratio(1.6, parse_fleet("v5p-8"), b, at_break_even)["cost_ratio"] == pytest.approx(1.0)


def test_bench_cost_prints_the_break_even_for_side_bs_chip_count(tmp_path):
    prices = tmp_path / "p.yaml"
    prices.write_text(
        'tpu-v5p: {on_demand: 4.0, source: "test", date: "2026-11"}\n'
        'h100-sxm: {on_demand: 3.0, source: "test", date: "2026-11"}\n'
    )
    done = bench("cost", "--speedup", "1.6", "--a", "v5p-8", "--b", "h100-sxm:4", "--prices", str(prices))
    assert done.returncode == 0, done.stderr
    text = " ".join(done.stdout.split())
    assert "Break-even: h100-sxm at $2.50/chip-hour." in text  # 16 / 1.6 / 4 chips


def test_cost_statement_reads_the_ratio_both_ways(round_prices):
    dearer = cost_ratio(1.6, parse_fleet("v5p-8"), parse_fleet("h100-sxm:2"), round_prices)
    assert cost_statement(dearer) == (
        "4x tpu-v5p is 1.60x faster than 2x h100-sxm; at $16.00/h vs $6.00/h (price ratio 2.667) a job costs "
        "1.667x as much on 4x tpu-v5p: 1.67x dearer. Break-even: h100-sxm at $5.00/chip-hour."
    )
    cheaper = cost_ratio(4.0, parse_fleet("v5p-8"), parse_fleet("h100-sxm:2"), round_prices)  # 16 / (4 x 6)
    assert cheaper["cost_ratio"] == pytest.approx(2 / 3)
    assert "costs 0.667x as much on 4x tpu-v5p: 1.50x cheaper." in cost_statement(cheaper)
    parity = cost_ratio(16 / 6, parse_fleet("v5p-8"), parse_fleet("h100-sxm:2"), round_prices)
    assert parity["cost_ratio"] == 1.0 and "costs 1.000x as much on 4x tpu-v5p: 1.00x dearer." in cost_statement(parity)
    assert dearer["a"] == "4x tpu-v5p" and dearer["b"] == "2x h100-sxm" and dearer["speedup"] == 1.6
    assert [p["usd_per_chip_hour"] for p in dearer["prices"]] == [4.0, 3.0]


def test_cost_ratio_scales_each_sides_price_by_its_factor(round_prices):
    a, b = parse_fleet("v5p-8"), parse_fleet("h100-sxm:2")
    scaled = cost_ratio(2.0, a, b, round_prices, factors=(1.5, 0.5))
    assert (scaled["usd_per_hour_a"], scaled["usd_per_hour_b"]) == (24.0, 3.0)
    assert scaled["cost_ratio"] == pytest.approx(24.0 / 3.0 / 2.0)
    assert scaled["break_even_usd_per_chip_hour_b"] == pytest.approx(24.0 / 2.0 / 2)


def test_spot_pricing_and_scenario_prices_reach_the_ratio(round_prices):
    a, b = parse_fleet("v5p-8"), parse_fleet("h100-sxm:2")
    spot = cost_ratio(1.0, a, b, round_prices, CostSpec(pricing="spot"))
    assert (spot["usd_per_hour_a"], spot["usd_per_hour_b"]) == (4.0, 4.0)
    assert spot["prices"][0]["pricing"] == "spot"
    own = CostSpec.model_validate({"prices": {"h100-sxm": {"usd_per_chip_hour": 8.0, "source": "s", "date": "d"}}})
    assert cost_ratio(1.0, a, b, round_prices, own)["usd_per_hour_b"] == 16.0


def test_sensitivity_scales_one_sides_price_at_a_time(round_prices):
    """cost a/b is linear in a's price and inverse in b's: recomputed with each price scaled."""
    a, b = parse_fleet("v5p-8"), parse_fleet("h100-sxm:2")
    rows = sensitivity(1.6, a, b, round_prices)
    assert [r["price_factor"] for r in rows] == [0.5, 0.75, 1.0, 1.25, 1.5]
    for r in rows:
        f = r["price_factor"]
        assert r["cost_ratio_if_a_price_scaled"] == pytest.approx(4 * 4.0 * f / (1.6 * 2 * 3.0))
        assert r["cost_ratio_if_b_price_scaled"] == pytest.approx(4 * 4.0 / (1.6 * 2 * 3.0 * f))
    assert scaled_cost_ratios(2.0, (2.0,)) == [(2.0, 4.0, 1.0)]


def test_an_unpriced_accelerator_is_refused_naming_the_priced_ones(round_prices):
    catalog = {"h100-sxm": round_prices["h100-sxm"], "l4": {"on_demand": None, "spot": 0.2, "source": "s", "date": "d"}}
    with pytest.raises(SpecError) as err:
        cost_ratio(1.0, parse_fleet("tpu-v5p:1"), parse_fleet("h100-sxm:1"), catalog)
    assert str(err.value) == "prices: tpu-v5p: no price in the catalog (priced: h100-sxm); give one with --prices"
    with pytest.raises(SpecError, match=r"priced: h100-sxm, l4\)"):
        cost_ratio(1.0, parse_fleet("tpu-v5p:1"), parse_fleet("h100-sxm:1"), catalog, CostSpec(pricing="spot"))


def test_training_cost_every_figure_by_hand():
    """chips x seconds / 3600 x $/chip-hour for each span; $/1M tokens at each rate."""
    figures = {
        "run_time_s": 7200.0,
        "setup_time_s": 360.0,
        "warmup_time_s": 36.0,
        "steady_time_s": 1800.0,
        "measured_time_s": 2000.0,
        "tokens_per_s_real": 500.0,
        "tokens_per_s_real_effective": 400.0,
        "window_tokens_per_s_real": 600.0,
    }
    price = Price("h100-sxm", 3.0, "on_demand", "src", "2026-11")
    cost = training_cost(figures, 2, price)
    assert {k: v for k, v in cost.items() if k not in ("chips", "price")} == pytest.approx(
        {
            "usd_run": 2 * 2 * 3.0,
            "usd_setup": 2 * 0.1 * 3.0,
            "usd_warmup": 2 * 0.01 * 3.0,
            "usd_steady_state": 2 * 0.5 * 3.0,
            "usd_per_1m_tokens_real": 2 * (1e6 / 500 / 3600) * 3.0,
            "usd_per_1m_tokens_real_effective": 2 * (1e6 / 400 / 3600) * 3.0,
            "usd_per_1m_tokens_real_window": 2 * (1e6 / 600 / 3600) * 3.0,
        },
        rel=1e-12,
    )
    assert cost.pop("chips") == 2 and cost.pop("price") == {
        "accelerator": "h100-sxm",
        "usd_per_chip_hour": 3.0,
        "pricing": "on_demand",
        "source": "src",
        "date": "2026-11",
    }
    older = {k: v for k, v in figures.items() if k != "steady_time_s"}  # a record from before steady_time_s
    older.update(
        setup_time_s=None, tokens_per_s_real=None, tokens_per_s_real_effective=0.0, window_tokens_per_s_real=None
    )
    cost = training_cost(older, 2, price)
    assert cost["usd_steady_state"] == pytest.approx(2 * 2000 / 3600 * 3.0) and cost["usd_setup"] == 0.0
    assert cost["usd_per_1m_tokens_real"] is None and cost["usd_per_1m_tokens_real_effective"] is None
    assert cost["usd_per_1m_tokens_real_window"] is None  # no window run


def test_serving_cost_by_hand():
    price = Price("l4", 0.72, "spot", "src", "2026-11")
    cost = serving_cost({"output_throughput_tok_s": 250.0, "duration_s": 90.0}, 4, price)
    assert cost["usd_per_1m_output_tokens"] == pytest.approx(4 * (1e6 / 250 / 3600) * 0.72, rel=1e-12)
    assert cost["usd_benchmark"] == pytest.approx(4 * 90 / 3600 * 0.72)
    assert cost["chips"] == 4 and cost["price"]["pricing"] == "spot"
    assert serving_cost({"output_throughput_tok_s": 0.0, "duration_s": 9.0}, 1, price) is None
    assert serving_cost({"output_throughput_tok_s": 5.0, "duration_s": 9.0}, 1, None) is None


def test_fine_tune_cost_is_tokens_at_the_window_else_steady_rate_plus_setup_and_warmup():
    from types import SimpleNamespace

    cost = SimpleNamespace(usd_per_1m_tokens_real=2.0, usd_setup=0.5, usd_warmup=0.25)
    assert fine_tune_cost(cost, 3.0) == pytest.approx(2.0 * 3.0 + 0.5 + 0.25)
    # The window's rate, where measured, is the one a fine-tune pays (the headline).
    windowed = SimpleNamespace(
        usd_per_1m_tokens_real_window=1.5, usd_per_1m_tokens_real=2.0, usd_setup=0.5, usd_warmup=0
    )
    assert fine_tune_cost(windowed, 3.0) == pytest.approx(1.5 * 3.0 + 0.5)
    assert fine_tune_cost(None, 3.0) is None
    assert fine_tune_cost(SimpleNamespace(usd_per_1m_tokens_real=None, usd_setup=0.5, usd_warmup=0.0), 3.0) is None
    assert fine_tune_cost(SimpleNamespace(usd_per_1m_tokens_real=2.0, usd_setup=None, usd_warmup=0.0), 3.0) is None


def test_workload_cost_weights_each_part():
    assert workload_cost(train_usd=3.0, fine_tunes=4, serve_usd_per_1m_tokens=0.25, served_tokens_millions=8) == 14.0


def test_a_prices_file_lays_entries_over_the_catalog(tmp_path):
    path = tmp_path / "p.yaml"
    path.write_text(
        'h100-sxm: {on_demand: 9.5, source: "mine", date: "2026"}\nnew-chip: {spot: 1.5, source: "s", date: "d"}\n'
    )
    shipped, mine = load_catalog(), load_catalog(path)
    assert mine["h100-sxm"] == {**shipped["h100-sxm"], "on_demand": 9.5, "source": "mine", "date": "2026"}
    assert mine["new-chip"] == {"spot": 1.5, "source": "s", "date": "d"} and mine["tpu-v5p"] == shipped["tpu-v5p"]
    price = price_for("h100-sxm", None, mine)
    assert price == Price("h100-sxm", 9.5, "on_demand", "mine", "2026")
    assert price_for("new-chip", None, mine) is None  # no on-demand price
    assert price_for("new-chip", CostSpec(pricing="spot"), mine).usd_per_chip_hour == 1.5
    assert price_for("nowhere", None, mine) is None


@pytest.mark.parametrize(
    "text, field, message",
    [
        ("- a\n- b\n", "", "=a prices file is a mapping of accelerator -> price entry"),
        ("x: {on_demand: 1.0, date: d}\n", "x", "=each price needs on_demand (or spot), source and date"),
        ("x: {on_demand: 1.0, source: s}\n", "x", "each price needs on_demand (or spot), source and date"),
        ("x: 3\n", "x", "each price needs"),
        ("x: {on_demand: 0, source: s, date: d}\n", "x.on_demand", "got 0"),
        ("x: {on_demand: 1001, source: s, date: d}\n", "x.on_demand", "at most 1000"),
        ("x: {spot: true, source: s, date: d}\n", "x.spot", "got True"),
        ("x: {spot: cheap, source: s, date: d}\n", "x.spot", "must be a number of $ per chip-hour > 0"),
    ],
)
def test_a_bad_prices_file_is_refused_naming_file_and_entry(tmp_path, text, field, message):
    path = tmp_path / "p.yaml"
    path.write_text(text)
    with pytest.raises(SpecError) as err:
        load_catalog(path)
    assert (err.value.source, err.value.field) == (str(path), field)
    # "=..." the whole message, else a part of it
    assert err.value.message == message[1:] if message.startswith("=") else message in err.value.message


def test_a_prices_value_at_the_limit_is_accepted(tmp_path):
    path = tmp_path / "p.yaml"
    path.write_text("x: {on_demand: 1000, spot: 0.01, source: s, date: d}\n")
    assert load_catalog(path)["x"]["on_demand"] == 1000


def test_a_missing_prices_file_is_refused(tmp_path):
    with pytest.raises(SpecError, match="no such prices file, nor a named price set"):
        load_catalog(tmp_path / "absent.yaml")


@pytest.mark.parametrize(
    "text, fleet",
    [
        ("h100-sxm:2", Fleet("h100-sxm", 2)),
        (" h100-sxm:1000000", Fleet("h100-sxm", 1_000_000)),
        ("v5p-8", Fleet("tpu-v5p", 4)),
        ("v5litepod-16", Fleet("tpu-v5e", 16)),
        ("v4-2", Fleet("tpu-v4", 1)),
    ],
)
def test_fleets_parse_to_accelerator_and_chips(text, fleet):
    assert parse_fleet(text) == fleet and parse_fleet(text, load_catalog()) == fleet
    assert str(fleet) == f"{fleet.chips}x {fleet.accelerator}"


def test_fleet_refusals_name_where_they_came_from():
    with pytest.raises(SpecError) as err:
        parse_fleet("h100-sxm:x", None, "--b")
    assert (err.value.source, err.value.field) == ("--b h100-sxm:x", "chips")
    assert "expected a chip count from 1 to 1000000, got 'x'" in str(err.value)
    with pytest.raises(SpecError) as err:
        parse_fleet("v5p-7")
    assert err.value.source == "v5p-7" and "7 is not a whole number of chips (e.g. v5p-8 is 4 chips)" in str(err.value)
    with pytest.raises(SpecError, match="expected ACCELERATOR:CHIPS"):
        parse_fleet("nonsense")
    with pytest.raises(SpecError, match="is more than 1000000"):
        parse_fleet("v5litepod-2000002")


def test_sensitivity_uses_the_scenarios_pricing_and_the_given_factors(round_prices):
    a, b = parse_fleet("v5p-8"), parse_fleet("h100-sxm:2")
    spot = sensitivity(1.0, a, b, round_prices, CostSpec(pricing="spot"), factors=(2.0,))
    assert spot == [
        {"price_factor": 2.0, "cost_ratio_if_a_price_scaled": pytest.approx(2.0), "cost_ratio_if_b_price_scaled": 0.5}
    ]  # spot: 4 x $1 against 2 x $2, a ratio of 1 before scaling


def test_hourly_is_chips_times_the_price_times_the_factor(round_prices):
    from harness.figures.cost import hourly

    assert hourly(parse_fleet("h100-sxm:3"), round_prices)[0] == 9.0
    assert hourly(parse_fleet("h100-sxm:3"), round_prices, None, 0.5)[0] == 4.5


def test_refusals_of_speedups_and_fleets_are_exact():
    with pytest.raises(SpecError) as err:
        cost_ratio(-2.0, parse_fleet("v5p-8"), parse_fleet("h100-sxm:2"), load_catalog())
    assert (err.value.source, err.value.field, err.value.message) == (
        "--speedup",
        "",
        "how many times faster a is than b: a number > 0 (e.g. 1.6), got -2",
    )
    with pytest.raises(SpecError) as err:
        parse_fleet("nonsense", None, "--a")
    assert (err.value.source, err.value.field, err.value.message) == (
        "--a nonsense",
        "",
        "expected ACCELERATOR:CHIPS (h100-sxm:2) or a TPU slice (v5p-8)",
    )


def test_slice_names_count_tensorcores_only_where_a_chip_has_two():
    assert parse_fleet("v5litepod-1") == Fleet("tpu-v5e", 1) and parse_fleet("v6e-3") == Fleet("tpu-v6e", 3)
    assert parse_fleet("v5litepod-1000000") == Fleet("tpu-v5e", 1_000_000)  # the most chips allowed
    with pytest.raises(SpecError) as err:
        parse_fleet("v5litepod-0", None, "--b")
    assert (err.value.source, err.value.field, err.value.message) == (
        "--b v5litepod-0",
        "",
        "a tpu-v5e slice counts TensorCores, 1 per chip: 0 is not a whole number of chips (e.g. v5litepod-8 is 8 chips)",
    )
    with pytest.raises(SpecError) as err:
        parse_fleet("v5litepod-1000001", None, "--b")
    assert (err.value.source, err.value.field, err.value.message) == (
        "--b v5litepod-1000001",
        "",
        "1000001 chips is more than 1000000",
    )


def test_an_unpriced_accelerator_name_is_refused_listing_the_catalog():
    catalog = {"b-chip": {}, "a-chip": {}}
    with pytest.raises(SpecError) as err:
        parse_fleet("h100:2", catalog, "--a")
    assert (err.value.source, err.value.field, err.value.message) == (
        "--a h100:2",
        "",
        "unknown accelerator 'h100' (known: a-chip, b-chip, or a TPU slice such as v5p-8)",
    )


def test_an_unreadable_prices_file_is_refused_naming_it(tmp_path):
    with pytest.raises(SpecError) as err:
        load_catalog(tmp_path / "absent.yaml")
    assert (err.value.source, err.value.field, err.value.message) == (
        str(tmp_path / "absent.yaml"),
        "",
        "no such prices file, nor a named price set (w3)",
    )


def test_a_scenario_price_is_the_whole_custom_price():
    spec = CostSpec.model_validate({"prices": {"l4": {"usd_per_chip_hour": 0.5, "source": "deal", "date": "2026-10"}}})
    assert price_for("l4", spec, load_catalog()) == Price("l4", 0.5, "custom", "deal", "2026-10")


def test_a_prices_file_that_is_not_yaml_is_refused_naming_it(tmp_path):
    path = tmp_path / "p.yaml"
    path.write_text("x: [\n")
    with pytest.raises(SpecError) as err:
        load_catalog(path)
    assert err.value.source == str(path)
