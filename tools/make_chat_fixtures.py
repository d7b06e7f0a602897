#!/usr/bin/env python3
"""Chat-template fixtures for tests/chat_template_test.cpp and the SFT tests.

Writes <out>/<style>/ for three styles of chat template, written here after the
structure of the templates that Llama 3.x, Qwen 2.5 and Mistral models ship
(system prompts, tools as JSON, namespace(), loop.index0, raise_exception,
strip(), generation prompts):

  tokenizer.json          the llama3 test tokenizer (fixtures/tokenizers/llama3) plus the
                          chat special tokens of all three styles
  tokenizer_config.json   tokenizer_class, bos/eos tokens and the chat_template
  cases.jsonl             {"messages", "add_generation_prompt", "tools"?, "text", "ids"}: transformers'
                          apply_chat_template(tokenize=False) and its tokenization, and
                          {"messages", "error": substring} for conversations the template refuses

  python3 tools/make_chat_fixtures.py --out fixtures/chat
Needs transformers and tokenizers (no downloads).
"""
import argparse
import json
import os
import shutil

from tokenizers import AddedToken, Tokenizer
from transformers import PreTrainedTokenizerFast

HERE = os.path.dirname(os.path.abspath(__file__))

LLAMA3 = r"""{{- bos_token }}
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

{#- The system message, if there is one #}
{%- if messages[0]['role'] == 'system' %}
    {%- set system_message = messages[0]['content']|trim %}
    {%- set messages = messages[1:] %}
{%- else %}
    {%- set system_message = "" %}
{%- endif %}

{{- "<|start_header_id|>system<|end_header_id|>\n\n" }}
{%- if tools is not none %}
    {{- "Environment: ipython\n" }}
{%- endif %}
{{- "Cutting Knowledge Date: December 2023\n" }}
{{- "Today Date: " + date_string + "\n\n" }}
{%- if tools is not none and not tools_in_user_message %}
    {{- "You have access to the following functions.\n\n" }}
    {%- for t in tools %}
        {{- t | tojson(indent=4) }}
        {{- "\n\n" }}
    {%- endfor %}
{%- endif %}
{{- system_message }}
{{- "<|eot_id|>" }}

{%- for message in messages %}
    {%- if not (message.role == 'ipython' or message.role == 'tool' or 'tool_calls' in message) %}
        {{- '<|start_header_id|>' + message['role'] + '<|end_header_id|>\n\n'+ message['content'] | trim + '<|eot_id|>' }}
    {%- elif 'tool_calls' in message %}
        {%- set tool_call = message.tool_calls[0].function %}
        {{- '<|start_header_id|>assistant<|end_header_id|>\n\n' -}}
        {{- '{"name": "' + tool_call.name + '", ' }}
        {{- '"parameters": ' }}
        {{- tool_call.arguments | tojson }}
        {{- "}" }}
        {{- "<|eot_id|>" }}
    {%- else %}
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
"""

QWEN25 = r"""{%- if tools %}
    {{- '<|im_start|>system\n' }}
    {%- if messages[0]['role'] == 'system' %}
        {{- messages[0]['content'] }}
    {%- else %}
        {{- 'You are Qwen, a helpful assistant.' }}
    {%- endif %}
    {{- "\n\n# Tools\n\n<tools>" }}
    {%- for tool in tools %}
        {{- "\n" }}
        {{- tool | tojson }}
    {%- endfor %}
    {{- "\n</tools><|im_end|>\n" }}
{%- else %}
    {%- if messages[0]['role'] == 'system' %}
        {{- '<|im_start|>system\n' + messages[0]['content'] + '<|im_end|>\n' }}
    {%- else %}
        {{- '<|im_start|>system\nYou are Qwen, a helpful assistant.<|im_end|>\n' }}
    {%- endif %}
{%- endif %}
{%- for message in messages %}
    {%- if (message.role == "user") or (message.role == "system" and not loop.first) or (message.role == "assistant" and not message.tool_calls) %}
        {{- '<|im_start|>' + message.role + '\n' + message.content + '<|im_end|>' + '\n' }}
    {%- elif message.role == "assistant" %}
        {{- '<|im_start|>' + message.role }}
        {%- if message.content %}
            {{- '\n' + message.content }}
        {%- endif %}
        {%- for tool_call in message.tool_calls %}
            {%- if tool_call.function is defined %}
                {%- set tool_call = tool_call.function %}
            {%- endif %}
            {{- '\n<tool_call>\n{"name": "' }}
            {{- tool_call.name }}
            {{- '", "arguments": ' }}
            {{- tool_call.arguments | tojson }}
            {{- '}\n</tool_call>' }}
        {%- endfor %}
        {{- '<|im_end|>\n' }}
    {%- elif message.role == "tool" %}
        {%- if (loop.index0 == 0) or (messages[loop.index0 - 1].role != "tool") %}
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
{%- endif %}
"""

MISTRAL = r"""{%- if messages[0]['role'] == 'system' %}
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
            {{- ' [INST] ' + system_message + '\n\n' + message['content'] + ' [/INST]' }}
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

STYLES = {
    "llama3": (LLAMA3, "<|begin_of_text|>", "<|eot_id|>"),
    "qwen2": (QWEN25, None, "<|im_end|>"),
    "mistral": (MISTRAL, "<s>", "</s>"),
}
CHAT_SPECIALS = ["<|start_header_id|>", "<|end_header_id|>", "<|eot_id|>", "<|im_start|>", "<|im_end|>",
                 "<s>", "</s>"]

TOOLS = [{"type": "function", "function": {"name": "get_weather", "description": "Weather in a city",
                                          "parameters": {"type": "object", "properties": {"city": {"type": "string"}},
                                                         "required": ["city"]}}}]

CONVERSATIONS = [
    [{"role": "user", "content": "Hello!"}, {"role": "assistant", "content": "Hi, how can I help?"}],
    [{"role": "system", "content": "  You are terse.  "}, {"role": "user", "content": "What is 2+2?"},
     {"role": "assistant", "content": "4"}, {"role": "user", "content": "And 3+3?"},
     {"role": "assistant", "content": "6"}],
    [{"role": "user", "content": "Traduis « le chat » en allemand."}, {"role": "assistant", "content": "die Katze"}],
    [{"role": "user", "content": "東京はどこ？"}, {"role": "assistant", "content": "日本の首都です。\n"}],
    [{"role": "user", "content": "Write a haiku\nabout tokens"},
     {"role": "assistant", "content": "Bytes merge into words\n  attention spans the long scroll\nloss falls like the rain"}],
    [{"role": "user", "content": "Quote: \"it's {fine}\" <tags> & stuff"}, {"role": "assistant", "content": "'ok'"}],
    [{"role": "system", "content": "Be kind."}, {"role": "user", "content": "Hi"}],
    [{"role": "user", "content": ""}, {"role": "assistant", "content": "Empty question, empty answer."}],
]
TOOL_CONVERSATIONS = [
    [{"role": "user", "content": "Weather in Paris?"},
     {"role": "assistant", "content": "", "tool_calls": [{"type": "function", "function": {
         "name": "get_weather", "arguments": {"city": "Paris"}}}]},
     {"role": "tool", "content": "{\"temp\": 21.5}"},
     {"role": "assistant", "content": "It is 21.5 degrees."}],
]
BAD = {"mistral": [([{"role": "assistant", "content": "x"}, {"role": "user", "content": "y"}], "must alternate")]}


def build_tokenizer(path):
    tok = Tokenizer.from_file(os.path.join(HERE, "..", "fixtures", "tokenizers", "llama3", "tokenizer.json"))
    tok.add_special_tokens([AddedToken(t, special=True, normalized=False) for t in CHAT_SPECIALS])
    tok.save(path)


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--out", required=True)
    args = ap.parse_args()
    for style, (template, bos, eos) in STYLES.items():
        d = os.path.join(args.out, style)
        if os.path.isdir(d):
            shutil.rmtree(d)
        os.makedirs(d)
        build_tokenizer(os.path.join(d, "tokenizer.json"))
        config = {"tokenizer_class": "PreTrainedTokenizerFast", "bos_token": bos, "eos_token": eos,
                  "model_max_length": 131072, "clean_up_tokenization_spaces": False, "chat_template": template}
        with open(os.path.join(d, "tokenizer_config.json"), "w") as f:
            json.dump(config, f, indent=2, ensure_ascii=False)
            f.write("\n")
        hf = PreTrainedTokenizerFast.from_pretrained(d)
        lines = []
        convs = [(c, None) for c in CONVERSATIONS] + [(c, TOOLS) for c in TOOL_CONVERSATIONS]
        for conv, tools in convs:
            for gen in (False, True):
                if style == "mistral" and (tools or any(m["role"] == "tool" for m in conv)):
                    continue
                if style == "mistral" and conv[-1]["role"] == "user" and not gen:
                    pass
                kwargs = {"add_generation_prompt": gen}
                if tools:
                    kwargs["tools"] = tools
                text = hf.apply_chat_template(conv, tokenize=False, **kwargs)
                ids = hf(text, add_special_tokens=False)["input_ids"]
                case = {"messages": conv, "add_generation_prompt": gen, "text": text, "ids": ids}
                if tools:
                    case["tools"] = tools
                lines.append(case)
        for conv, err in BAD.get(style, []):
            try:
                hf.apply_chat_template(conv, tokenize=False)
                raise SystemExit(f"{style}: expected the template to refuse {conv}")
            except SystemExit:
                raise
            except Exception as e:  # TemplateError
                assert err in str(e), (err, str(e))
            lines.append({"messages": conv, "error": err})
        with open(os.path.join(d, "cases.jsonl"), "w") as f:
            for case in lines:
                f.write(json.dumps(case, ensure_ascii=False) + "\n")
        print(f"{style}: {len(lines)} cases")


if __name__ == "__main__":
    main()
