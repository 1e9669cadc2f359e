from __future__ import annotations

import pytest

from edgepipe.deploy.plan.capacity import KVTerms, ModelFacts, decimal, kv_terms, quantize_advice, throughput


def test_a_3b_model_in_fp16_at_20_tokens_per_s_needs_120_gb_s() -> None:
    model = ModelFacts.from_count(3e9, "fp16")
    rate = throughput(model, 20, bandwidth_gb_s=68.0, tops=40.0)
    assert rate.bytes_per_token == 6_000_000_000
    assert rate.bandwidth_needed_gb_s == pytest.approx(120.0)
    assert rate.compute_needed_tops == pytest.approx(0.12)
    assert rate.binding == "bandwidth"
    assert rate.max_tokens_per_s_bandwidth == pytest.approx(68 / 6)
    assert rate.fits is False


def test_compute_binds_when_the_device_has_more_bandwidth_than_operations() -> None:
    rate = throughput(ModelFacts.from_count(1e9, "int8"), 10, bandwidth_gb_s=1000.0, tops=0.001)
    assert rate.binding == "compute"
    assert rate.max_tokens_per_s_compute == pytest.approx(0.5)


def test_the_kv_cache_is_printed_with_every_term() -> None:
    kv = KVTerms(layers=32, positions=2048, kv_heads=8, head_dim=128, itemsize=2)
    assert kv.nbytes == 268_435_456
    assert kv.formula() == (
        "32 layers x 2 (K and V) x 2048 positions x 8 KV heads x head dim 128 x 2 bytes"
        " = 268,435,456 bytes (268.4 MB)"
    )
    without, with_heads = kv.other_forms(heads=32)
    assert "33.6 MB: 8x too small" in without
    assert "1.1 GB: 4x too big" in with_heads
    assert "grouped-query" in with_heads


def test_no_gqa_warning_when_every_head_has_its_own_kv() -> None:
    kv = KVTerms(layers=2, positions=16, kv_heads=4, head_dim=8, itemsize=4)
    assert len(kv.other_forms(heads=4)) == 1  # only the form without the head count


def test_the_kv_cache_needs_the_models_shape() -> None:
    assert kv_terms(ModelFacts.from_count(3e9, "fp16"), 2048) is None
    shaped = ModelFacts.from_count(3e9, "int4", layers=28, kv_heads=8, head_dim=128)
    terms = kv_terms(shaped, 4096)
    assert terms is not None
    assert terms.itemsize == 2


def test_advice_names_the_first_dtype_that_fits_or_what_would() -> None:
    model = ModelFacts.from_count(3e9, "fp16")
    assert quantize_advice(model, 20, 68.0).startswith("quantize the weights to int8: 60.0 GB/s")
    assert quantize_advice(model, 20, 17.1).startswith("quantize the weights to int4: 30.0 GB/s") is False
    assert "at most 2.8 tokens/s" in quantize_advice(model, 20, 17.1)


@pytest.mark.parametrize(("nbytes", "text"), [(268_435_456, "268.4 MB"), (6e9, "6.0 GB"), (12, "12 bytes")])
def test_decimal_units(nbytes: float, text: str) -> None:
    assert decimal(nbytes) == text


def test_a_parameter_count_is_a_whole_number_never_rounded() -> None:
    assert ModelFacts.from_count(3e9, "fp16").params == 3_000_000_000
    for bad in (3.5, 0, -3e9, float("nan")):
        with pytest.raises(ValueError, match="a parameter count is a positive whole number"):
            ModelFacts.from_count(bad, "fp16")


def test_the_weight_format_names_the_packed_matrices_and_the_rest() -> None:
    formats = (("int4", 9000), ("fp32", 998), ("int64", 2))  # a few shape constants: no weight format
    facts = ModelFacts("m", 10_000, "int4", 6000, formats=formats, packed_params=9000)
    assert facts.weight_format() == "int4 weights (9,000 of them packed in MatMulNBits; 998 in fp32)"
    assert ModelFacts("m", 10, "fp16", 20, formats=(("fp16", 10),)).weight_format() == "fp16 weights"
    assert ModelFacts.from_count(3e9, "fp16").weight_format() == "fp16 weights"
