#!/usr/bin/env python3
"""Writes the expected data of the model families' tokenizer steps, from HF's own libraries:
 - tests/engine/chat_template_test_data.inc: chat template sources, conversations and
   transformers' renderings;
 - tests/engine/normalizer_test_data.inc: texts and what HF tokenizers' NFC/NFD/NFKC/NFKD
   normalizers make of them.

    python3 -m venv /tmp/venv && /tmp/venv/bin/pip install transformers jinja2 tokenizers
    /tmp/venv/bin/python scripts/make_family_tokenizer_test_data.py

The template sources are the families' published tokenizer_config.json `chat_template` strings:
Mistral Nemo's and Gemma 2's verbatim as llama.cpp keeps them in models/templates; Llama 3.1's
and 3.2's without the tool branches kvattn does not render (3.2 differs from 3.1 only in taking
today's date through strftime_now); Qwen2, Qwen2.5, Mistral v0.1 / v0.2 ("v1") / v0.3 and
Gemma 3 as published (v0.3 is Nemo's with "[INST] " and a trimmed assistant after a space). Rendering goes through
transformers.utils.chat_template_utils.render_jinja_template, which is what
apply_chat_template calls (same sandbox, trim_blocks/lstrip_blocks, raise_exception,
strftime_now), with the special tokens the tokenizer would pass.
"""
import argparse
import json
import pathlib

import tokenizers
import transformers
from transformers.utils.chat_template_utils import render_jinja_template

LLAMA3 = (
    "{% set loop_messages = messages %}{% for message in loop_messages %}{% set content = "
    "'<|start_header_id|>' + message['role'] + '<|end_header_id|>\n\n'+ message['content'] | trim "
    "+ '<|eot_id|>' %}{% if loop.index0 == 0 %}{% set content = bos_token + content %}{% endif %}"
    "{{ content }}{% endfor %}{% if add_generation_prompt %}{{ '<|start_header_id|>assistant"
    "<|end_header_id|>\n\n' }}{% endif %}")

LLAMA31 = """{{- bos_token }}
{%- if custom_tools is defined %}
    {%- set tools = custom_tools %}
{%- endif %}
{%- if not tools_in_user_message is defined %}
    {%- set tools_in_user_message = true %}
{%- endif %}
{%- if not date_string is defined %}
    {%- set date_string = "26 Jul 2024" %}
{%- endif %}
{%- if not tools is defined %}
    {%- set tools = none %}
{%- endif %}

{#- This block extracts the system message, so we can slot it into the right place. #}
{%- if messages[0]['role'] == 'system' %}
    {%- set system_message = messages[0]['content']|trim %}
    {%- set messages = messages[1:] %}
{%- else %}
    {%- set system_message = "" %}
{%- endif %}

{#- System message + builtin tools #}
{{- "<|start_header_id|>system<|end_header_id|>\\n\\n" }}
{%- if builtin_tools is defined or tools is not none %}
    {{- "Environment: ipython\\n" }}
{%- endif %}
{%- if builtin_tools is defined %}
    {{- "Tools: " + builtin_tools | reject('equalto', 'code_interpreter') | join(", ") + "\\n\\n"}}
{%- endif %}
{{- "Cutting Knowledge Date: December 2023\\n" }}
{{- "Today Date: " + date_string + "\\n\\n" }}
{%- if tools is not none and not tools_in_user_message %}
    {{- "You have access to the following functions. To call a function, please respond with JSON for a function call." }}
    {{- 'Respond in the format {"name": function name, "parameters": dictionary of argument name and its value}.' }}
    {{- "Do not use variables.\\n\\n" }}
    {%- for t in tools %}
        {{- t | tojson(indent=4) }}
        {{- "\\n\\n" }}
    {%- endfor %}
{%- endif %}
{{- system_message }}
{{- "<|eot_id|>" }}

{%- for message in messages %}
    {%- if not (message.role == 'ipython' or message.role == 'tool' or 'tool_calls' in message) %}
        {{- '<|start_header_id|>' + message['role'] + '<|end_header_id|>\\n\\n'+ message['content'] | trim + '<|eot_id|>' }}
    {%- elif message.role == "tool" or message.role == "ipython" %}
        {{- "<|start_header_id|>ipython<|end_header_id|>\\n\\n" }}
        {%- if message.content is mapping or message.content is iterable %}
            {{- message.content | tojson }}
        {%- else %}
            {{- message.content }}
        {%- endif %}
        {{- "<|eot_id|>" }}
    {%- endif %}
{%- endfor %}
{%- if add_generation_prompt %}
    {{- '<|start_header_id|>assistant<|end_header_id|>\\n\\n' }}
{%- endif %}
"""

# Llama 3.2's system block: today's date through strftime_now unless date_string is given.
LLAMA32 = LLAMA31.replace(
    '    {%- set date_string = "26 Jul 2024" %}\n',
    '    {%- if strftime_now is defined %}\n'
    '        {%- set date_string = strftime_now("%d %b %Y") %}\n'
    '    {%- else %}\n'
    '        {%- set date_string = "26 Jul 2024" %}\n'
    '    {%- endif %}\n')

QWEN2 = (
    "{% for message in messages %}{% if loop.first and messages[0]['role'] != 'system' %}{{ "
    "'<|im_start|>system\nYou are a helpful assistant.<|im_end|>\n' }}{% endif %}{{'<|im_start|>' "
    "+ message['role'] + '\n' + message['content'] + '<|im_end|>' + '\n'}}{% endfor %}{% if "
    "add_generation_prompt %}{{ '<|im_start|>assistant\n' }}{% endif %}")

QWEN25 = """{%- if tools %}
    {{- '<|im_start|>system\\n' }}
    {%- if messages[0]['role'] == 'system' %}
        {{- messages[0]['content'] }}
    {%- else %}
        {{- 'You are Qwen, created by Alibaba Cloud. You are a helpful assistant.' }}
    {%- endif %}
    {{- "\\n\\n# Tools\\n\\nYou may call one or more functions to assist with the user query.\\n\\nYou are provided with function signatures within <tools></tools> XML tags:\\n<tools>" }}
    {%- for tool in tools %}
        {{- "\\n" }}
        {{- tool | tojson }}
    {%- endfor %}
    {{- "\\n</tools>\\n\\nFor each function call, return a json object with function name and arguments within <tool_call></tool_call> XML tags:\\n<tool_call>\\n{\\"name\\": <function-name>, \\"arguments\\": <args-json-object>}\\n</tool_call><|im_end|>\\n" }}
{%- else %}
    {%- if messages[0]['role'] == 'system' %}
        {{- '<|im_start|>system\\n' + messages[0]['content'] + '<|im_end|>\\n' }}
    {%- else %}
        {{- '<|im_start|>system\\nYou are Qwen, created by Alibaba Cloud. You are a helpful assistant.<|im_end|>\\n' }}
    {%- endif %}
{%- endif %}
{%- for message in messages %}
    {%- if (message.role == "user") or (message.role == "system" and not loop.first) or (message.role == "assistant" and not message.tool_calls) %}
        {{- '<|im_start|>' + message.role + '\\n' + message.content + '<|im_end|>' + '\\n' }}
    {%- elif message.role == "assistant" %}
        {{- '<|im_start|>' + message.role }}
        {%- if message.content %}
            {{- '\\n' + message.content }}
        {%- endif %}
        {%- for tool_call in message.tool_calls %}
            {%- if tool_call.function is defined %}
                {%- set tool_call = tool_call.function %}
            {%- endif %}
            {{- '\\n<tool_call>\\n{"name": "' }}
            {{- tool_call.name }}
            {{- '", "arguments": ' }}
            {{- tool_call.arguments | tojson }}
            {{- '}\\n</tool_call>' }}
        {%- endfor %}
        {{- '<|im_end|>\\n' }}
    {%- elif message.role == "tool" %}
        {%- if (loop.index0 == 0) or (messages[loop.index0 - 1].role != "tool") %}
            {{- '<|im_start|>user' }}
        {%- endif %}
        {{- '\\n<tool_response>\\n' }}
        {{- message.content }}
        {{- '\\n</tool_response>' }}
        {%- if loop.last or (messages[loop.index0 + 1].role != "tool") %}
            {{- '<|im_end|>\\n' }}
        {%- endif %}
    {%- endif %}
{%- endfor %}
{%- if add_generation_prompt %}
    {{- '<|im_start|>assistant\\n' }}
{%- endif %}
"""

# Mistral-7B-Instruct-v0.1 as first published: no system message.
MISTRAL_V01 = (
    "{{ bos_token }}{% for message in messages %}{% if (message['role'] == 'user') != "
    "(loop.index0 % 2 == 0) %}{{ raise_exception('Conversation roles must alternate "
    "user/assistant/user/assistant/...') }}{% endif %}{% if message['role'] == 'user' %}{{ "
    "'[INST] ' + message['content'] + ' [/INST]' }}{% elif message['role'] == 'assistant' %}{{ "
    "message['content'] + eos_token}}{% else %}{{ raise_exception('Only user and assistant roles "
    "are supported!') }}{% endif %}{% endfor %}")

# Mistral-7B-Instruct-v0.1/v0.2 as updated in 2024 (llama.cpp's "mistral-v1").
MISTRAL_V1 = """{%- if messages[0]['role'] == 'system' %}
    {%- set system_message = messages[0]['content'] %}
    {%- set loop_messages = messages[1:] %}
{%- else %}
    {%- set loop_messages = messages %}
{%- endif %}

{{- bos_token }}
{%- for message in loop_messages %}
    {%- if (message['role'] == 'user') != (loop.index0 % 2 == 0) %}
        {{- raise_exception('After the optional system message, conversation roles must alternate user/assistant/user/assistant/...') }}
    {%- endif %}
    {%- if message['role'] == 'user' %}
        {%- if loop.first and system_message is defined %}
            {{- ' [INST] ' + system_message + '\\n\\n' + message['content'] + ' [/INST]' }}
        {%- else %}
            {{- ' [INST] ' + message['content'] + ' [/INST]' }}
        {%- endif %}
    {%- elif message['role'] == 'assistant' %}
        {{- ' ' + message['content'] + eos_token}}
    {%- else %}
        {{- raise_exception('Only user and assistant roles are supported, with the exception of an initial optional system message!') }}
    {%- endif %}
{%- endfor %}
"""

# Verbatim (llama.cpp's models/templates/mistralai-Mistral-Nemo-Instruct-2407.jinja).
MISTRAL_NEMO = r"""{%- if messages[0]["role"] == "system" %}
    {%- set system_message = messages[0]["content"] %}
    {%- set loop_messages = messages[1:] %}
{%- else %}
    {%- set loop_messages = messages %}
{%- endif %}
{%- if not tools is defined %}
    {%- set tools = none %}
{%- endif %}
{%- set user_messages = loop_messages | selectattr("role", "equalto", "user") | list %}

{#- This block checks for alternating user/assistant messages, skipping tool calling messages #}
{%- set ns = namespace() %}
{%- set ns.index = 0 %}
{%- for message in loop_messages %}
    {%- if not (message.role == "tool" or message.role == "tool_results" or (message.tool_calls is defined and message.tool_calls is not none)) %}
        {%- if (message["role"] == "user") != (ns.index % 2 == 0) %}
            {{- raise_exception("After the optional system message, conversation roles must alternate user/assistant/user/assistant/...") }}
        {%- endif %}
        {%- set ns.index = ns.index + 1 %}
    {%- endif %}
{%- endfor %}

{{- bos_token }}
{%- for message in loop_messages %}
    {%- if message["role"] == "user" %}
        {%- if tools is not none and (message == user_messages[-1]) %}
            {{- "[AVAILABLE_TOOLS][" }}
            {%- for tool in tools %}
                {%- set tool = tool.function %}
                {{- '{"type": "function", "function": {' }}
                {%- for key, val in tool.items() if key != "return" %}
                    {%- if val is string %}
                        {{- '"' + key + '": "' + val + '"' }}
                    {%- else %}
                        {{- '"' + key + '": ' + val|tojson }}
                    {%- endif %}
                    {%- if not loop.last %}
                        {{- ", " }}
                    {%- endif %}
                {%- endfor %}
                {{- "}}" }}
                {%- if not loop.last %}
                    {{- ", " }}
                {%- else %}
                    {{- "]" }}
                {%- endif %}
            {%- endfor %}
            {{- "[/AVAILABLE_TOOLS]" }}
            {%- endif %}
        {%- if loop.last and system_message is defined %}
            {{- "[INST]" + system_message + "\n\n" + message["content"] + "[/INST]" }}
        {%- else %}
            {{- "[INST]" + message["content"] + "[/INST]" }}
        {%- endif %}
    {%- elif (message.tool_calls is defined and message.tool_calls is not none) %}
        {{- "[TOOL_CALLS][" }}
        {%- for tool_call in message.tool_calls %}
            {%- set out = tool_call.function|tojson %}
            {{- out[:-1] }}
            {%- if not tool_call.id is defined or tool_call.id|length != 9 %}
                {{- raise_exception("Tool call IDs should be alphanumeric strings with length 9!") }}
            {%- endif %}
            {{- ', "id": "' + tool_call.id + '"}' }}
            {%- if not loop.last %}
                {{- ", " }}
            {%- else %}
                {{- "]" + eos_token }}
            {%- endif %}
        {%- endfor %}
    {%- elif message["role"] == "assistant" %}
        {{- message["content"] + eos_token}}
    {%- elif message["role"] == "tool_results" or message["role"] == "tool" %}
        {%- if message.content is defined and message.content.content is defined %}
            {%- set content = message.content.content %}
        {%- else %}
            {%- set content = message.content %}
        {%- endif %}
        {{- '[TOOL_RESULTS]{"content": ' + content|string + ", " }}
        {%- if not message.tool_call_id is defined or message.tool_call_id|length != 9 %}
            {{- raise_exception("Tool call IDs should be alphanumeric strings with length 9!") }}
        {%- endif %}
        {{- '"call_id": "' + message.tool_call_id + '"}[/TOOL_RESULTS]' }}
    {%- else %}
        {{- raise_exception("Only user and assistant roles are supported, with the exception of an initial optional system message!") }}
    {%- endif %}
{%- endfor %}
"""

# Mistral-7B-Instruct-v0.3 (llama.cpp's "mistral-v3"): "[INST] ", system in the last user turn,
# the assistant's content trimmed after a space.
MISTRAL_V3 = (MISTRAL_NEMO
              .replace('{{- "[INST]" + system_message', '{{- "[INST] " + system_message')
              .replace('{{- "[INST]" + message["content"]', '{{- "[INST] " + message["content"]')
              .replace('{{- message["content"] + eos_token}}',
                       '{{- " " + message["content"]|trim + eos_token}}'))

GEMMA2 = (
    "{{ bos_token }}{% if messages[0]['role'] == 'system' %}{{ raise_exception('System role not "
    "supported') }}{% endif %}{% for message in messages %}{% if (message['role'] == 'user') != "
    "(loop.index0 % 2 == 0) %}{{ raise_exception('Conversation roles must alternate "
    "user/assistant/user/assistant/...') }}{% endif %}{% if (message['role'] == 'assistant') %}"
    "{% set role = 'model' %}{% else %}{% set role = message['role'] %}{% endif %}{{ "
    "'<start_of_turn>' + role + '\n' + message['content'] | trim + '<end_of_turn>\n' }}"
    "{% endfor %}{% if add_generation_prompt %}{{'<start_of_turn>model\n'}}{% endif %}")

GEMMA3 = """{{ bos_token }}
{%- if messages[0]['role'] == 'system' -%}
    {%- if messages[0]['content'] is string -%}
        {%- set first_user_prefix = messages[0]['content'] + '\\n\\n' -%}
    {%- else -%}
        {%- set first_user_prefix = messages[0]['content'][0]['text'] + '\\n\\n' -%}
    {%- endif -%}
    {%- set loop_messages = messages[1:] -%}
{%- else -%}
    {%- set first_user_prefix = "" -%}
    {%- set loop_messages = messages -%}
{%- endif -%}
{%- for message in loop_messages -%}
    {%- if (message['role'] == 'user') != (loop.index0 % 2 == 0) -%}
        {{ raise_exception("Conversation roles must alternate user/assistant/user/assistant/...") }}
    {%- endif -%}
    {%- if (message['role'] == 'assistant') -%}
        {%- set role = "model" -%}
    {%- else -%}
        {%- set role = message['role'] -%}
    {%- endif -%}
    {{ '<start_of_turn>' + role + '\\n' + (first_user_prefix if loop.first else "") }}
    {%- if message['content'] is string -%}
        {{ message['content'] | trim }}
    {%- elif message['content'] is iterable -%}
        {%- for item in message['content'] -%}
            {%- if item['type'] == 'image' -%}
                {{ '<start_of_image>' }}
            {%- elif item['type'] == 'text' -%}
                {{ item['text'] | trim }}
            {%- endif -%}
        {%- endfor -%}
    {%- else -%}
        {{ raise_exception("Invalid content type") }}
    {%- endif -%}
    {{ '<end_of_turn>\\n' }}
{%- endfor -%}
{%- if add_generation_prompt -%}
    {{'<start_of_turn>model\\n'}}
{%- endif -%}
"""

# name, source, bos, eos, date_string passed (None: not passed)
TEMPLATES = [
    ("llama3", LLAMA3, "<|begin_of_text|>", "<|eot_id|>", None),
    ("llama3.1", LLAMA31, "<|begin_of_text|>", "<|eot_id|>", None),
    ("llama3.2", LLAMA32, "<|begin_of_text|>", "<|eot_id|>", "15 Mar 2025"),
    ("qwen2", QWEN2, None, "<|im_end|>", None),
    ("qwen2.5", QWEN25, None, "<|im_end|>", None),
    ("mistral-v0.1", MISTRAL_V01, "<s>", "</s>", None),
    ("mistral-v1", MISTRAL_V1, "<s>", "</s>", None),
    ("mistral-v3", MISTRAL_V3, "<s>", "</s>", None),
    ("mistral-nemo", MISTRAL_NEMO, "<s>", "</s>", None),
    ("gemma2", GEMMA2, "<bos>", "<eos>", None),
    ("gemma3", GEMMA3, "<bos>", "<eos>", None),
]

S, U, A = "system", "user", "assistant"
CONVERSATIONS = [
    [(U, "Hello!")],
    [(S, "You are terse."), (U, "What is 2+2?")],
    [(S, "  Answer in French.\n"), (U, "Capital of Italy?"), (A, "Rome."), (U, "And Spain?")],
    [(U, "  padded question \n\n"), (A, " padded answer  "), (U, "\u3000Привет 世界\u00a0")],
    [(S, "Sys"), (U, "Hi"), (A, "Hello, how can I help?")],
    [(U, "a"), (A, "b"), (U, "c"), (A, "d"), (U, "tabs\tand\nnewlines\t")],
    [(U, "one"), (U, "two")],                      # roles do not alternate
    [(S, "Only a system message")],
    [(U, "Why?"), (A, "<think>\nreason\n</think>\n\nBecause."), (U, "Sure?")],
]


def cxx_string(s: str) -> str:
    out = []
    for b in s.encode("utf-8"):
        c = chr(b)
        if c == "\\": out.append("\\\\")
        elif c == '"': out.append('\\"')
        elif c == "\n": out.append("\\n")
        elif c == "\t": out.append("\\t")
        elif 0x20 <= b < 0x7F and c != "?": out.append(c)
        else: out.append("\\%03o" % b)
    return '"' + "".join(out) + '"'


NORMALIZER_TEXTS = [
    "plain ASCII text",
    "caf\u00e9 / cafe\u0301",                          # composed and decomposed e-acute
    "\ufb01ne \ufb02ow",                               # fi / fl ligatures (NFKC: fi, fl)
    "\u2460\u2461 x\u00b2 \u00bd km\u00b2",              # circled digits, superscripts, fractions
    "\u212b \u2126 \u00c5",                            # angstrom / ohm signs (canonical singletons)
    "\ud55c\uad6d\uc5b4 \u1112\u1161\u11ab",              # Hangul syllables and conjoining jamo
    "\uff76\uff80\uff76\uff85 \uff21\uff22\uff23\uff11\uff12",   # half/full-width forms
    "Tie\u0302\u0301ng Vie\u0323\u0302t",               # Vietnamese, decomposed
    "a\u0302\u0323 a\u0323\u0302",                       # canonical reordering of marks
    "\ufefb \ufdfa",                                  # Arabic presentation forms
    "\uf900\uf901 \u2f00",                            # CJK compatibility ideographs, radicals
    "\U0001f469\u200d\U0001f4bb \u00e9\U0001f600",            # emoji ZWJ sequence
    "\u1e9b\u0323 \u03d3 \u2126",                        # the long s / Greek cases of UAX #15
    "\u00a0nbsp\u3000ideographic\u2003em",             # spaces NFKC maps to U+0020
    "\u0958\u0959 \u09cb \u0b48",                        # Indic composition exclusions
    "\u1100\u1161\u11a8\u1100\u1162",                  # leading/vowel/trailing jamo
]


def normalizer_lines():
    import tokenizers.normalizers as N
    forms = [("NFC", N.NFC()), ("NFD", N.NFD()), ("NFKC", N.NFKC()), ("NFKD", N.NFKD())]
    lines = [
        "// Generated by scripts/make_family_tokenizer_test_data.py with tokenizers "
        f"{tokenizers.__version__}; do not edit.",
        "// {text, NFC, NFD, NFKC, NFKD} as HF tokenizers' normalizers give them.",
        "struct NormalizerCase { const char* text; const char* form[4]; };",
        "const NormalizerCase kNormalizerCases[] = {",
    ]
    for t in NORMALIZER_TEXTS:
        outs = ", ".join(cxx_string(n.normalize_str(t)) for _, n in forms)
        lines.append(f"  {{{cxx_string(t)},\n   {{{outs}}}}},")
    lines.append("};")
    return lines


def main():
    ap = argparse.ArgumentParser()
    here = pathlib.Path(__file__).resolve().parent.parent / "tests/engine"
    ap.add_argument("--out", default=str(here / "chat_template_test_data.inc"))
    ap.add_argument("--normalizer-out", default=str(here / "normalizer_test_data.inc"))
    args = ap.parse_args()
    pathlib.Path(args.normalizer_out).write_text("\n".join(normalizer_lines()) + "\n")
    print("wrote", args.normalizer_out)
    lines = [
        "// Generated by scripts/make_family_tokenizer_test_data.py with transformers "
        f"{transformers.__version__}; do not edit.",
        "// kChatTemplates: {name, Jinja source, date_string passed to HF (\"\" = none)}.",
        "// kChatCases: {template index, messages, add_generation_prompt, HF's rendering, or",
        "// raises = true where the template raises an exception}.",
        "struct ChatTemplateSource { const char* name; const char* source; const char* date; };",
        "struct ChatCaseMessage { const char* role; const char* content; };",
        "struct ChatCase { int tmpl; std::vector<ChatCaseMessage> messages; bool generation_prompt;",
        "                  bool raises; const char* expected; };",
        "const ChatTemplateSource kChatTemplates[] = {",
    ]
    for name, src, _, _, date in TEMPLATES:
        lines.append(f"  {{{cxx_string(name)},\n   {cxx_string(src)},\n   {cxx_string(date or '')}}},")
    lines += ["};", "const std::vector<ChatCase> kChatCases = {"]
    for ti, (name, src, bos, eos, date) in enumerate(TEMPLATES):
        for conv in CONVERSATIONS:
            msgs = [{"role": r, "content": c} for r, c in conv]
            for gen in (True, False):
                kwargs = {"bos_token": bos, "eos_token": eos}
                if date is not None:
                    kwargs["date_string"] = date
                try:
                    rendered, _ = render_jinja_template([msgs], chat_template=src,
                                                        add_generation_prompt=gen, **kwargs)
                    expected, raises = rendered[0], False
                except Exception as e:  # jinja2 TemplateError from raise_exception
                    expected, raises = str(e), True
                m = ", ".join(f"{{{cxx_string(r)}, {cxx_string(c)}}}" for r, c in conv)
                lines.append(f"  {{{ti}, {{{m}}}, {str(gen).lower()}, {str(raises).lower()},\n"
                             f"   {cxx_string(expected)}}},  // {name}")
    lines.append("};")
    pathlib.Path(args.out).write_text("\n".join(lines) + "\n")
    print("wrote", args.out)


if __name__ == "__main__":
    main()
