"""Write a small decoder-only language model in ONNX, with a real transformer structure.

Token embedding, per layer RMSNorm -> attention with rotary positions and grouped KV heads ->
residual -> RMSNorm -> gated MLP (SiLU(gate) * up -> down) -> residual, final RMSNorm, LM
head. Weights are deterministic (a seed), so two runs give the same file. Two layouts, the
same weights and the same interface (Hugging Face / Optimum names)::

    inputs   input_ids [B, S] int64, attention_mask [B, T] int64, position_ids [B, S] int64,
             past_key_values.{i}.key / .value [B, kv_heads, P, head_dim] float32 (or float16)
    outputs  logits [B, S, vocab], present.{i}.key / .value [B, kv_heads, P', head_dim]

The batch B is symbolic, as real exports declare it. Rows of a batch may hold different
lengths: each row's ``attention_mask`` marks the cache positions it keeps (right-padded rows,
or holes a row dropped), and a key is visible to a query when the count of kept keys up to it
is at most the query's position (the concat layout), or per row by its sequence length (gqa).
``kv_dtype="float16"`` declares the cache in half precision: the concat layout casts at the
cache boundary, the gqa layout runs the attention op in float16.

- ``concat`` (what a plain Optimum export does): attention is spelled out in standard ops and
  the cache grows by Concat: P' = P + S, a new array every step.
- ``gqa`` (what onnxruntime-genai builds): ``com.microsoft.GroupQueryAttention`` with the
  cache in a buffer of ``max_seq_len`` shared by past and present (P = P' = max_seq_len): the
  op writes the new keys and values in place, at the positions that ``attention_mask`` says
  come next.

A ``tokenizer.json`` (byte-level: 256 byte tokens, then <bos>, <eos>, <pad>) and a
``config.json`` go beside the model.

Test support, not part of the installed package: building needs the ``onnx`` package (a dev
dependency); running the result needs only ONNX Runtime. ``scripts/make_tiny_lm.py`` is the
command line for it, ``scripts/bench/lm.py`` and the tests import it (``tests/conftest.py``
puts ``scripts/`` on ``sys.path``). The weights are untrained: the text is noise, the machinery
is real.
"""

from __future__ import annotations

import json
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any

import numpy as np

from scripts.tiny_tokenizer import byte_tokenizer_json

BYTE_TOKENS = 256
BOS, EOS, PAD = 256, 257, 258
SPECIAL = {"<bos>": BOS, "<eos>": EOS, "<pad>": PAD}


@dataclass(frozen=True)
class TinyConfig:
    vocab: int = 320
    hidden: int = 128
    layers: int = 2
    heads: int = 4
    kv_heads: int = 2
    ffn: int = 384
    max_seq_len: int = 512
    rope_theta: float = 10000.0
    rms_eps: float = 1e-5
    seed: int = 0

    @property
    def head_dim(self) -> int:
        return self.hidden // self.heads

    def parameters(self) -> int:
        kv = self.kv_heads * self.head_dim
        per_layer = self.hidden * (2 * self.hidden + 2 * kv) + 3 * self.hidden * self.ffn + 2 * self.hidden
        return 2 * self.vocab * self.hidden + self.layers * per_layer + self.hidden


def weights(cfg: TinyConfig) -> dict[str, np.ndarray]:
    """Deterministic weights, scaled so that activations stay O(1) through the layers."""
    if cfg.vocab < BYTE_TOKENS + len(SPECIAL):
        raise ValueError(f"vocab must hold the {BYTE_TOKENS} bytes and {len(SPECIAL)} specials")
    if cfg.hidden % cfg.heads or cfg.heads % cfg.kv_heads or cfg.head_dim % 2:
        raise ValueError("hidden must split into heads, heads into kv groups, and head_dim must be even")
    rng = np.random.default_rng(cfg.seed)
    kv = cfg.kv_heads * cfg.head_dim

    def mat(rows: int, cols: int) -> np.ndarray:
        out: np.ndarray = (rng.standard_normal((rows, cols)) / np.sqrt(rows)).astype(np.float32)
        return out

    w: dict[str, np.ndarray] = {"embed": rng.standard_normal((cfg.vocab, cfg.hidden)).astype(np.float32)}
    for i in range(cfg.layers):
        w[f"l{i}.attn_norm"] = (1 + 0.1 * rng.standard_normal(cfg.hidden)).astype(np.float32)
        w[f"l{i}.wq"] = mat(cfg.hidden, cfg.hidden)
        w[f"l{i}.wk"] = mat(cfg.hidden, kv)
        w[f"l{i}.wv"] = mat(cfg.hidden, kv)
        w[f"l{i}.wo"] = mat(cfg.hidden, cfg.hidden)
        w[f"l{i}.mlp_norm"] = (1 + 0.1 * rng.standard_normal(cfg.hidden)).astype(np.float32)
        w[f"l{i}.gate"] = mat(cfg.hidden, cfg.ffn)
        w[f"l{i}.up"] = mat(cfg.hidden, cfg.ffn)
        w[f"l{i}.down"] = mat(cfg.ffn, cfg.hidden)
    w["final_norm"] = np.ones(cfg.hidden, np.float32)
    w["lm_head"] = mat(cfg.hidden, cfg.vocab) * np.float32(4.0)  # peaked enough to make greedy choices clear
    return w


def rope_tables(cfg: TinyConfig) -> tuple[np.ndarray, np.ndarray]:
    """cos and sin [max_seq_len, head_dim / 2] for rotate-half rotary positions."""
    half = cfg.head_dim // 2
    inv = 1.0 / (cfg.rope_theta ** (np.arange(half, dtype=np.float64) / half))
    angles = np.arange(cfg.max_seq_len, dtype=np.float64)[:, None] * inv[None, :]
    return np.cos(angles).astype(np.float32), np.sin(angles).astype(np.float32)


# -- the numpy reference: full recompute, no cache ----------------------------------------------


def reference_logits(cfg: TinyConfig, w: dict[str, np.ndarray], tokens: list[int]) -> np.ndarray:
    """Logits [len(tokens), vocab] of the model on ``tokens`` (positions 0..n-1), in numpy."""
    x = w["embed"][np.asarray(tokens)]
    n = len(tokens)
    cos, sin = rope_tables(cfg)
    cos, sin = cos[:n], sin[:n]
    d, g = cfg.head_dim, cfg.heads // cfg.kv_heads
    causal = np.triu(np.full((n, n), -np.inf, np.float32), 1)
    for i in range(cfg.layers):
        h = _rms(x, w[f"l{i}.attn_norm"], cfg.rms_eps)
        q = (h @ w[f"l{i}.wq"]).reshape(n, cfg.heads, d).transpose(1, 0, 2)
        k = (h @ w[f"l{i}.wk"]).reshape(n, cfg.kv_heads, d).transpose(1, 0, 2)
        v = (h @ w[f"l{i}.wv"]).reshape(n, cfg.kv_heads, d).transpose(1, 0, 2)
        q, k = _rotate(q, cos, sin), _rotate(k, cos, sin)
        k, v = np.repeat(k, g, axis=0), np.repeat(v, g, axis=0)
        scores = q @ k.transpose(0, 2, 1) / np.float32(np.sqrt(d)) + causal
        scores = np.exp(scores - scores.max(axis=-1, keepdims=True))
        scores /= scores.sum(axis=-1, keepdims=True)
        attn = (scores @ v).transpose(1, 0, 2).reshape(n, cfg.hidden)
        x = x + attn @ w[f"l{i}.wo"]
        h = _rms(x, w[f"l{i}.mlp_norm"], cfg.rms_eps)
        gate = h @ w[f"l{i}.gate"]
        x = x + (gate / (1 + np.exp(-gate)) * (h @ w[f"l{i}.up"])) @ w[f"l{i}.down"]
    logits: np.ndarray = _rms(x, w["final_norm"], cfg.rms_eps) @ w["lm_head"]
    return logits


def _rms(x: np.ndarray, weight: np.ndarray, eps: float) -> np.ndarray:
    out: np.ndarray = x / np.sqrt((x * x).mean(axis=-1, keepdims=True) + np.float32(eps)) * weight
    return out


def _rotate(x: np.ndarray, cos: np.ndarray, sin: np.ndarray) -> np.ndarray:
    half = x.shape[-1] // 2
    a, b = x[..., :half], x[..., half:]
    return np.concatenate([a * cos - b * sin, b * cos + a * sin], axis=-1)


# -- the ONNX graphs ----------------------------------------------------------------------------


KV_DTYPES = ("float32", "float16")


def build(cfg: TinyConfig, layout: str, kv_dtype: str = "float32") -> object:
    """The ONNX ModelProto (needs the ``onnx`` package: a dev dependency)."""
    from onnx import TensorProto, helper, numpy_helper

    if layout not in ("concat", "gqa"):
        raise ValueError(f"layout must be concat or gqa, not {layout!r}")
    if kv_dtype not in KV_DTYPES:
        raise ValueError(f"kv_dtype must be one of {', '.join(KV_DTYPES)}, not {kv_dtype!r}")
    w = weights(cfg)
    cos, sin = rope_tables(cfg)
    f32, i64 = TensorProto.FLOAT, TensorProto.INT64
    nodes: list[Any] = []
    inits = [numpy_helper.from_array(v, k) for k, v in w.items()]
    if kv_dtype == "float16" and layout == "gqa":  # the attention op's tables are in its type
        cos, sin = cos.astype(np.float16), sin.astype(np.float16)
    inits += [numpy_helper.from_array(cos, "cos_cache"), numpy_helper.from_array(sin, "sin_cache")]
    consts: dict[str, np.ndarray] = {
        "eps": np.array(cfg.rms_eps, np.float32),
        "minus_inf": np.array(-1e9, np.float32),
        "zero_f": np.array(0.0, np.float32),
        "one_i": np.array(1, np.int64),
        "zero_i": np.array(0, np.int64),
        "axes_last": np.array([-1], np.int64),
        "axes_0": np.array([0], np.int64),
        "axes_1": np.array([1], np.int64),
        "axes_2": np.array([2], np.int64),
        # 0 copies the batch dimension of the input: the batch is symbolic, as in real exports.
        "q_shape": np.array([0, -1, cfg.heads, cfg.head_dim], np.int64),
        "kv_shape": np.array([0, -1, cfg.kv_heads, cfg.head_dim], np.int64),
        "merge_shape": np.array([0, -1, cfg.hidden], np.int64),
        "half_start": np.array([0], np.int64),
        "half_mid": np.array([cfg.head_dim // 2], np.int64),
        "half_end": np.array([cfg.head_dim], np.int64),
        "scale": np.array(1 / np.sqrt(cfg.head_dim), np.float32),
        "rep_shape": np.array([1, cfg.kv_heads, cfg.heads // cfg.kv_heads, 1, 1], np.int64),
        "heads_shape": np.array([0, cfg.heads, -1, cfg.head_dim], np.int64),
    }
    inits += [numpy_helper.from_array(v, k) for k, v in consts.items()]

    def node(op: str, inputs: list[str], output: str, domain: str = "", **attrs: Any) -> str:
        nodes.append(helper.make_node(op, inputs, [output], domain=domain, **attrs))
        return output

    def rms(x: str, weight: str, name: str) -> str:
        sq = node("Mul", [x, x], f"{name}.sq")
        mean = node("ReduceMean", [sq], f"{name}.mean", axes=[-1], keepdims=1)
        root = node("Sqrt", [node("Add", [mean, "eps"], f"{name}.var")], f"{name}.root")
        return node("Mul", [node("Div", [x, root], f"{name}.unit"), weight], f"{name}.out")

    x = node("Gather", ["embed", "input_ids"], "x0", axis=0)
    if layout == "gqa":
        # What GroupQueryAttention needs, derived from the attention mask as onnxruntime-genai does:
        # seqlens_k = tokens in the cache after this step - 1; total = the mask's length.
        total = node("ReduceSum", ["attention_mask", "axes_1"], "mask_sum", keepdims=0)
        seqlens = node(
            "Cast", [node("Sub", [total, "one_i"], "seqlens64")], "seqlens_k", to=TensorProto.INT32
        )
        shape = node("Shape", ["attention_mask"], "mask_shape")
        total_len = node(
            "Cast", [node("Gather", [shape, "one_i"], "total64", axis=0)], "total_len", to=TensorProto.INT32
        )
    else:
        # Rotary tables at each query's position, and the additive mask: a key is visible if
        # it is at or before the query's position and the attention mask keeps it.
        cos_q = node(
            "Unsqueeze", [node("Gather", ["cos_cache", "position_ids"], "cos_g", axis=0), "axes_1"], "cos_q"
        )
        sin_q = node(
            "Unsqueeze", [node("Gather", ["sin_cache", "position_ids"], "sin_g", axis=0), "axes_1"], "sin_q"
        )
        # A key's position is the count of kept keys before it (the cumulative sum of the
        # mask), not its index in the cache: rows of a batch have different past lengths, and
        # a row's cache may hold positions it dropped (masked out), so index and position differ.
        counted = node("CumSum", ["attention_mask", "one_i"], "mask_cumsum")
        key_pos = node("Unsqueeze", [node("Sub", [counted, "one_i"], "key_pos2"), "axes_1"], "key_pos")
        query_pos = node("Unsqueeze", ["position_ids", "axes_last"], "query_pos")  # [B, S, 1]
        causal = node("LessOrEqual", [key_pos, query_pos], "causal")  # [B, S, T]
        kept = node(
            "Unsqueeze",
            [node("Cast", ["attention_mask"], "mask_bool", to=TensorProto.BOOL), "axes_1"],
            "kept",
        )
        visible = node("Unsqueeze", [node("And", [causal, kept], "visible3"), "axes_1"], "visible")
        bias = node("Where", [visible, "zero_f", "minus_inf"], "bias")  # [1, 1, S, T]

    def rotate(t: str, name: str) -> str:
        a = node("Slice", [t, "half_start", "half_mid", "axes_last"], f"{name}.a")
        b = node("Slice", [t, "half_mid", "half_end", "axes_last"], f"{name}.b")
        ra = node(
            "Sub",
            [node("Mul", [a, cos_q], f"{name}.ac"), node("Mul", [b, sin_q], f"{name}.bs")],
            f"{name}.ra",
        )
        rb = node(
            "Add",
            [node("Mul", [b, cos_q], f"{name}.bc"), node("Mul", [a, sin_q], f"{name}.as")],
            f"{name}.rb",
        )
        return node("Concat", [ra, rb], f"{name}.rot", axis=-1)

    def repeat_kv(t: str, name: str) -> str:
        """[1, kv_heads, T, d] -> [1, heads, T, d]: each KV head serves a group of query heads."""
        if cfg.heads == cfg.kv_heads:
            return t
        wide = node("Expand", [node("Unsqueeze", [t, "axes_2"], f"{name}5"), "rep_shape"], f"{name}x")
        return node("Reshape", [wide, "heads_shape"], f"{name}rep")

    batch = "batch_size"  # symbolic, as optimum and the genai model builder export it
    inputs = [
        helper.make_tensor_value_info("input_ids", i64, [batch, "sequence_length"]),
        helper.make_tensor_value_info("attention_mask", i64, [batch, "total_sequence_length"]),
        helper.make_tensor_value_info("position_ids", i64, [batch, "sequence_length"]),
    ]
    outputs = [helper.make_tensor_value_info("logits", f32, [batch, "sequence_length", cfg.vocab])]
    kv_type = f32 if kv_dtype == "float32" else TensorProto.FLOAT16
    half = kv_type != f32
    cache_len = cfg.max_seq_len if layout == "gqa" else "past_sequence_length"
    present_len = cfg.max_seq_len if layout == "gqa" else "total_sequence_length"
    for i in range(cfg.layers):
        p = f"l{i}"
        for kind in ("key", "value"):
            inputs.append(
                helper.make_tensor_value_info(
                    f"past_key_values.{i}.{kind}", kv_type, [batch, cfg.kv_heads, cache_len, cfg.head_dim]
                )
            )
            outputs.append(
                helper.make_tensor_value_info(
                    f"present.{i}.{kind}", kv_type, [batch, cfg.kv_heads, present_len, cfg.head_dim]
                )
            )
        h = rms(x, f"{p}.attn_norm", f"{p}.n1")
        q = node("MatMul", [h, f"{p}.wq"], f"{p}.q")
        k = node("MatMul", [h, f"{p}.wk"], f"{p}.k")
        v = node("MatMul", [h, f"{p}.wv"], f"{p}.v")
        if layout == "gqa":
            if half:  # the op runs in the cache's type: it writes straight into the buffer
                q, k, v = (node("Cast", [t], f"{t}16", to=kv_type) for t in (q, k, v))
            gqa_in = [q, k, v, f"past_key_values.{i}.key", f"past_key_values.{i}.value", seqlens, total_len,
                      "cos_cache", "sin_cache"]  # fmt: skip
            gqa_out = [f"{p}.attn16" if half else f"{p}.attn", f"present.{i}.key", f"present.{i}.value"]
            nodes.append(helper.make_node("GroupQueryAttention", gqa_in, gqa_out, domain="com.microsoft",
                                          num_heads=cfg.heads, kv_num_heads=cfg.kv_heads, do_rotary=1,
                                          rotary_interleaved=0))  # fmt: skip
            attn = node("Cast", [f"{p}.attn16"], f"{p}.attn", to=f32) if half else f"{p}.attn"
        else:
            qh = node("Transpose", [node("Reshape", [q, "q_shape"], f"{p}.q4")], f"{p}.qh", perm=[0, 2, 1, 3])
            kh = node(
                "Transpose", [node("Reshape", [k, "kv_shape"], f"{p}.k4")], f"{p}.kh", perm=[0, 2, 1, 3]
            )
            vh = node(
                "Transpose", [node("Reshape", [v, "kv_shape"], f"{p}.v4")], f"{p}.vh", perm=[0, 2, 1, 3]
            )
            qh, kh = rotate(qh, f"{p}.qr"), rotate(kh, f"{p}.kr")
            if half:  # the cache is float16 at its boundary, float32 inside
                past_k = node("Cast", [f"past_key_values.{i}.key"], f"{p}.pk", to=f32)
                past_v = node("Cast", [f"past_key_values.{i}.value"], f"{p}.pv", to=f32)
                k_all = node("Concat", [past_k, kh], f"{p}.k_all", axis=2)
                v_all = node("Concat", [past_v, vh], f"{p}.v_all", axis=2)
                node("Cast", [k_all], f"present.{i}.key", to=kv_type)
                node("Cast", [v_all], f"present.{i}.value", to=kv_type)
            else:
                k_all = node("Concat", [f"past_key_values.{i}.key", kh], f"present.{i}.key", axis=2)
                v_all = node("Concat", [f"past_key_values.{i}.value", vh], f"present.{i}.value", axis=2)
            k_rep, v_rep = repeat_kv(k_all, f"{p}.k"), repeat_kv(v_all, f"{p}.v")
            kt = node("Transpose", [k_rep], f"{p}.kt", perm=[0, 1, 3, 2])
            scores = node(
                "Add",
                [node("Mul", [node("MatMul", [qh, kt], f"{p}.qk"), "scale"], f"{p}.qks"), bias],
                f"{p}.scores",
            )
            probs = node("Softmax", [scores], f"{p}.probs", axis=-1)
            ctx = node(
                "Transpose", [node("MatMul", [probs, v_rep], f"{p}.ctx4")], f"{p}.ctx", perm=[0, 2, 1, 3]
            )
            attn = node("Reshape", [ctx, "merge_shape"], f"{p}.attn")
        x = node("Add", [x, node("MatMul", [attn, f"{p}.wo"], f"{p}.o")], f"{p}.x1")
        h = rms(x, f"{p}.mlp_norm", f"{p}.n2")
        gate = node("MatMul", [h, f"{p}.gate"], f"{p}.g")
        silu = node("Mul", [gate, node("Sigmoid", [gate], f"{p}.gs")], f"{p}.silu")
        up = node("MatMul", [h, f"{p}.up"], f"{p}.u")
        x = node(
            "Add", [x, node("MatMul", [node("Mul", [silu, up], f"{p}.gu"), f"{p}.down"], f"{p}.d")], f"{p}.x2"
        )
    node("MatMul", [rms(x, "final_norm", "nf"), "lm_head"], "logits")
    graph = helper.make_graph(nodes, f"tiny_lm_{layout}", inputs, outputs, inits)
    opsets = [helper.make_opsetid("", 17)] + (
        [helper.make_opsetid("com.microsoft", 1)] if layout == "gqa" else []
    )
    model = helper.make_model(graph, opset_imports=opsets, producer_name="edgepipe make_tiny_lm")
    model.ir_version = 8
    return model


def write(folder: Path, cfg: TinyConfig, layout: str, kv_dtype: str = "float32") -> Path:
    """``folder/model.onnx`` (with external weights when large), ``config.json``, ``tokenizer.json``."""
    import onnx

    folder.mkdir(parents=True, exist_ok=True)
    model = build(cfg, layout, kv_dtype)
    path = folder / "model.onnx"
    large = cfg.parameters() * 4 > 1_500_000_000
    onnx.save_model(model, str(path), save_as_external_data=large, location="model.onnx.data")  # type: ignore[arg-type]
    config = {
        "model_type": "edgepipe-tiny",
        "layout": layout,
        "kv_dtype": kv_dtype,
        "vocab_size": cfg.vocab,
        "hidden_size": cfg.hidden,
        "num_hidden_layers": cfg.layers,
        "num_attention_heads": cfg.heads,
        "num_key_value_heads": cfg.kv_heads,
        "head_dim": cfg.head_dim,
        "intermediate_size": cfg.ffn,
        "max_position_embeddings": cfg.max_seq_len,
        "rope_theta": cfg.rope_theta,
        "rms_norm_eps": cfg.rms_eps,
        "bos_token_id": BOS,
        "eos_token_id": EOS,
        "pad_token_id": PAD,
        "edgepipe": {"seed": cfg.seed, "parameters": cfg.parameters(), **asdict(cfg)},
    }
    (folder / "config.json").write_text(json.dumps(config, indent=2))
    (folder / "tokenizer.json").write_text(json.dumps(byte_tokenizer_json(SPECIAL), indent=1))
    return path


SIZE_FLAGS = ("vocab", "hidden", "layers", "heads", "kv_heads", "ffn", "max_seq_len", "seed")
"""TinyConfig fields the scripts take as ``--flags`` (``kv_heads`` as ``--kv-heads``)."""


def add_size_flags(parser: Any, defaults: TinyConfig, skip: tuple[str, ...] = ()) -> None:
    """``--vocab``, ``--hidden`` ... on an argparse parser, with ``defaults``' values."""
    for name in SIZE_FLAGS:
        if name not in skip:
            parser.add_argument("--" + name.replace("_", "-"), type=int, default=getattr(defaults, name))


def config_from_flags(args: Any, **overrides: Any) -> TinyConfig:
    """The TinyConfig that parsed ``--flags`` (and ``overrides``) describe."""
    values = {name: getattr(args, name) for name in SIZE_FLAGS if hasattr(args, name)}
    return TinyConfig(**{**values, **overrides})
