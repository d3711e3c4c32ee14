"""Cost: by hand from a record, every figure with its price source, and W3's ratio."""

from __future__ import annotations

import json
import shutil
import subprocess
import sys

import pytest

from conftest import bench
from harness.accelerators import catalog_key, chips_in_slice
from harness.cost import cost_ratio, load_catalog, parse_fleet, price_for, training_cost, workload_cost
from harness.spec import CostSpec
from records import make_record


def test_record_cost_recomputes_by_hand():
    record = make_record([0.5] * 4, kind="tpu", device="TPU v5 lite", catalog_key="tpu-v5e", chips=8)
    cost, m = record["cost"], record["metrics"]
    assert cost["usd_run"] == pytest.approx(8 * m["run_time_s"] / 3600 * 1.20)
    assert cost["usd_steady_state"] == pytest.approx(8 * 2.0 / 3600 * 1.20)
    assert cost["usd_per_1m_tokens_real"] == pytest.approx(8 * 1.20 / 3600 / m["tokens_per_s_real"] * 1e6)
    assert cost["price"]["source"] and cost["price"]["date"] and cost["price"]["pricing"] == "on_demand"


def test_scenario_prices_override_the_catalog_and_say_so():
    spec = CostSpec.model_validate({"prices": {"h100-sxm": {"usd_per_chip_hour": 2.5, "source": "our contract", "date": "2026-10"}}})
    price = price_for("h100-sxm", spec, load_catalog())
    assert (price.usd_per_chip_hour, price.pricing, price.source) == (2.5, "custom", "our contract")
    assert price_for("tpu-v6e", CostSpec(pricing="spot"), load_catalog()).usd_per_chip_hour == 0.65
    assert training_cost({"run_time_s": 1, "measured_time_s": 1, "tokens_per_s_real": 1}, 1, None) is None


def test_chip_counting_lives_in_one_place():
    assert chips_in_slice("v5p-8") == 4 and chips_in_slice("v4-8") == 4
    assert chips_in_slice("v5litepod-8") == 8 and chips_in_slice("v6e-8") == 8
    assert catalog_key("tpu", "TPU v5 lite") == "tpu-v5e" and catalog_key("cuda", "NVIDIA H100 80GB HBM3") == "h100-sxm"
    assert catalog_key("cuda", "NVIDIA H100 PCIe") == "h100-pcie"
    assert parse_fleet("v5p-8").chips == 4 and parse_fleet("h100-sxm:2").chips == 2


def test_w3_published_training_ratio_reproduces_from_the_catalog():
    """W3: TPU v5p-8 1.61x faster than 2x H100 -> 2.12x cheaper at list prices."""
    result = cost_ratio(1.61, parse_fleet("v5p-8"), parse_fleet("h100-sxm:2"), load_catalog())
    assert result["price_ratio"] == pytest.approx((4 * 4.20) / (2 * 11.06))
    assert 1 / result["cost_ratio"] == pytest.approx(2.12, abs=0.01)
    done = bench("cost", "--speedup", "1.61", "--a", "v5p-8", "--b", "h100-sxm:2")
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
