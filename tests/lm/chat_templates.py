"""Chat templates as the models' ``tokenizer_config.json`` holds them (after JSON decoding), the
parts a one-turn prompt goes through kept as the models write them (tool calling left out),
and the prompt Hugging Face's ``apply_chat_template`` renders from each for one user turn.

Qwen2.5 writes its newlines as ``\\n`` escapes inside Jinja strings; SmolLM2, Gemma and Phi as
newline characters: both kinds are here.
"""

from __future__ import annotations

QWEN25 = r"""{%- if tools %}
    {{- '<|im_start|>system\n' }}
    {%- if messages[0]['role'] == 'system' %}
        {{- messages[0]['content'] }}
    {%- else %}
        {{- 'You are Qwen, created by Alibaba Cloud. You are a helpful assistant.' }}
    {%- endif %}
{%- else %}
    {%- if messages[0]['role'] == 'system' %}
        {{- '<|im_start|>system\n' + messages[0]['content'] + '<|im_end|>\n' }}
    {%- else %}
        {{- '<|im_start|>system\nYou are Qwen, created by Alibaba Cloud. You are a helpful assistant.<|im_end|>\n' }}
    {%- endif %}
{%- endif %}
{%- for message in messages %}
    {%- if (message.role == "user") or (message.role == "system" and not loop.first) %}
        {{- '<|im_start|>' + message.role + '\n' + message.content + '<|im_end|>' + '\n' }}
    {%- endif %}
{%- endfor %}
{%- if add_generation_prompt %}
    {{- '<|im_start|>assistant\n' }}
{%- endif %}
"""

SMOLLM2 = (
    "{% for message in messages %}{% if loop.first and messages[0]['role'] != 'system' %}"
    "{{ '<|im_start|>system\nYou are a helpful AI assistant named SmolLM, trained by Hugging Face<|im_end|>\n' }}"
    "{% endif %}{{'<|im_start|>' + message['role'] + '\n' + message['content'] + '<|im_end|>' + '\n'}}"
    "{% endfor %}{% if add_generation_prompt %}{{ '<|im_start|>assistant\n' }}{% endif %}"
)

QWEN3 = (
    "{%- if messages[0].role == 'system' %}{{- '<|im_start|>system\\n' + messages[0].content + '<|im_end|>\\n' }}"
    "{%- endif %}{%- for message in messages %}{%- if message.role == 'user' %}"
    "{{- '<|im_start|>' + message.role + '\\n' + message.content + '<|im_end|>' + '\\n' }}{%- endif %}"
    "{%- endfor %}{%- if add_generation_prompt %}{{- '<|im_start|>assistant\\n' }}{%- endif %}"
)
"""No default system prompt."""

LLAMA32 = """{{- bos_token }}
{%- if not date_string is defined %}
    {%- if strftime_now is defined %}
        {%- set date_string = strftime_now("%d %b %Y") %}
    {%- else %}
        {%- set date_string = "26 Jul 2024" %}
    {%- endif %}
{%- endif %}
{%- if messages[0]['role'] == 'system' %}
    {%- set system_message = messages[0]['content']|trim %}
    {%- set messages = messages[1:] %}
{%- else %}
    {%- set system_message = "" %}
{%- endif %}
{{- "<|start_header_id|>system<|end_header_id|>\\n\\n" }}
{{- "Cutting Knowledge Date: December 2023\\n" }}
{{- "Today Date: " + date_string + "\\n\\n" }}
{{- system_message }}
{{- "<|eot_id|>" }}
{%- for message in messages %}
    {{- '<|start_header_id|>' + message['role'] + '<|end_header_id|>\\n\\n'+ message['content'] | trim + '<|eot_id|>' }}
{%- endfor %}
{%- if add_generation_prompt %}
    {{- '<|start_header_id|>assistant<|end_header_id|>\\n\\n' }}
{%- endif %}
"""
"""Llama 3.2: today's date (``strftime_now``)."""

LLAMA31 = LLAMA32.replace(
    """    {%- if strftime_now is defined %}
        {%- set date_string = strftime_now("%d %b %Y") %}
    {%- else %}
        {%- set date_string = "26 Jul 2024" %}
    {%- endif %}""",
    """    {%- set date_string = "26 Jul 2024" %}""",
)
"""Llama 3.1: a fixed date."""

LLAMA3 = (
    "{% set loop_messages = messages %}{% for message in loop_messages %}"
    "{% set content = '<|start_header_id|>' + message['role'] + '<|end_header_id|>\n\n'"
    "+ message['content'] | trim + '<|eot_id|>' %}{% if loop.index0 == 0 %}{% set content = bos_token + content %}"
    "{% endif %}{{ content }}{% endfor %}{% if add_generation_prompt %}"
    "{{ '<|start_header_id|>assistant<|end_header_id|>\n\n' }}{% endif %}"
)

GEMMA2 = (
    "{{ bos_token }}{% if messages[0]['role'] == 'system' %}{{ raise_exception('System role not supported') }}"
    "{% endif %}{% for message in messages %}{% if (message['role'] == 'assistant') %}{% set role = 'model' %}"
    "{% else %}{% set role = message['role'] %}{% endif %}"
    "{{ '<start_of_turn>' + role + '\n' + message['content'] | trim + '<end_of_turn>\n' }}{% endfor %}"
    "{% if add_generation_prompt %}{{'<start_of_turn>model\n'}}{% endif %}"
)

PHI35 = (
    "{% for message in messages %}{% if message['role'] == 'system' and message['content'] %}"
    "{{'<|system|>\n' + message['content'] + '<|end|>\n'}}{% elif message['role'] == 'user' %}"
    "{{'<|user|>\n' + message['content'] + '<|end|>\n'}}{% elif message['role'] == 'assistant' %}"
    "{{'<|assistant|>\n' + message['content'] + '<|end|>\n'}}{% endif %}{% endfor %}"
    "{% if add_generation_prompt %}{{ '<|assistant|>\n' }}{% else %}{{ eos_token }}{% endif %}"
)

PHI4_MINI = (
    "{% for message in messages %}{{ '<|' + message['role'] + '|>' + message['content'] + '<|end|>' }}"
    "{% endfor %}{% if add_generation_prompt %}{{ '<|assistant|>' }}{% else %}{{ eos_token }}{% endif %}"
)

USER = "  Two faces near the gate.  "
"""With the spaces Llama's and Gemma's ``| trim`` take off."""

TODAY = "{today}"
"""Where the rendered prompt has today's date (``strftime_now("%d %b %Y")``)."""

CASES = {
    # name: (template, bos_token, the special tokens, end of turn, the prompt for USER)
    "qwen2.5": (QWEN25, None, ["<|im_start|>", "<|im_end|>"], "<|im_end|>",
                "<|im_start|>system\nYou are Qwen, created by Alibaba Cloud. You are a helpful assistant.<|im_end|>\n"
                f"<|im_start|>user\n{USER}<|im_end|>\n<|im_start|>assistant\n"),
    "smollm2": (SMOLLM2, "<|im_start|>", ["<|im_start|>", "<|im_end|>"], "<|im_end|>",
                "<|im_start|>system\nYou are a helpful AI assistant named SmolLM, trained by Hugging Face<|im_end|>\n"
                f"<|im_start|>user\n{USER}<|im_end|>\n<|im_start|>assistant\n"),
    "qwen3": (QWEN3, None, ["<|im_start|>", "<|im_end|>"], "<|im_end|>",
              f"<|im_start|>user\n{USER}<|im_end|>\n<|im_start|>assistant\n"),
    "llama3.2": (LLAMA32, "<|begin_of_text|>", ["<|begin_of_text|>", "<|start_header_id|>", "<|end_header_id|>",
                 "<|eot_id|>"], "<|eot_id|>",
                 "<|begin_of_text|><|start_header_id|>system<|end_header_id|>\n\nCutting Knowledge Date: December 2023\n"
                 f"Today Date: {TODAY}\n\n<|eot_id|><|start_header_id|>user<|end_header_id|>\n\n{USER.strip()}<|eot_id|>"
                 "<|start_header_id|>assistant<|end_header_id|>\n\n"),
    "llama3.1": (LLAMA31, "<|begin_of_text|>", ["<|begin_of_text|>", "<|start_header_id|>", "<|end_header_id|>",
                 "<|eot_id|>"], "<|eot_id|>",
                 "<|begin_of_text|><|start_header_id|>system<|end_header_id|>\n\nCutting Knowledge Date: December 2023\n"
                 f"Today Date: 26 Jul 2024\n\n<|eot_id|><|start_header_id|>user<|end_header_id|>\n\n{USER.strip()}"
                 "<|eot_id|><|start_header_id|>assistant<|end_header_id|>\n\n"),
    "llama3": (LLAMA3, "<|begin_of_text|>", ["<|begin_of_text|>", "<|start_header_id|>", "<|end_header_id|>",
               "<|eot_id|>"], "<|eot_id|>",
               f"<|begin_of_text|><|start_header_id|>user<|end_header_id|>\n\n{USER.strip()}<|eot_id|>"
               "<|start_header_id|>assistant<|end_header_id|>\n\n"),
    "gemma2": (GEMMA2, "<bos>", ["<bos>", "<start_of_turn>", "<end_of_turn>"], "<end_of_turn>",
               f"<bos><start_of_turn>user\n{USER.strip()}<end_of_turn>\n<start_of_turn>model\n"),
    "phi3.5": (PHI35, "<s>", ["<s>", "<|system|>", "<|user|>", "<|assistant|>", "<|end|>"], "<|end|>",
               f"<|user|>\n{USER}<|end|>\n<|assistant|>\n"),
    "phi4-mini": (PHI4_MINI, "<|endoftext|>", ["<|system|>", "<|user|>", "<|assistant|>", "<|end|>"], "<|end|>",
                  f"<|user|>{USER}<|end|><|assistant|>"),
}  # fmt: skip
