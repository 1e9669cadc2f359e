"""A chat model's prompt format, read from its folder: one user turn in, the text the model was
trained to answer after.

An instruct model answers what comes after its own turn markers; prompted with bare text it
rambles. Hugging Face keeps the format as a Jinja template (``chat_template`` in
``tokenizer_config.json``, or a ``chat_template.jinja`` beside it). edgepipe runs no Jinja: it
recognises the four formats small instruct models use and writes their one-turn prompt itself,
as ``tokenizer.apply_chat_template(messages, add_generation_prompt=True)`` renders it:

- ``chatml`` (``<|im_start|>`` / ``<|im_end|>``: Qwen2, Qwen2.5, Qwen3, SmolLM2): the system
  turn the template writes when none is given (Qwen2.5: "You are Qwen, created by Alibaba
  Cloud. You are a helpful assistant.", SmolLM2 its own), read from the template;
- ``llama3`` (``<|start_header_id|>`` / ``<|eot_id|>``: Llama 3, 3.1, 3.2): 3.1 and later write
  a system turn with "Cutting Knowledge Date" and today's date (the template's fixed date when
  it has no ``strftime_now``);
- ``gemma`` (``<start_of_turn>`` / ``<end_of_turn>``: Gemma 2, 3): system text goes before the
  user's text in the user turn, as Gemma 3's template puts it;
- ``phi3`` (``<|user|>`` / ``<|end|>`` / ``<|assistant|>``: Phi-3, Phi-3.5, Phi-4-mini).

The start token (BOS) is in the prompt exactly when the template writes ``bos_token``, and the
text is tokenized without the tokenizer's own special tokens (as ``apply_chat_template`` does):
never twice. The format's end-of-turn token ends generation like an end-of-sequence token.

A template of none of these (or none at all) leaves prompts as they are written, with one info
line at load saying so.
"""

from __future__ import annotations

import json
import logging
import re
import time
from collections.abc import Callable
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Any

from edgepipe.lm.errors import TokenizerMismatch

log = logging.getLogger(__name__)

TokenId = Callable[[str], "int | None"]
"""A token's text -> its id in the tokenizer (None: no such token)."""

_MARKERS = {
    "chatml": ("<|im_start|>", "<|im_end|>"),
    "llama3": ("<|start_header_id|>", "<|end_header_id|>", "<|eot_id|>"),
    "gemma": ("<start_of_turn>", "<end_of_turn>"),
    "phi3": ("<|end|>", "<|assistant|>"),
}
"""What a template must contain (and the tokenizer have as tokens) to be each format."""

_END = {"chatml": "<|im_end|>", "llama3": "<|eot_id|>", "gemma": "<end_of_turn>", "phi3": "<|end|>"}

_CHATML_SYSTEM = re.compile(r"<\|im_start\|>system(?:\\n|\n)([^'\"{}]*?)<\|im_end\|>")
"""A system turn written as one literal in the template: its text is the default system prompt
(``messages[0]['content']`` in between would break the literal)."""
_LLAMA_DATE = re.compile(r"set date_string = [\"']([^\"']+)[\"']")
_LLAMA_DATE_DEFAULT = "26 Jul 2024"


@dataclass(frozen=True, slots=True)
class ChatFormat:
    """How one model wants a single user turn, and the token that ends its answer."""

    name: str
    """``chatml``, ``llama3``, ``gemma`` or ``phi3``."""
    end_token: str
    """The end-of-turn token's text (``<|im_end|>`` ...)."""
    end_id: int
    """Its id: it ends generation."""
    bos: str = ""
    """The start token's text where the template writes one, else ''."""
    default_system: str | None = None
    """The system text the template writes when the request gives none (None: no system turn)."""
    dated: bool = False
    """Llama 3.1+: a system turn with the knowledge cut-off and the date, always."""
    date: str | None = None
    """The date a dated template writes; None: today (its ``strftime_now``)."""
    newlines: bool = True
    """Phi: a newline after each role token (Phi-3, 3.5); Phi-4-mini writes none."""

    def render(self, user: str, system: str | None = None) -> str:
        """The prompt text: ``system`` (None: the template's default, if any), the user turn
        and the start of the model's turn."""
        system = self.default_system if system is None else system
        if self.name == "chatml":
            head = "" if system is None else f"<|im_start|>system\n{system}<|im_end|>\n"
            return f"{self.bos}{head}<|im_start|>user\n{user}<|im_end|>\n<|im_start|>assistant\n"
        if self.name == "llama3":
            head = ""
            if self.dated:
                date = self.date or time.strftime("%d %b %Y")
                text = (
                    f"Cutting Knowledge Date: December 2023\nToday Date: {date}\n\n{(system or '').strip()}"
                )
                head = _llama_turn("system", text)
            elif system is not None:
                head = _llama_turn("system", system.strip())
            reply = "<|start_header_id|>assistant<|end_header_id|>\n\n"
            return f"{self.bos}{head}{_llama_turn('user', user.strip())}{reply}"
        if self.name == "gemma":
            prefix = f"{system}\n\n" if system else ""
            return (
                f"{self.bos}<start_of_turn>user\n{prefix}{user.strip()}<end_of_turn>\n<start_of_turn>model\n"
            )
        nl = "\n" if self.newlines else ""
        head = f"<|system|>{nl}{system}<|end|>{nl}" if system else ""
        return f"{self.bos}{head}<|user|>{nl}{user}<|end|>{nl}<|assistant|>{nl}"


def _llama_turn(role: str, text: str) -> str:
    return f"<|start_header_id|>{role}<|end_header_id|>\n\n{text}<|eot_id|>"


def read_tokenizer_config(folder: Path) -> dict[str, Any]:
    """``tokenizer_config.json`` in ``folder`` ({} without one). Raises
    :class:`TokenizerMismatch` for a file that is not a JSON object."""
    path = folder / "tokenizer_config.json"
    if not path.is_file():
        return {}
    try:
        data = json.loads(path.read_text(encoding="utf-8"))
    except (OSError, ValueError) as exc:
        raise TokenizerMismatch(f"{path} is not readable JSON: {exc}", model=str(folder)) from exc
    if not isinstance(data, dict):
        raise TokenizerMismatch(f"{path} is not a JSON object", model=str(folder))
    return data


def token_text(value: Any) -> str | None:
    """A special token as ``tokenizer_config.json`` writes it: a string or ``{"content": ...}``."""
    if isinstance(value, dict):
        value = value.get("content")
    return value if isinstance(value, str) and value else None


def chat_template(folder: Path, settings: dict[str, Any]) -> str | None:
    """The folder's chat template: ``chat_template`` in ``tokenizer_config.json`` (the one
    named ``default`` where it lists several), else ``chat_template.jinja`` (what newer
    ``transformers`` releases save)."""
    template = settings.get("chat_template")
    if isinstance(template, list):
        named = {t.get("name"): t.get("template") for t in template if isinstance(t, dict)}
        template = named.get("default")
    if isinstance(template, str) and template:
        return template
    path = folder / "chat_template.jinja"
    if path.is_file():
        try:
            return path.read_text(encoding="utf-8")
        except (OSError, ValueError) as exc:
            raise TokenizerMismatch(f"{path} cannot be read: {exc}", model=str(folder)) from exc
    return None


def detect(template: str, token_id: TokenId, bos_token: str | None = None) -> ChatFormat | None:
    """The format ``template`` writes, if it is one of the four and the tokenizer has its
    tokens; None otherwise. ``bos_token``: the tokenizer's start token text."""
    name = _format_name(template)
    if name is None:
        return None
    markers = _MARKERS[name] + (("<|user|>",) if name == "phi3" and "<|user|>" in template else ())
    if any(token_id(m) is None for m in markers):
        return None
    end_id = token_id(_END[name])
    assert end_id is not None  # among the markers
    bos = bos_token if bos_token and "bos_token" in template and token_id(bos_token) is not None else ""
    fmt = ChatFormat(name, _END[name], end_id, bos=bos)
    if name == "chatml":
        default = next((m.group(1) for m in _CHATML_SYSTEM.finditer(template)), None)
        fmt = replace(fmt, default_system=None if default is None else default.replace("\\n", "\n"))
    elif name == "llama3" and "Cutting Knowledge Date" in template:
        found = _LLAMA_DATE.search(template)
        date = None if "strftime_now" in template else (found.group(1) if found else _LLAMA_DATE_DEFAULT)
        fmt = replace(fmt, dated=True, date=date)
    elif name == "phi3":
        fmt = replace(fmt, newlines="<|user|>" in template)  # Phi-4-mini: '<|' + role + '|>', no newline
    return fmt


def _format_name(template: str) -> str | None:
    if "<|im_start|>" in template and "<|im_end|>" in template and "<|im_sep|>" not in template:
        return "chatml"
    if "<|start_header_id|>" in template and "<|eot_id|>" in template:
        return "llama3"
    if "<start_of_turn>" in template and "<end_of_turn>" in template:
        return "gemma"
    roles = "<|user|>" in template or "'<|' + message['role'] + '|>'" in template
    if roles and "<|end|>" in template and "<|assistant|>" in template:
        return "phi3"
    return None


def load_chat(folder: Path, token_id: TokenId) -> ChatFormat | None:
    """The chat format of the model in ``folder``, or None (one info line says why: prompts
    then go to the model as written)."""
    settings = read_tokenizer_config(folder)
    template = chat_template(folder, settings)
    if template is None:
        log.info("%s has no chat template: prompts go to the model as written", folder)
        return None
    fmt = detect(template, token_id, token_text(settings.get("bos_token")))
    if fmt is None:
        log.info(
            "%s: its chat template is none edgepipe knows (ChatML, Llama 3, Gemma, Phi-3): "
            "prompts go to the model as written", folder,
        )  # fmt: skip
    return fmt
