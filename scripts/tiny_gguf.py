"""A tiny llama-architecture GGUF for llama-server in the tests: random weights, a vocabulary
of single characters with llama.cpp's SPM tokenizer metadata, and a ChatML chat template.

    python scripts/tiny_gguf.py tiny.gguf [--ctx 256] [--eos]

The weights are random (std 0.02) but steered: every token's embedding carries a large
constant in its first dimension, so the last hidden state points there whatever the prompt,
and the output matrix's first column acts as a per-token bias. Greedy decoding then writes
``favor`` ("a") again and again, up to ``max_tokens`` (``finish_reason: length``); with
``eos=True`` the end-of-sequence token wins at once (``stop``). Byte, unknown and control tokens
are never chosen, so the text is printable ASCII. Prompts cost one token per character plus two
(the start token and SPM's leading space), so a test can size one past the context exactly.
Needs the ``gguf`` package (the dev extra).
"""

from __future__ import annotations

import argparse
from pathlib import Path

import numpy as np

SPACE = "\u2581"
CHATML = (
    "{% for message in messages %}{{ '<|im_start|>' + message.role + '\\n' + message.content + "
    "'<|im_end|>\\n' }}{% endfor %}{% if add_generation_prompt %}{{ '<|im_start|>assistant\\n' }}{% endif %}"
)


def vocabulary() -> tuple[list[str], list[float], list[int]]:
    """Tokens, scores and types: unknown, start, end, the 256 byte fallbacks, SPM's space and
    the printable ASCII characters."""
    from gguf import TokenType

    tokens = ["<unk>", "<s>", "</s>", *(f"<0x{b:02X}>" for b in range(256)), SPACE]
    types = [
        TokenType.UNKNOWN,
        TokenType.CONTROL,
        TokenType.CONTROL,
        *[TokenType.BYTE] * 256,
        TokenType.NORMAL,
    ]
    tokens += [chr(c) for c in range(0x21, 0x7F)]
    types += [TokenType.NORMAL] * (0x7F - 0x21)
    scores = [0.0] * 259 + [-1.0] + [-2.0 - i for i in range(0x7F - 0x21)]
    return tokens, scores, [int(t) for t in types]


def write(path: Path, *, ctx: int = 256, eos: bool = False, favor: str = "a", seed: int = 0, embd: int = 64,
          layers: int = 2, heads: int = 4, kv_heads: int = 2, ff: int = 128) -> Path:  # fmt: skip
    """Write the model to ``path``; ``path``."""
    import gguf

    tokens, scores, types = vocabulary()
    vocab = len(tokens)
    head = embd // heads
    rng = np.random.default_rng(seed)

    def weights(*shape: int, std: float = 0.02) -> np.ndarray:
        return (rng.standard_normal(shape) * std).astype(np.float32)

    # gguf writes numpy shapes reversed: (rows, columns) here is llama.cpp's {columns, rows}.
    embedding = weights(vocab, embd, std=0.01)
    embedding[:, 0] = 10.0
    output = weights(vocab, embd, std=0.01)
    bias = np.full(vocab, 0.5, dtype=np.float32)
    bias[:259] = -5.0  # unknown, start, bytes: never
    bias[2] = 2.0 if eos else -1.0
    bias[tokens.index(favor)] = 1.0
    output[:, 0] = bias
    tensors = {"token_embd.weight": embedding, "output_norm.weight": np.ones(embd, np.float32),
               "output.weight": output}  # fmt: skip
    for i in range(layers):
        tensors |= {
            f"blk.{i}.attn_norm.weight": np.ones(embd, np.float32),
            f"blk.{i}.attn_q.weight": weights(heads * head, embd),
            f"blk.{i}.attn_k.weight": weights(kv_heads * head, embd),
            f"blk.{i}.attn_v.weight": weights(kv_heads * head, embd),
            f"blk.{i}.attn_output.weight": weights(embd, heads * head),
            f"blk.{i}.ffn_norm.weight": np.ones(embd, np.float32),
            f"blk.{i}.ffn_gate.weight": weights(ff, embd),
            f"blk.{i}.ffn_up.weight": weights(ff, embd),
            f"blk.{i}.ffn_down.weight": weights(embd, ff),
        }
    writer = gguf.GGUFWriter(str(path), arch="llama")
    writer.add_name("edgepipe-tiny-test")
    writer.add_file_type(gguf.LlamaFileType.ALL_F32)
    writer.add_context_length(ctx)
    writer.add_embedding_length(embd)
    writer.add_block_count(layers)
    writer.add_feed_forward_length(ff)
    writer.add_head_count(heads)
    writer.add_head_count_kv(kv_heads)
    writer.add_rope_dimension_count(head)
    writer.add_layer_norm_rms_eps(1e-5)
    writer.add_rope_freq_base(10000.0)
    writer.add_vocab_size(vocab)
    writer.add_tokenizer_model("llama")
    writer.add_token_list(tokens)
    writer.add_token_scores(scores)
    writer.add_token_types(types)
    writer.add_unk_token_id(0)
    writer.add_bos_token_id(1)
    writer.add_eos_token_id(2)
    writer.add_add_bos_token(True)
    writer.add_add_eos_token(False)
    writer.add_chat_template(CHATML)
    for name, array in tensors.items():
        writer.add_tensor(name, array)
    writer.write_header_to_file()
    writer.write_kv_data_to_file()
    writer.write_tensors_to_file()
    writer.close()
    return path


def prompt_tokens(text: str) -> int:
    """Tokens llama-server counts for ``text`` as the rendered prompt (one per character)."""
    return 2 + len(text)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("path", type=Path)
    parser.add_argument("--ctx", type=int, default=256)
    parser.add_argument("--eos", action="store_true", help="the end token wins at once")
    args = parser.parse_args()
    print(write(args.path, ctx=args.ctx, eos=args.eos))


if __name__ == "__main__":
    main()
