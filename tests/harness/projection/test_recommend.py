"""`bench plan SCENARIO --recommend` (harness/projection/recommend.py, issue 43): every option
projected on one footing, ranked by the calibrated $ end, each a range, the fit and the
binding term; the calibrated end never taken from the other method class while a point
of the scenario's class exists."""

from __future__ import annotations

import pytest


def _resolved(path, overrides=None):
    from harness.scenario.loader import resolve_runs

    return resolve_runs(path, overrides or {}, None)[0].scenario


@pytest.fixture(scope="module")
def w3_options():
    """W3's options (about a minute on a 2-core host: the data's batches per plan)."""
    from harness.figures.cost import load_catalog
    from harness.projection.recommend import options

    return options(_resolved("scenarios/w3_gemma_lora_tunix.yaml"), load_catalog())


@pytest.mark.slow
def test_fitting_options_are_ranked_by_the_calibrated_dollar_end_and_each_is_a_range(w3_options):
    fitting = [o for o in w3_options if o.fits]
    assert len(fitting) >= 10 and {o.kind for o in fitting} == {"cuda", "tpu"}
    ends = [o.usd[1] for o in fitting]
    assert ends == sorted(ends)
    for o in fitting:
        low, high = o.usd
        assert 0 < low < high  # the bound's $ (a best case) below the calibrated one
        assert o.time_s[0] < o.time_s[1]
        assert o.bound_by in ("compute", "memory", "links")
    # everything that does not fit or cannot run comes after every fitting option
    first_other = next(i for i, o in enumerate(w3_options) if not o.fits)
    assert all(not o.fits for o in w3_options[first_other:])


@pytest.mark.slow
def test_each_option_is_the_gpu_projection_of_its_card_at_the_option_s_price(w3_options):
    from harness.figures.cost import load_catalog, price_for
    from harness.projection.gpu_projection import gpu_card, project_scenario
    from harness.projection.recommend import calibration_pools
    from harness.run import registry

    scenario = _resolved("scenarios/w3_gemma_lora_tunix.yaml")
    option = next(o for o in w3_options if o.name == "2x h100-sxm")
    card = gpu_card("h100-sxm:2")
    price = price_for("h100-sxm", scenario.cost, load_catalog())
    points, _ = calibration_pools("lora")["cuda"]
    record = project_scenario(scenario, card, price, registry.get(option.backend).capabilities, "t", "cuda", points)
    ft = record["fine_tune"]
    assert option.usd[0] == pytest.approx(ft["time_s"] / 3600 * 2 * price.usd_per_chip_hour)
    assert option.usd[1] == pytest.approx(option.usd[0] / record["calibration"]["ratio"])
    assert option.fits == record["fits"]


@pytest.mark.slow
def test_a_lora_scenario_s_tpu_options_take_the_adapter_class_not_a_full_fine_tune_s_ratio(w3_options):
    """The TPU options' calibrated end comes from the TPU adapter point (LitGPT's v4 run),
    never from the TPU full fine-tunes' higher ratios, which would flatter them."""
    from harness.projection.recommend import calibration_pools, tpu_points

    adapter = [p for p in tpu_points() if p.method == "lora"]
    assert [p.catalog_key for p in adapter] == ["tpu-v4"]
    points, said = calibration_pools("lora")["tpu"]
    assert said == "adapter" and points == adapter
    low = min(p.ratio for p in adapter)
    assert low < min(p.ratio for p in tpu_points() if p.method == "full")  # the full ratio would have flattered
    tpu = next(o for o in w3_options if o.name == "tpu-v5p-8")
    assert tpu.calibrated_by == "adapter"
    assert tpu.usd[1] == pytest.approx(tpu.usd[0] / low)
    full, said_full = calibration_pools("full")["tpu"]
    assert said_full == "full" and {p.catalog_key for p in full} == {"tpu-v6e", "tpu-v5p"}


def test_a_kind_without_points_of_the_class_takes_the_other_kinds_then_its_own_all_said_so(monkeypatch):
    """Without a TPU adapter point, a LoRA's TPU end comes from the GPU adapter points
    (said "adapter (GPU's)"); without any adapter point at all, from every TPU point
    (said "adapter *all*")."""
    from harness.projection import gpu_projection, recommend

    full_only = [p for p in recommend.tpu_points() if p.method == "full"]
    monkeypatch.setattr(recommend, "tpu_points", lambda: full_only)
    points, said = recommend.calibration_pools("lora")["tpu"]
    assert said == "adapter (GPU's)" and points == [p for p in gpu_projection.gpu_points() if p.method == "lora"]
    gpu_full = [p for p in gpu_projection.gpu_points() if p.method == "full"]
    monkeypatch.setattr(gpu_projection, "gpu_points", lambda: gpu_full)
    points, said = recommend.calibration_pools("lora")["tpu"]
    assert said == "adapter *all*" and points == full_only
    points, said = recommend.calibration_pools("lora")["cuda"]
    assert said == "adapter *all*" and points == gpu_full


def test_the_tpu_points_are_rebounded_by_the_same_analytic_model():
    """Each published TPU run's ratio against the analytic bound: its tokens over the
    step bound of bench's execution of it (1 row a pass, recompute, fsdp over the slice)."""
    from harness.figures.accelerators import PEAK_BF16_FLOPS
    from harness.figures.metrics import FlopsModel
    from harness.projection.calibration import PUBLISHED
    from harness.projection.recommend import tpu_points
    from harness.scenario.presets import MODEL_PRESETS

    for entry, point in zip(PUBLISHED, tpu_points()):
        assert point.source == entry.label and 0 < point.ratio < 1
        # the bound's step is at least the FLOPs at the chip's peak, so the ratio at least this
        lora = entry.method == "lora"
        adapters = entry.projected["plan"]["trainable_params"] if lora else 0
        flops = FlopsModel(MODEL_PRESETS[entry.model], lora=lora, adapter_params=adapters, checkpointing=True)
        per_row = flops.hardware_flops([entry.seq_len]) / PEAK_BF16_FLOPS[entry.catalog_key]
        assert point.ratio >= entry.measured_tokens_per_s_per_chip * per_row / entry.seq_len - 1e-9


@pytest.mark.slow
def test_the_table_says_projected_fit_binding_term_and_the_calibration_sources(w3_options):
    from harness.projection.recommend import table_lines

    text = "\n".join(table_lines(w3_options))
    assert text.startswith("PROJECTED (not measured): which accelerator to rent")
    first = next(o for o in w3_options if o.fits)
    assert f"  1  {first.name:<14} {first.backend:<10} yes  {first.bound_by:<8}" in text
    assert f"${first.usd[0]:.3g}-${first.usd[1]:.3g}" in text
    assert (
        "calibrated end (TPU): the lowest measured / bound of the adapter points: github.com/Lightning-AI/litgpt"
        in text
    )
    assert any(o.fits is False for o in w3_options) and " NO " in text


@pytest.mark.slow
@pytest.mark.parametrize("path", ["scenarios/gemma270m.yaml", "scenarios/w3_gemma_lora_tunix.yaml"])
def test_docs_accelerators_shows_what_recommend_prints_for_w1_and_w3(path, request):
    """docs/accelerators.md's W1 and W3 tables: every row shown is the row printed now
    (W3's options are the module's, computed once)."""
    import re
    from pathlib import Path

    from harness.figures.cost import load_catalog
    from harness.projection.recommend import options, table_lines

    doc = Path("docs/accelerators.md").read_text()
    block = re.search(rf"`bench plan {re.escape(path)} --recommend`.*?```text\n(.*?)```", doc, flags=re.S).group(1)
    found = request.getfixturevalue("w3_options") if "w3_" in path else options(_resolved(path), load_catalog())
    printed = {tuple(line.split()) for line in table_lines(found)}
    rows = [line for line in block.splitlines() if re.match(r"\s*(\d+|-)\s", line)]
    assert len(rows) >= 10
    for row in rows:
        assert tuple(row.split()) in printed, row


def test_docs_measurements_shows_each_tpu_point_s_analytic_bound_and_ratio():
    from pathlib import Path

    from harness.projection.calibration import PUBLISHED
    from harness.projection.recommend import tpu_points

    section = Path("docs/measurements/projections-and-calibration.md").read_text().split("(#43)", 1)[1]
    for entry, point in zip(PUBLISHED, tpu_points()):
        analytic = entry.measured_tokens_per_s_per_chip / point.ratio
        rows = [
            line for line in section.splitlines() if line.startswith("|") and f"({entry.source['commit'][:8]})" in line
        ]
        if len(rows) > 1:  # points of one commit (torchprime's bounds file) are told apart by id
            rows = [line for line in rows if f"`{entry.id}`" in line]
        (row,) = rows
        assert row.endswith(f"| {analytic:,.0f} | {point.ratio:.3f} |"), row
        assert f"| {entry.measured_over_bound:.3f} |" in row
