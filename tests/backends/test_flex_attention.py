"""FlexAttention on the PyTorch backends (backends/torch_common/flex.py): on tiny-gemma3
(its two layers as one sliding layer of window 32 and one global) the flex path gives masked SDPA's loss and
LoRA gradients, packed and unpacked, rows beyond the window included; `auto` chooses it
only where the rows need a mask, on CUDA; a packed compiled run does not recompile after
warm-up and its record names flex for the packed layers.

On this CPU flex runs its unfused reference (torch has no CPU backward kernel for it):
what these tests check is the masks (document, window) and the wiring, which the CUDA
kernel runs too."""

from __future__ import annotations

from types import SimpleNamespace

import pytest

torch = pytest.importorskip("torch")
pytest.importorskip("transformers")
pytest.importorskip("peft")

from backends.hf_common import loss as losses  # noqa: E402
from backends.hf_common.model import hf_config  # noqa: E402
from backends.torch_common import flex  # noqa: E402
from harness.scenario.presets import MODEL_PRESETS  # noqa: E402

from conftest import TINY, bench, failures_in, records_in, write_scenario  # noqa: E402

ARCH = MODEL_PRESETS["tiny-gemma3"]
WINDOW = ARCH["sliding_window"]  # 32


@pytest.fixture(autouse=True)
def block_masks_built_uncompiled(monkeypatch):
    """The in-process tests build transformers' flex block masks without compiling their
    builder: the same BlockMask from the same mask function, where the compiled builder
    cost an inductor C++ compile per mask kind and shape (21-33 s each on this CPU against
    0.02 s). The `bench run` tests below run in their own processes, as users' runs do."""
    from transformers import masking_utils

    build = masking_utils.create_block_mask

    def uncompiled(*args, **kwargs):
        return build(*args, **{**kwargs, "_compile": False})

    monkeypatch.setattr(masking_utils, "create_block_mask", uncompiled)


def lora_model():
    from peft import LoraConfig, get_peft_model
    from transformers import AutoModelForCausalLM

    torch.manual_seed(0)
    config = hf_config(ARCH, "sdpa")
    config.layer_types = ["sliding_attention", "full_attention"]  # both of Gemma 3's kinds
    model = AutoModelForCausalLM.from_config(config, dtype=torch.float32)
    lora = LoraConfig(r=4, lora_alpha=8, target_modules=["q_proj", "v_proj", "o_proj"], task_type="CAUSAL_LM")
    model = get_peft_model(model, lora)
    for name, p in model.named_parameters():  # LoRA's B starts at zero: give it values
        if "lora_B" in name:
            torch.nn.init.normal_(p, std=0.05)
    return model


def rows(lengths: list[int], length: int):
    """Right-padded rows of `lengths` real tokens (labels -100 on padding)."""
    g = torch.Generator().manual_seed(1)
    ids = torch.randint(3, ARCH["vocab_size"], (len(lengths), length), generator=g)
    labels = ids.clone()
    for row, n in enumerate(lengths):
        labels[row, n:] = -100
    return ids, labels


def packed_positions(examples: list[list[int]], length: int):
    """Each row: its examples' positions restarting at 0, then padding positions."""
    out = []
    for row in examples:
        positions = [p for n in row for p in range(n)]
        out.append(positions + list(range(length - len(positions))))
    return torch.tensor(out)


def loss_and_grads(model, ids, labels, positions, calls=None):
    summed, _ = losses.TokenLoss(model, "plain")(ids, None, labels, positions)
    summed.backward()
    grads = {n: p.grad.detach().clone() for n, p in model.named_parameters() if p.requires_grad}
    return summed.item(), grads


class Counting:
    """Counts calls of flex's CPU path (each layer's attention on flex), as use_flex set
    it: the reference wrapped to run outside any compiled region."""

    def __init__(self, monkeypatch):
        self.calls = 0
        original = flex._cpu_reference_outside_compile
        assert original is not None  # use_flex ran first

        def counted(*args):
            self.calls += 1
            block_mask = args[3]
            assert type(block_mask).__name__ == "BlockMask"  # never a dense mask
            return original(*args)

        monkeypatch.setattr(flex, "_cpu_reference_outside_compile", counted)


@pytest.mark.slow
@pytest.mark.parametrize("case", ["unpacked-beyond-window", "unpacked-within-window", "packed"])
def test_flex_gives_masked_sdpas_loss_and_lora_gradients(case, monkeypatch):
    length = 80 if case != "unpacked-within-window" else WINDOW
    ids, labels = rows([80, 57] if length == 80 else [32, 20], length)
    positions = None
    if case == "packed":  # three and two examples a row, some longer than the window
        positions = packed_positions([[40, 25, 15], [50, 20]], length)
        labels = ids.clone()
    reference = lora_model()
    want_loss, want = loss_and_grads(reference, ids, labels, positions)
    model = lora_model()
    flex.use_flex(model)
    counting = Counting(monkeypatch)
    got_loss, got = loss_and_grads(model, ids, labels, positions)
    assert counting.calls == ARCH["num_layers"]  # every layer went through flex
    assert want_loss > 1.0 and got_loss == pytest.approx(want_loss, rel=1e-5)
    assert want.keys() == got.keys() and len(want) == 2 * 3 * ARCH["num_layers"]
    for name in want:
        torch.testing.assert_close(got[name], want[name], rtol=1e-4, atol=1e-5, msg=name)


@pytest.mark.slow
def test_packed_masks_differ_from_unpacked_so_the_parity_is_not_vacuous():
    ids, _ = rows([80, 80], 80)
    labels = ids.clone()
    positions = packed_positions([[40, 25, 15], [50, 20]], 80)
    model = lora_model()
    flex.use_flex(model)
    packed, _ = loss_and_grads(model, ids, labels, positions)
    whole, _ = loss_and_grads(lora_model_flex(), ids, labels, None)
    assert abs(packed - whole) > 1e-3


def lora_model_flex():
    model = lora_model()
    flex.use_flex(model)
    return model


CUDA, CPU = SimpleNamespace(type="cuda"), SimpleNamespace(type="cpu")
CONFIG = SimpleNamespace(sliding_window=512, layer_types=["sliding_attention"] * 5 + ["full_attention"])


@pytest.mark.parametrize(
    ("option", "attention", "device", "padding", "seq", "on"),
    [
        ("auto", "sdpa", CUDA, "packed", 512, True),  # packed: a document mask
        ("auto", "sdpa", CUDA, "static", 1024, True),  # beyond the window: a band mask
        ("auto", "sdpa", CUDA, "static", 512, False),  # causal rows: SDPA's flash path
        ("auto", "sdpa", CPU, "packed", 512, False),  # no CPU backward kernel
        ("auto", "eager", CUDA, "packed", 512, False),
        (True, "sdpa", CPU, "static", 512, True),
        (False, "sdpa", CUDA, "packed", 512, False),
    ],
)
def test_auto_chooses_flex_where_rows_need_a_mask_on_cuda(option, attention, device, padding, seq, on):
    got, why = flex.choose(option, attention, device, CONFIG, padding, seq, "f")
    assert got is on and why


def test_pinned_flex_without_sdpa_is_refused_naming_the_field():
    with pytest.raises(ValueError, match=r"^backend_options\.torch\.flex_attention: true needs SDPA attention"):
        flex.choose(True, "eager", CPU, CONFIG, "packed", 512, "backend_options.torch.flex_attention")


def test_the_record_names_each_layer_kinds_path():
    paths = flex.layer_paths(CONFIG, True, "sdpa", CUDA, "packed", 1024)
    assert paths["sliding_attention"].startswith(flex.KERNEL_PATH)
    assert "document + sliding window 512" in paths["sliding_attention"]
    assert "sliding" not in paths["full_attention"] and "document" in paths["full_attention"]
    off = flex.layer_paths(CONFIG, False, "sdpa", CUDA, "static", 1024)
    assert off == {
        "full_attention": "sdpa, no mask (is_causal)",
        "sliding_attention": "sdpa with a dense causal + sliding window 512 mask (built by transformers)",
    }
    assert flex.layer_paths(CONFIG, True, "sdpa", CPU, "packed", 512)["full_attention"].startswith(flex.CPU_PATH)


@pytest.mark.slow
def test_a_packed_compiled_run_with_flex_never_recompiles_after_warm_up(tmp_path, results):
    sets = [
        *("sequence.padding=packed", "model.attention=sdpa", "train.global_batch=4", "train.micro_batch=4"),
        *("train.steps=4", "train.warmup_steps=1", "train.window_steps=0", "sequence.max_length=128"),
        *("backend_options.torch.compile=true", "backend_options.torch.compile_backend=aot_eager"),
        "backend_options.torch.flex_attention=true",
    ]
    args = [a for kv in sets for a in ("--set", kv)]
    done = bench("run", str(write_scenario(tmp_path, TINY)), "--results-dir", str(results), "--no-progress", *args)
    assert done.returncode == 0, done.stderr[-2000:] + failures_in(results)
    (record,) = records_in(results)
    steps = record["raw"]["loop"]["steps"]
    assert sum(s["num_compiles"] for s in steps[1:]) == 0 and record["metrics"]["num_recompiles"] == 0
    execution = record["raw"]["execution"]
    assert execution["flex_attention"] is True and execution["attention"] == "flex"
    paths = execution["attention_paths"]
    assert paths and all(p.startswith(flex.CPU_PATH) and "document" in p for p in paths.values()), paths
    # Read from the step that ran (its first forward that compiled nothing, profiled):
    # one flex call per layer, no SDPA.
    assert execution["attention_kernel_ran"] == "flex" and execution["attention_kernel_calls"] == {"flex": 2}
    assert execution["attention_kernel_source"].startswith("the run's first forward pass that compiled nothing")


def test_the_kernel_that_ran_is_named_from_the_profiles_op_names():
    from backends.torch_common.attention import kernels_from_profile

    def events(**counts):
        return [SimpleNamespace(key=k, count=v) for k, v in counts.items()]

    assert kernels_from_profile(events(**{"aten::_scaled_dot_product_flash_attention": 18, "aten::mm": 99})) == {
        "flash": 18
    }
    # A composite SDPA call that reached no fused op ran the math path.
    found = kernels_from_profile(
        events(**{"aten::scaled_dot_product_attention": 3, "aten::_scaled_dot_product_efficient_attention": 2})
    )
    assert found == {"efficient": 2, "math": 1}
    assert kernels_from_profile(events(FlexAttentionAutogradOp=2, triton_tem_fused_flex_attention_0=0)) == {"flex": 2}
