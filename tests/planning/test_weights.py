"""The one count of a model's weights (edgepipe/planning/weights.py), on plain tuples."""

from __future__ import annotations

from dataclasses import dataclass

from edgepipe.planning.weights import Weights, count

FP32, FP16, UINT8, INT64 = 1, 10, 2, 7


@dataclass(frozen=True)
class Node:
    op_type: str
    inputs: tuple[str, ...]
    domain: str = ""
    ints: tuple[tuple[str, int], ...] = ()


def matmul_nbits(bits: int) -> Node:
    return Node("MatMulNBits", ("x", "B", "scales", "zeros"), "com.microsoft",
                (("K", 64), ("N", 64), ("bits", bits), ("block_size", 32)))  # fmt: skip


def test_fp16_weights_take_half_the_bytes_of_the_same_fp32_weights() -> None:
    fp32 = count([("w", FP32, (256, 128)), ("b", FP32, (128,))])
    fp16 = count([("w", FP16, (256, 128)), ("b", FP16, (128,))])
    assert fp32.params == fp16.params == 256 * 128 + 128
    assert fp32.nbytes == 4 * fp32.params
    assert fp16.nbytes * 2 == fp32.nbytes
    assert (fp32.dtype, fp16.dtype) == ("fp32", "fp16")


def test_packed_4_bit_weights_count_as_stored_with_their_scales() -> None:
    # K = N = 64, blocks of 32: B is N x 2 blocks x 16 bytes (32 weights of 4 bits each).
    inits = [("B", UINT8, (64, 2, 16)), ("scales", FP16, (128,)), ("zeros", UINT8, (64,))]
    weights = count(inits, [matmul_nbits(4)])
    assert weights.params == 64 * 64  # the weights the bytes hold; scales and zero points are not
    assert dict(weights.bytes_by_dtype) == {"int4": 2048 + 64, "fp16": 256}
    assert weights.nbytes == 2048 + 256 + 64
    assert weights.dtype == "int4"
    unpacked = count(inits)  # without the node: the same bytes, read as plain uint8
    assert unpacked.nbytes == weights.nbytes
    assert unpacked.params == 2048 + 128 + 64


def test_packed_8_bit_weights_hold_one_weight_a_byte() -> None:
    weights = count([("B", UINT8, (64, 2, 32)), ("scales", FP32, (128,))], [matmul_nbits(8)])
    assert (weights.params, weights.nbytes, weights.dtype) == (64 * 64, 4096 + 512, "int8")


def test_a_token_reads_one_row_of_an_embedding_only_gathered_from() -> None:
    inits = [("embed", FP32, (1000, 64)), ("head", FP32, (64, 1000)), ("ids", INT64, (1,))]
    nodes = [Node("Gather", ("embed", "input_ids")), Node("MatMul", ("h", "head"))]
    weights = count(inits, nodes)
    assert weights.per_token_bytes == weights.nbytes - 4 * 1000 * 64 + 4 * 64
    tied = count(inits, [*nodes, Node("MatMul", ("h", "embed"))])  # the head reads it whole
    assert tied.per_token_bytes == tied.nbytes


def test_no_weights() -> None:
    assert (count([]).nbytes, count([]).dtype) == (0, "fp32")
    assert Weights(1, {"fp32": 4.0}).per_token_bytes == 4


def test_a_quantized_decoder_is_int4_though_its_float_embedding_holds_more_bytes() -> None:
    # Two packed 4-bit MatMuls of 64 x 64 (2 kB each) beside a float32 embedding of 100 x 64 (25.6 kB).
    inits = [("embed", FP32, (100, 64)), ("B", UINT8, (64, 2, 16)), ("B2", UINT8, (64, 2, 16)),
             ("scales", FP32, (128,)), ("zeros", UINT8, (64,)), ("shape", INT64, (2,))]  # fmt: skip
    second = Node("MatMulNBits", ("h", "B2", "scales", "zeros"), "com.microsoft", matmul_nbits(4).ints)
    weights = count(inits, [Node("Gather", ("embed", "ids")), matmul_nbits(4), second])
    assert max(weights.bytes_by_dtype, key=lambda k: weights.bytes_by_dtype[k]) == "fp32"
    assert weights.dtype == "int4"  # what its matrices are stored in, by parameters
    assert weights.packed_params == 2 * 64 * 64
    assert weights.formats() == [("int4", 2 * 64 * 64), ("fp32", 100 * 64), ("int64", 2)]
