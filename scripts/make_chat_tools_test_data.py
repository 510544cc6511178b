#!/usr/bin/env python3
"""Writes tests/engine/chat_tools_test_data.inc: chat templates rendered with tools, tool calls
and tool results, as transformers' apply_chat_template renders them (its render_jinja_template,
with the special tokens the tokenizer passes), for kvattn's native renderer to match byte for byte.

    /tmp/probe50/venv/bin/python scripts/make_chat_tools_test_data.py

The requests are written as an OpenAI client sends them (tool-call arguments as JSON strings,
content null next to tool calls); they reach the template as vLLM passes them: arguments parsed
into objects (vLLM's _postprocess_messages) and null content as "" (vLLM joins a message's text
parts). The tools are passed as the client wrote them (key order kept).

Sources: Qwen2.5's, Mistral Nemo's and Mistral v0.3's (Nemo's with v0.3's spacing) as
make_family_tokenizer_test_data.py holds them; Qwen3's and Llama 3.1's (= 3.3's) and 3.2's as
published (llama.cpp's models/templates copies); Qwen2's and Gemma 3's, which have no tool
format, to show that tools are ignored there.
"""
import argparse
import copy
import json
import pathlib
import sys

import transformers
from transformers.utils.chat_template_utils import render_jinja_template

sys.path.insert(0, str(pathlib.Path(__file__).resolve().parent))
from make_family_tokenizer_test_data import (GEMMA3, MISTRAL_NEMO, MISTRAL_V3, QWEN2,  # noqa: E402
                                             QWEN25, cxx_string)

LLAMA31 = r'''{{- bos_token }}
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
{{- "<|start_header_id|>system<|end_header_id|>\n\n" }}
{%- if builtin_tools is defined or tools is not none %}
    {{- "Environment: ipython\n" }}
{%- endif %}
{%- if builtin_tools is defined %}
    {{- "Tools: " + builtin_tools | reject('equalto', 'code_interpreter') | join(", ") + "\n\n"}}
{%- endif %}
{{- "Cutting Knowledge Date: December 2023\n" }}
{{- "Today Date: " + date_string + "\n\n" }}
{%- if tools is not none and not tools_in_user_message %}
    {{- "You have access to the following functions. To call a function, please respond with JSON for a function call." }}
    {{- 'Respond in the format {"name": function name, "parameters": dictionary of argument name and its value}.' }}
    {{- "Do not use variables.\n\n" }}
    {%- for t in tools %}
        {{- t | tojson(indent=4) }}
        {{- "\n\n" }}
    {%- endfor %}
{%- endif %}
{{- system_message }}
{{- "<|eot_id|>" }}

{#- Custom tools are passed in a user message with some extra guidance #}
{%- if tools_in_user_message and not tools is none %}
    {#- Extract the first user message so we can plug it in here #}
    {%- if messages | length != 0 %}
        {%- set first_user_message = messages[0]['content']|trim %}
        {%- set messages = messages[1:] %}
    {%- else %}
        {{- raise_exception("Cannot put tools in the first user message when there's no first user message!") }}
{%- endif %}
    {{- '<|start_header_id|>user<|end_header_id|>\n\n' -}}
    {{- "Given the following functions, please respond with a JSON for a function call " }}
    {{- "with its proper arguments that best answers the given prompt.\n\n" }}
    {{- 'Respond in the format {"name": function name, "parameters": dictionary of argument name and its value}.' }}
    {{- "Do not use variables.\n\n" }}
    {%- for t in tools %}
        {{- t | tojson(indent=4) }}
        {{- "\n\n" }}
    {%- endfor %}
    {{- first_user_message + "<|eot_id|>"}}
{%- endif %}

{%- for message in messages %}
    {%- if not (message.role == 'ipython' or message.role == 'tool' or 'tool_calls' in message) %}
        {{- '<|start_header_id|>' + message['role'] + '<|end_header_id|>\n\n'+ message['content'] | trim + '<|eot_id|>' }}
    {%- elif 'tool_calls' in message %}
        {%- if not message.tool_calls|length == 1 %}
            {{- raise_exception("This model only supports single tool-calls at once!") }}
        {%- endif %}
        {%- set tool_call = message.tool_calls[0].function %}
        {%- if builtin_tools is defined and tool_call.name in builtin_tools %}
            {{- '<|start_header_id|>assistant<|end_header_id|>\n\n' -}}
            {{- "<|python_tag|>" + tool_call.name + ".call(" }}
            {%- for arg_name, arg_val in tool_call.arguments | items %}
                {{- arg_name + '="' + arg_val + '"' }}
                {%- if not loop.last %}
                    {{- ", " }}
                {%- endif %}
                {%- endfor %}
            {{- ")" }}
        {%- else  %}
            {{- '<|start_header_id|>assistant<|end_header_id|>\n\n' -}}
            {{- '{"name": "' + tool_call.name + '", ' }}
            {{- '"parameters": ' }}
            {{- tool_call.arguments | tojson }}
            {{- "}" }}
        {%- endif %}
        {%- if builtin_tools is defined %}
            {#- This means we're in ipython mode #}
            {{- "<|eom_id|>" }}
        {%- else %}
            {{- "<|eot_id|>" }}
        {%- endif %}
    {%- elif message.role == "tool" or message.role == "ipython" %}
        {{- "<|start_header_id|>ipython<|end_header_id|>\n\n" }}
        {%- if message.content is mapping or message.content is iterable %}
            {{- message.content | tojson }}
        {%- else %}
            {{- message.content }}
        {%- endif %}
        {{- "<|eot_id|>" }}
    {%- endif %}
{%- endfor %}
{%- if add_generation_prompt %}
    {{- '<|start_header_id|>assistant<|end_header_id|>\n\n' }}
{%- endif %}
'''

LLAMA32 = r'''{{- bos_token }}
{%- if custom_tools is defined %}
    {%- set tools = custom_tools %}
{%- endif %}
{%- if not tools_in_user_message is defined %}
    {%- set tools_in_user_message = true %}
{%- endif %}
{%- if not date_string is defined %}
    {%- if strftime_now is defined %}
        {%- set date_string = strftime_now("%d %b %Y") %}
    {%- else %}
        {%- set date_string = "26 Jul 2024" %}
    {%- endif %}
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

{#- System message #}
{{- "<|start_header_id|>system<|end_header_id|>\n\n" }}
{%- if tools is not none %}
    {{- "Environment: ipython\n" }}
{%- endif %}
{{- "Cutting Knowledge Date: December 2023\n" }}
{{- "Today Date: " + date_string + "\n\n" }}
{%- if tools is not none and not tools_in_user_message %}
    {{- "You have access to the following functions. To call a function, please respond with JSON for a function call." }}
    {{- 'Respond in the format {"name": function name, "parameters": dictionary of argument name and its value}.' }}
    {{- "Do not use variables.\n\n" }}
    {%- for t in tools %}
        {{- t | tojson(indent=4) }}
        {{- "\n\n" }}
    {%- endfor %}
{%- endif %}
{{- system_message }}
{{- "<|eot_id|>" }}

{#- Custom tools are passed in a user message with some extra guidance #}
{%- if tools_in_user_message and not tools is none %}
    {#- Extract the first user message so we can plug it in here #}
    {%- if messages | length != 0 %}
        {%- set first_user_message = messages[0]['content']|trim %}
        {%- set messages = messages[1:] %}
    {%- else %}
        {{- raise_exception("Cannot put tools in the first user message when there's no first user message!") }}
{%- endif %}
    {{- '<|start_header_id|>user<|end_header_id|>\n\n' -}}
    {{- "Given the following functions, please respond with a JSON for a function call " }}
    {{- "with its proper arguments that best answers the given prompt.\n\n" }}
    {{- 'Respond in the format {"name": function name, "parameters": dictionary of argument name and its value}.' }}
    {{- "Do not use variables.\n\n" }}
    {%- for t in tools %}
        {{- t | tojson(indent=4) }}
        {{- "\n\n" }}
    {%- endfor %}
    {{- first_user_message + "<|eot_id|>"}}
{%- endif %}

{%- for message in messages %}
    {%- if not (message.role == 'ipython' or message.role == 'tool' or 'tool_calls' in message) %}
        {{- '<|start_header_id|>' + message['role'] + '<|end_header_id|>\n\n'+ message['content'] | trim + '<|eot_id|>' }}
    {%- elif 'tool_calls' in message %}
        {%- if not message.tool_calls|length == 1 %}
            {{- raise_exception("This model only supports single tool-calls at once!") }}
        {%- endif %}
        {%- set tool_call = message.tool_calls[0].function %}
        {{- '<|start_header_id|>assistant<|end_header_id|>\n\n' -}}
        {{- '{"name": "' + tool_call.name + '", ' }}
        {{- '"parameters": ' }}
        {{- tool_call.arguments | tojson }}
        {{- "}" }}
        {{- "<|eot_id|>" }}
    {%- elif message.role == "tool" or message.role == "ipython" %}
        {{- "<|start_header_id|>ipython<|end_header_id|>\n\n" }}
        {%- if message.content is mapping or message.content is iterable %}
            {{- message.content | tojson }}
        {%- else %}
            {{- message.content }}
        {%- endif %}
        {{- "<|eot_id|>" }}
    {%- endif %}
{%- endfor %}
{%- if add_generation_prompt %}
    {{- '<|start_header_id|>assistant<|end_header_id|>\n\n' }}
{%- endif %}
'''

QWEN3 = r'''{%- if tools %}
    {{- '<|im_start|>system\n' }}
    {%- if messages[0].role == 'system' %}
        {{- messages[0].content + '\n\n' }}
    {%- endif %}
    {{- "# Tools\n\nYou may call one or more functions to assist with the user query.\n\nYou are provided with function signatures within <tools></tools> XML tags:\n<tools>" }}
    {%- for tool in tools %}
        {{- "\n" }}
        {{- tool | tojson }}
    {%- endfor %}
    {{- "\n</tools>\n\nFor each function call, return a json object with function name and arguments within <tool_call></tool_call> XML tags:\n<tool_call>\n{\"name\": <function-name>, \"arguments\": <args-json-object>}\n</tool_call><|im_end|>\n" }}
{%- else %}
    {%- if messages[0].role == 'system' %}
        {{- '<|im_start|>system\n' + messages[0].content + '<|im_end|>\n' }}
    {%- endif %}
{%- endif %}
{%- set ns = namespace(multi_step_tool=true, last_query_index=messages|length - 1) %}
{%- for message in messages[::-1] %}
    {%- set index = (messages|length - 1) - loop.index0 %}
    {%- if ns.multi_step_tool and message.role == "user" and not(message.content.startswith('<tool_response>') and message.content.endswith('</tool_response>')) %}
        {%- set ns.multi_step_tool = false %}
        {%- set ns.last_query_index = index %}
    {%- endif %}
{%- endfor %}
{%- for message in messages %}
    {%- if (message.role == "user") or (message.role == "system" and not loop.first) %}
        {{- '<|im_start|>' + message.role + '\n' + message.content + '<|im_end|>' + '\n' }}
    {%- elif message.role == "assistant" %}
        {%- set content = message.content %}
        {%- set reasoning_content = '' %}
        {%- if message.reasoning_content is defined and message.reasoning_content is not none %}
            {%- set reasoning_content = message.reasoning_content %}
        {%- else %}
            {%- if '</think>' in message.content %}
                {%- set content = message.content.split('</think>')[-1].lstrip('\n') %}
                {%- set reasoning_content = message.content.split('</think>')[0].rstrip('\n').split('<think>')[-1].lstrip('\n') %}
            {%- endif %}
        {%- endif %}
        {%- if loop.index0 > ns.last_query_index %}
            {%- if loop.last or (not loop.last and reasoning_content) %}
                {{- '<|im_start|>' + message.role + '\n<think>\n' + reasoning_content.strip('\n') + '\n</think>\n\n' + content.lstrip('\n') }}
            {%- else %}
                {{- '<|im_start|>' + message.role + '\n' + content }}
            {%- endif %}
        {%- else %}
            {{- '<|im_start|>' + message.role + '\n' + content }}
        {%- endif %}
        {%- if message.tool_calls %}
            {%- for tool_call in message.tool_calls %}
                {%- if (loop.first and content) or (not loop.first) %}
                    {{- '\n' }}
                {%- endif %}
                {%- if tool_call.function %}
                    {%- set tool_call = tool_call.function %}
                {%- endif %}
                {{- '<tool_call>\n{"name": "' }}
                {{- tool_call.name }}
                {{- '", "arguments": ' }}
                {%- if tool_call.arguments is string %}
                    {{- tool_call.arguments }}
                {%- else %}
                    {{- tool_call.arguments | tojson }}
                {%- endif %}
                {{- '}\n</tool_call>' }}
            {%- endfor %}
        {%- endif %}
        {{- '<|im_end|>\n' }}
    {%- elif message.role == "tool" %}
        {%- if loop.first or (messages[loop.index0 - 1].role != "tool") %}
            {{- '<|im_start|>user' }}
        {%- endif %}
        {{- '\n<tool_response>\n' }}
        {{- message.content }}
        {{- '\n</tool_response>' }}
        {%- if loop.last or (messages[loop.index0 + 1].role != "tool") %}
            {{- '<|im_end|>\n' }}
        {%- endif %}
    {%- endif %}
{%- endfor %}
{%- if add_generation_prompt %}
    {{- '<|im_start|>assistant\n' }}
    {%- if enable_thinking is defined and enable_thinking is false %}
        {{- '<think>\n\n</think>\n\n' }}
    {%- endif %}
{%- endif %}'''

# name, source, bos, eos, date_string passed (None: not passed)
TEMPLATES = [
    ("qwen2.5", QWEN25, None, "<|im_end|>", None),
    ("qwen3", QWEN3, None, "<|im_end|>", None),
    ("llama3.1", LLAMA31, "<|begin_of_text|>", "<|eot_id|>", None),
    ("llama3.2", LLAMA32, "<|begin_of_text|>", "<|eot_id|>", "15 Mar 2025"),
    ("mistral-v3", MISTRAL_V3, "<s>", "</s>", None),
    ("mistral-nemo", MISTRAL_NEMO, "<s>", "</s>", None),
    ("qwen2", QWEN2, None, "<|im_end|>", None),
    ("gemma3", GEMMA3, "<bos>", "<eos>", None),
]

WEATHER = {"type": "function", "function": {
    "name": "get_weather", "description": "Get the current weather in a city",
    "parameters": {"type": "object", "properties": {
        "city": {"type": "string", "description": "City name, e.g. Zürich"},
        "unit": {"type": "string", "enum": ["celsius", "fahrenheit"]}},
        "required": ["city"]}}}
ADD = {"type": "function", "function": {
    "name": "add", "description": "Add two numbers: \"a\" + \"b\"\nReturns a number.",
    "parameters": {"type": "object", "properties": {
        "a": {"type": "number", "minimum": -1.5e3}, "b": {"type": "number", "default": 0.25}},
        "required": ["a", "b"], "additionalProperties": False}, "strict": True}}
NOW = {"type": "function", "function": {"name": "now", "parameters": {"type": "object",
                                                                       "properties": {}}}}
TOOLS_A = [WEATHER, ADD]
TOOLS_B = [NOW]


def call(cid, name, args):
    return {"id": cid, "type": "function", "function": {"name": name, "arguments": args}}


S = {"role": "system", "content": "  Be brief. "}
U1 = {"role": "user", "content": "What's the weather in Zürich?"}
A1 = {"role": "assistant", "content": None,
      "tool_calls": [call("call12345", "get_weather", "{\"city\": \"Z\\u00fcrich\"}")]}
T1 = {"role": "tool", "tool_call_id": "call12345",
      "content": "{\"temperature\": 21.5, \"unit\": \"celsius\"}"}
U2 = {"role": "user", "content": "Weather in Paris, and 2+3?"}
A2 = {"role": "assistant", "content": "Let me check.",
      "tool_calls": [call("abcDEF123", "get_weather", "{\"city\":\"Paris\",\"unit\":\"celsius\"}"),
                     call("XYZ987abc", "add", "{\"a\": 2, \"b\": 3.0}")]}
T2a = {"role": "tool", "tool_call_id": "abcDEF123", "content": "sunny"}
T2b = {"role": "tool", "tool_call_id": "XYZ987abc", "content": "5"}
A_TEXT = {"role": "assistant", "content": "It is 21.5 °C in Zürich."}
U3 = {"role": "user", "content": "Thanks! What time is it?"}
A3 = {"role": "assistant", "content": "<think>\nI should call now.\n</think>\n\n",
      "tool_calls": [call("nowNOW123", "now", "{}")]}
T3 = {"role": "tool", "tool_call_id": "nowNOW123", "content": "12:00"}
A4 = {"role": "assistant", "content": "",
      "tool_calls": [call("nested123", "get_weather",
                          "{\"city\": \"Z\u00fcrich\", \"opts\": {\"days\": [1, 2.5, -3e-7, 1e22],"
                          " \"flag\": true, \"x\": null, \"q\": \"a\\\"b\\\\c\\n\\t\\u0001\"}}")]}
BAD_ID = {"role": "assistant", "content": None,
          "tool_calls": [call("short", "get_weather", "{\"city\": \"Oslo\"}")]}

# (tools, messages); every case is rendered with and without the generation prompt.
CASES = [
    (TOOLS_A, [U1]),
    (TOOLS_A, [S, U1]),
    (TOOLS_A, [U1, A1, T1]),
    (TOOLS_A, [S, U2, A2, T2a, T2b]),          # Llama 3 raises: one call per turn
    (None, [U1, A1, T1]),                      # history with calls, no tools given
    (TOOLS_B, [U1, A1, T1, A_TEXT, U3, A3, T3]),
    (TOOLS_A, [S]),                            # Llama 3 raises: no user message for the tools
    (TOOLS_A, [U1, A4, T1]),
    (TOOLS_A, [U1, BAD_ID, T1]),               # Mistral raises: ids have 9 characters
    (TOOLS_B, [U1, A_TEXT, U3]),
    # Qwen3's multi-step rule: a user turn that is a wrapped tool response is not a query; the
    # last assistant turn keeps its reasoning.
    (TOOLS_B, [U1, A3, {"role": "user", "content": "<tool_response>\n12:00\n</tool_response>"},
               {"role": "assistant", "content": "<think>\nok\n</think>\n\nNoon."}]),
    (TOOLS_A, [S, U1, A1, T1, {"role": "system", "content": "Late system."}, U3]),
    (None, [T1, U1]),                          # a result first
]


def float_cases():
    """Doubles and Python's repr of them (tojson prints floats so): edges and random ones."""
    import random
    import struct
    rng = random.Random(52)
    xs = [0.0, -0.0, 1.0, 0.1, 1e15, 1e16, 9999999999999998.0, 1e-4, 1e-5, 123456.789,
          5e-324, 1.7976931348623157e308, 2.5e-7, 1e22, 0.30000000000000004, -1500.0]
    xs += [rng.uniform(-1e3, 1e3) for _ in range(100)]
    xs += [struct.unpack("<d", struct.pack("<Q", rng.getrandbits(64)))[0] for _ in range(300)]
    xs += [rng.choice([1, -1]) * 10.0 ** rng.uniform(-30, 30) for _ in range(100)]
    return [x for x in xs if x == x and abs(x) != float("inf")]


def as_vllm_passes(messages):
    out = copy.deepcopy(messages)
    for m in out:
        if m.get("content") is None:
            m["content"] = ""
        for c in m.get("tool_calls") or []:
            c["function"]["arguments"] = json.loads(c["function"]["arguments"])
    return out


def main():
    ap = argparse.ArgumentParser()
    here = pathlib.Path(__file__).resolve().parent.parent / "tests/engine"
    ap.add_argument("--out", default=str(here / "chat_tools_test_data.inc"))
    args = ap.parse_args()
    lines = [
        "// Generated by scripts/make_chat_tools_test_data.py with transformers "
        f"{transformers.__version__}; do not edit.",
        "// kToolTemplates: {name, Jinja source, bos, eos, date_string passed to HF (\"\" = none)}.",
        "// kToolCases: {template index, tools (JSON, \"\" = none), messages (JSON, as an OpenAI",
        "// client sends them), add_generation_prompt, raises, HF's rendering or its error}.",
        "struct ToolTemplate { const char* name; const char* source; const char* bos;",
        "                      const char* eos; const char* date; };",
        "struct ToolCase { int tmpl; const char* tools; const char* messages; bool generation_prompt;",
        "                  bool raises; const char* expected; };",
        "const ToolTemplate kToolTemplates[] = {",
    ]
    for name, src, bos, eos, date in TEMPLATES:
        lines.append(f"  {{{cxx_string(name)},\n   {cxx_string(src)},\n   "
                     f"{cxx_string(bos or '')}, {cxx_string(eos)}, {cxx_string(date or '')}}},")
    lines += ["};", "const ToolCase kToolCases[] = {"]
    for ti, (name, src, bos, eos, date) in enumerate(TEMPLATES):
        for tools, msgs in CASES:
            for gen in (True, False):
                kwargs = {"bos_token": bos, "eos_token": eos}
                if date is not None:
                    kwargs["date_string"] = date
                try:
                    rendered, _ = render_jinja_template([as_vllm_passes(msgs)], tools=tools,
                                                        chat_template=src,
                                                        add_generation_prompt=gen, **kwargs)
                    expected, raises = rendered[0], False
                except Exception as e:  # jinja2 TemplateError from raise_exception
                    expected, raises = str(e), True
                tools_text = json.dumps(tools, ensure_ascii=False) if tools else ""
                lines.append(f"  {{{ti}, {cxx_string(tools_text)},\n   "
                             f"{cxx_string(json.dumps(msgs, ensure_ascii=False))},\n   "
                             f"{str(gen).lower()}, {str(raises).lower()},\n   "
                             f"{cxx_string(expected)}}},  // {name}")
    lines.append("};")
    lines += ["// {a double (C hex literal), Python's repr}.",
              "struct PyFloat { double value; const char* repr; };",
              "const PyFloat kPyFloats[] = {"]
    for x in float_cases():
        lines.append(f"  {{{x.hex()}, {cxx_string(repr(x))}}},")
    lines.append("};")
    pathlib.Path(args.out).write_text("\n".join(lines) + "\n")
    print("wrote", args.out, "with", len(TEMPLATES) * len(CASES) * 2, "cases")


if __name__ == "__main__":
    main()
