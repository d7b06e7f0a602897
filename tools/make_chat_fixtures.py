#!/usr/bin/env python3
"""Chat-template fixtures for tests/chat_template_test.cpp and the SFT tests.

Writes <out>/<style>/ for six styles of chat template, written here after the
structure of the templates that Llama 3.x, Qwen 2.5, Qwen 3 and Mistral models ship
(system prompts, tools as JSON, tool calls and results, namespace(), loop.index0,
reversed loops, raise_exception, strip()/split(), selectattr, generation prompts):

  llama3      Llama 3.1: system header with dates, tools as JSON in the system turn, ipython results
  qwen2       Qwen 2.5: ChatML, <tools> in the system turn, <tool_call> blocks (several per turn,
              with or without the "function" wrapper), grouped <tool_response>s
  mistral     Mistral v1 (SentencePiece era): [INST] with the system prompt in the first user turn
  qwen3       Qwen 3: Qwen 2.5's tool parts plus the reasoning part (reasoning_content, or
              <think>...</think> split off the content), dropped before the last user query
              (found walking the messages backwards, tool results sent as user turns skipped),
              an empty think block on the last turn; enable_thinking=false closes the think
              block of the generation prompt (cases with "kwargs": {"enable_thinking": ...})
  mistral_v3  Mistral NeMo (tekken): the system prompt in the last user turn, [AVAILABLE_TOOLS]
              before it, [TOOL_CALLS] as a JSON list with 9-character ids, [TOOL_RESULTS]
  mistral_v7  Mistral Small 3 style (tekken): [SYSTEM_PROMPT] first (a default one without a
              system message), text blocks, [TOOL_CALLS]name[ARGS]arguments, [TOOL_RESULTS]

Each folder holds:
  tokenizer.json          llama3, qwen2, mistral, qwen3: the llama3 test tokenizer
                          (fixtures/tokenizers/llama3) plus the chat special tokens (qwen3 also
                          <think>, <tool_call>... as non-special added tokens, as Qwen 3 has them);
                          mistral_v3, mistral_v7: the tekken test tokenizer (fixtures/tokenizers/tekken)
  tokenizer_config.json   tokenizer_class, bos/eos tokens and the chat_template
  cases.jsonl             {"messages", "add_generation_prompt", "tools"?, "kwargs"?, "text", "ids"}:
                          transformers' apply_chat_template(tokenize=False, **kwargs) and its
                          tokenization, and {"messages", "error": substring} for conversations the
                          template refuses

  python3 tools/make_chat_fixtures.py --out fixtures/chat [--styles qwen3,mistral_v3]
Needs transformers and tokenizers (no downloads); fixtures/tokenizers/tekken first.
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

# After the structure of the template Qwen3 models ship: ChatML turns, tools in the system
# turn, <tool_call> blocks, tool responses grouped into one user turn, and the reasoning
# part: reasoning_content or a <think>...</think> prefix of the content, kept only for the
# turns after the last real user query (found walking the messages backwards), an empty
# think block on the last turn, and enable_thinking=false closing the think block of the
# generation prompt.
QWEN3 = r"""{%- if tools %}
    {{- '<|im_start|>system\n' }}
    {%- if messages[0].role == 'system' %}
        {{- messages[0].content + '\n\n' }}
    {%- endif %}
    {{- "# Tools\n\nYou can call the functions below to help with the request.\n\nTheir signatures, inside <tools></tools> tags:\n<tools>" }}
    {%- for tool in tools %}
        {{- "\n" }}
        {{- tool | tojson }}
    {%- endfor %}
    {{- "\n</tools>\n\nTo call one, answer with a JSON object holding its name and arguments inside <tool_call></tool_call> tags:\n<tool_call>\n{\"name\": <function-name>, \"arguments\": <args-json-object>}\n</tool_call><|im_end|>\n" }}
{%- elif messages[0].role == 'system' %}
    {{- '<|im_start|>system\n' + messages[0].content + '<|im_end|>\n' }}
{%- endif %}
{%- set ns = namespace(multi_step_tool=true, last_query_index=messages|length - 1) %}
{%- for message in messages[::-1] %}
    {%- set index = (messages|length - 1) - loop.index0 %}
    {%- if ns.multi_step_tool and message.role == "user" and message.content is string and not(message.content.startswith('<tool_response>') and message.content.endswith('</tool_response>')) %}
        {%- set ns.multi_step_tool = false %}
        {%- set ns.last_query_index = index %}
    {%- endif %}
{%- endfor %}
{%- if ns.multi_step_tool %}
    {{- raise_exception('No user query found in messages.') }}
{%- endif %}
{%- for message in messages %}
    {%- if message.content is string %}
        {%- set content = message.content %}
    {%- else %}
        {%- set content = '' %}
    {%- endif %}
    {%- if (message.role == "user") or (message.role == "system" and not loop.first) %}
        {{- '<|im_start|>' + message.role + '\n' + content + '<|im_end|>' + '\n' }}
    {%- elif message.role == "assistant" %}
        {%- set reasoning_content = '' %}
        {%- if message.reasoning_content is string %}
            {%- set reasoning_content = message.reasoning_content %}
        {%- else %}
            {%- if '</think>' in content %}
                {%- set reasoning_content = content.split('</think>')[0].rstrip('\n').split('<think>')[-1].lstrip('\n') %}
                {%- set content = content.split('</think>')[-1].lstrip('\n') %}
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
        {{- content }}
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

# After the structure of the v3 "tekken" template (Mistral NeMo): the system prompt goes
# into the last user turn, the tools ([AVAILABLE_TOOLS]) before it, tool calls as a JSON
# list with 9-character ids after [TOOL_CALLS], results in [TOOL_RESULTS]; user and
# assistant turns must alternate, tool turns aside.
MISTRAL_V3 = r"""{%- if messages[0]["role"] == "system" %}
    {%- set system_message = messages[0]["content"] %}
    {%- set loop_messages = messages[1:] %}
{%- else %}
    {%- set loop_messages = messages %}
{%- endif %}
{%- if not tools is defined %}
    {%- set tools = none %}
{%- endif %}
{%- set user_messages = loop_messages | selectattr("role", "equalto", "user") | list %}

{#- user and assistant turns alternate; tool calls and results do not count #}
{%- set ns = namespace() %}
{%- set ns.index = 0 %}
{%- for message in loop_messages %}
    {%- if not (message.role == "tool" or (message.tool_calls is defined and message.tool_calls is not none)) %}
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
    {%- elif message.tool_calls is defined and message.tool_calls is not none %}
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
        {{- message["content"] + eos_token }}
    {%- elif message["role"] == "tool" %}
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
        {{- raise_exception("Only user, assistant and tool roles are supported, with the exception of an initial optional system message!") }}
    {%- endif %}
{%- endfor %}
"""

# After the structure of the later tekken templates (Mistral Small 3): the system prompt as
# [SYSTEM_PROMPT]...[/SYSTEM_PROMPT] first (a default one when the chat has none), content
# as a string or a list of text blocks, system turns in the middle, [AVAILABLE_TOOLS] before
# the last user turn, tool calls as [TOOL_CALLS]name[ARGS]arguments, results in [TOOL_RESULTS].
MISTRAL_V7 = r"""{%- set default_system_message = "You are a helpful assistant. Answer briefly." %}
{{- bos_token }}
{%- if messages[0]['role'] == 'system' %}
    {%- if messages[0]['content'] is string %}
        {%- set system_message = messages[0]['content'] %}
    {%- else %}
        {%- set system_message = messages[0]['content'][0]['text'] %}
    {%- endif %}
    {%- set loop_messages = messages[1:] %}
{%- else %}
    {%- set system_message = default_system_message %}
    {%- set loop_messages = messages %}
{%- endif %}
{{- '[SYSTEM_PROMPT]' + system_message + '[/SYSTEM_PROMPT]' }}
{%- set ns = namespace(last_user=-1) %}
{%- for message in loop_messages %}
    {%- if message['role'] == 'user' %}
        {%- set ns.last_user = loop.index0 %}
    {%- endif %}
{%- endfor %}
{%- for message in loop_messages %}
    {%- if message['role'] == 'user' %}
        {%- if tools is defined and tools and loop.index0 == ns.last_user %}
            {{- '[AVAILABLE_TOOLS]' + tools|tojson + '[/AVAILABLE_TOOLS]' }}
        {%- endif %}
        {%- if message['content'] is string %}
            {{- '[INST]' + message['content'] + '[/INST]' }}
        {%- else %}
            {{- '[INST]' }}
            {%- for block in message['content'] %}
                {%- if block['type'] == 'text' %}
                    {{- block['text'] }}
                {%- else %}
                    {{- raise_exception('Only text blocks are supported in message content!') }}
                {%- endif %}
            {%- endfor %}
            {{- '[/INST]' }}
        {%- endif %}
    {%- elif message['role'] == 'system' %}
        {{- '[SYSTEM_PROMPT]' + message['content'] + '[/SYSTEM_PROMPT]' }}
    {%- elif message['role'] == 'assistant' %}
        {%- if message['content'] is string %}
            {{- message['content'] }}
        {%- elif message['content'] is iterable %}
            {%- for block in message['content'] %}
                {{- block['text'] }}
            {%- endfor %}
        {%- endif %}
        {%- if message['tool_calls'] is defined and message['tool_calls'] %}
            {%- for tool in message['tool_calls'] %}
                {%- set arguments = tool['function']['arguments'] %}
                {%- if arguments is not string %}
                    {%- set arguments = arguments|tojson %}
                {%- endif %}
                {{- '[TOOL_CALLS]' + tool['function']['name'] + '[ARGS]' + arguments }}
            {%- endfor %}
        {%- endif %}
        {{- eos_token }}
    {%- elif message['role'] == 'tool' %}
        {{- '[TOOL_RESULTS]' + message['content']|string + '[/TOOL_RESULTS]' }}
    {%- else %}
        {{- raise_exception('Only user, system, assistant and tool roles are supported!') }}
    {%- endif %}
{%- endfor %}
"""

CHAT_SPECIALS = ["<|start_header_id|>", "<|end_header_id|>", "<|eot_id|>", "<|im_start|>", "<|im_end|>",
                 "<s>", "</s>"]
# Qwen 3 spells these as added tokens that are not special.
QWEN3_TOKENS = ["<think>", "</think>", "<tool_call>", "</tool_call>", "<tool_response>", "</tool_response>"]

TOOLS = [{"type": "function", "function": {"name": "get_weather", "description": "Weather in a city",
                                          "parameters": {"type": "object", "properties": {"city": {"type": "string"}},
                                                         "required": ["city"]}}}]
TOOLS2 = TOOLS + [{"type": "function", "function": {
    "name": "convert", "description": "Convert \"units\" — any units",
    "parameters": {"type": "object", "properties": {"value": {"type": "number"}, "to": {"type": "string",
                                                                                      "enum": ["C", "F"]}},
                   "required": ["value", "to"]}, "return": {"type": "number"}}}]

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
# Qwen 2.5's tool parts: a system prompt beside the tools, content and several calls in one
# turn, consecutive tool results grouped, a call without the "function" wrapper, arguments
# given as a JSON string, and a system turn later on.
QWEN25_TOOL_CONVERSATIONS = [
    [{"role": "system", "content": "You check the weather."}, {"role": "user", "content": "Paris and Oslo?"},
     {"role": "assistant", "content": "Let me look both up.", "tool_calls": [
         {"type": "function", "function": {"name": "get_weather", "arguments": {"city": "Paris"}}},
         {"type": "function", "function": {"name": "get_weather", "arguments": {"city": "Oslo"}}}]},
     {"role": "tool", "content": "{\"temp\": 21.5}"}, {"role": "tool", "content": "{\"temp\": -3}"},
     {"role": "assistant", "content": "Paris 21.5, Oslo -3."}],
    [{"role": "user", "content": "Convert 30 C."},
     {"role": "assistant", "content": "", "tool_calls": [{"name": "convert", "arguments": {"value": 30, "to": "F"}}]},
     {"role": "tool", "content": "86"},
     {"role": "system", "content": "Answer in one line."},
     {"role": "user", "content": "And as a string?"},
     {"role": "assistant", "content": "", "tool_calls": [{"type": "function", "function": {
         "name": "convert", "arguments": "{\"value\": 30, \"to\": \"F\"}"}}]},
     {"role": "tool", "content": "86.0"}],
]

# Qwen 3: reasoning as reasoning_content or inside the content, dropped before the last
# user query; tool chains after it; tool results sent as a user turn; no user turn at all.
QWEN3_CONVERSATIONS = [
    [{"role": "user", "content": "Hello!"}, {"role": "assistant", "content": "Hi, how can I help?"}],
    [{"role": "system", "content": "You are terse."}, {"role": "user", "content": "What is 2+2?"},
     {"role": "assistant", "content": "4", "reasoning_content": "Two plus two.\n"},
     {"role": "user", "content": "And 3+3?"},
     {"role": "assistant", "content": "6", "reasoning_content": "\nThree plus three is six.\n\n"}],
    [{"role": "user", "content": "Is 91 prime?"},
     {"role": "assistant", "content": "<think>\n91 = 7 × 13.\n</think>\n\nNo: 91 = 7 × 13."},
     {"role": "user", "content": "And 97?"},
     {"role": "assistant", "content": "<think>\nNo divisor up to 9.\n</think>\n\n\nYes, 97 is prime."}],
    [{"role": "user", "content": "東京はどこ？"},
     {"role": "assistant", "content": "考え中…</think>日本の首都です。"}],
    [{"role": "user", "content": "Two closings"},
     {"role": "assistant", "content": "<think>a</think>b</think>\nc"}],
    [{"role": "user", "content": "Plain"}, {"role": "assistant", "content": "No thinking here.",
                                              "reasoning_content": ""}],
    [{"role": "system", "content": "Be kind."}, {"role": "user", "content": "Hi"}],
    [{"role": "user", "content": "Hi"}, {"role": "assistant", "content": "Hello."},
     {"role": "system", "content": "Now answer in French."}, {"role": "user", "content": "Bye"}],
]
QWEN3_TOOL_CONVERSATIONS = [
    [{"role": "system", "content": "You check the weather."}, {"role": "user", "content": "Paris and Oslo?"},
     {"role": "assistant", "content": None, "reasoning_content": "I need both cities.", "tool_calls": [
         {"type": "function", "function": {"name": "get_weather", "arguments": {"city": "Paris"}}},
         {"type": "function", "function": {"name": "get_weather", "arguments": {"city": "Oslo"}}}]},
     {"role": "tool", "content": "{\"temp\": 21.5}"}, {"role": "tool", "content": "{\"temp\": -3}"},
     {"role": "assistant", "content": "Paris 21.5, Oslo -3.", "reasoning_content": "Both came back."}],
    [{"role": "user", "content": "Convert 30 C."},
     {"role": "assistant", "content": "<think>\nUse the tool.\n</think>\n\nConverting.",
      "tool_calls": [{"name": "convert", "arguments": "{\"value\": 30, \"to\": \"F\"}"}]},
     {"role": "user", "content": "<tool_response>\n86\n</tool_response>"},
     {"role": "assistant", "content": "<think>\nGot 86.\n</think>\n\n86 F."},
     {"role": "user", "content": "Thanks!"}],
    [{"role": "user", "content": "Weather in Paris?"},
     {"role": "assistant", "content": "", "tool_calls": [{"type": "function", "function": {
         "name": "get_weather", "arguments": {"city": "Paris"}}}]},
     {"role": "tool", "content": "{\"temp\": 21.5}"}],
]

# Mistral (tekken): tool calls carry 9-character ids, tool results name them.
MISTRAL_CONVERSATIONS = CONVERSATIONS + [
    [{"role": "system", "content": "Be brief."}, {"role": "user", "content": "Hi"},
     {"role": "assistant", "content": "Hello."}, {"role": "user", "content": "Bye"}],
]
MISTRAL_TOOL_CONVERSATIONS = [
    [{"role": "system", "content": "You check the weather."}, {"role": "user", "content": "Hi"},
     {"role": "assistant", "content": "Hello."}, {"role": "user", "content": "Paris and Oslo?"},
     {"role": "assistant", "tool_calls": [
         {"id": "call00001", "type": "function", "function": {"name": "get_weather", "arguments": {"city": "Paris"}}},
         {"id": "call00002", "type": "function", "function": {"name": "get_weather", "arguments": {"city": "Oslo"}}}]},
     {"role": "tool", "tool_call_id": "call00001", "content": "{\"temp\": 21.5}"},
     {"role": "tool", "tool_call_id": "call00002", "content": "{\"temp\": -3}"},
     {"role": "assistant", "content": "Paris 21.5, Oslo -3."}],
    [{"role": "user", "content": "Convert 30 C."},
     {"role": "assistant", "tool_calls": [{"id": "Ab3dE6gH9", "type": "function", "function": {
         "name": "convert", "arguments": {"value": 30, "to": "F"}}}]},
     {"role": "tool", "tool_call_id": "Ab3dE6gH9", "content": "86"}],
]
MISTRAL_V7_CONVERSATIONS = MISTRAL_CONVERSATIONS + [
    [{"role": "system", "content": [{"type": "text", "text": "System from blocks."}]},
     {"role": "user", "content": [{"type": "text", "text": "Part one, "}, {"type": "text", "text": "part two."}]},
     {"role": "assistant", "content": "Both parts read."},
     {"role": "system", "content": "Be shorter."}, {"role": "user", "content": "Again"},
     {"role": "assistant", "content": [{"type": "text", "text": "Read."}]}],
]

HERE_TOK = os.path.join(HERE, "..", "fixtures", "tokenizers")

# style -> template, bos, eos, tokenizer, extra added tokens (non-special), conversations,
# conversations with tools, kwargs variants of the generation prompt, refused conversations.
STYLES = {
    "llama3": dict(template=LLAMA3, bos="<|begin_of_text|>", eos="<|eot_id|>",
                   convs=CONVERSATIONS, tool_convs=TOOL_CONVERSATIONS + QWEN25_TOOL_CONVERSATIONS[:1]),
    "qwen2": dict(template=QWEN25, bos=None, eos="<|im_end|>",
                  convs=CONVERSATIONS, tool_convs=TOOL_CONVERSATIONS + QWEN25_TOOL_CONVERSATIONS),
    "mistral": dict(template=MISTRAL, bos="<s>", eos="</s>", convs=CONVERSATIONS,
                    bad=[([{"role": "assistant", "content": "x"}, {"role": "user", "content": "y"}], "must alternate")]),
    "qwen3": dict(template=QWEN3, bos=None, eos="<|im_end|>", extra=QWEN3_TOKENS,
                  convs=QWEN3_CONVERSATIONS, tool_convs=TOOL_CONVERSATIONS + QWEN3_TOOL_CONVERSATIONS,
                  gen_kwargs=[{}, {"enable_thinking": True}, {"enable_thinking": False}],
                  bad=[([{"role": "system", "content": "x"}, {"role": "assistant", "content": "y"}],
                        "No user query found")]),
    "mistral_v3": dict(template=MISTRAL_V3, bos="<s>", eos="</s>", tokenizer="tekken",
                       convs=MISTRAL_CONVERSATIONS, tool_convs=MISTRAL_TOOL_CONVERSATIONS, tools=TOOLS2,
                       bad=[([{"role": "assistant", "content": "x"}, {"role": "user", "content": "y"}],
                             "must alternate"),
                            ([{"role": "user", "content": "x"}, {"role": "assistant", "tool_calls": [
                                {"id": "short", "function": {"name": "f", "arguments": {}}}]}],
                             "length 9")]),
    "mistral_v7": dict(template=MISTRAL_V7, bos="<s>", eos="</s>", tokenizer="tekken",
                       convs=MISTRAL_V7_CONVERSATIONS, tool_convs=MISTRAL_TOOL_CONVERSATIONS, tools=TOOLS2,
                       bad=[([{"role": "user", "content": [{"type": "image", "url": "x"}]}], "Only text blocks")]),
}


def build_tokenizer(path, source, extra):
    tok = Tokenizer.from_file(os.path.join(HERE_TOK, source, "tokenizer.json"))
    if source == "llama3":
        tok.add_special_tokens([AddedToken(t, special=True, normalized=False) for t in CHAT_SPECIALS])
    if extra:
        tok.add_tokens([AddedToken(t, special=False, normalized=False) for t in extra])
    tok.save(path)


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--out", required=True)
    ap.add_argument("--styles", default=",".join(STYLES), help="comma-separated subset of " + ", ".join(STYLES))
    args = ap.parse_args()
    for style in args.styles.split(","):
        st = STYLES[style]
        d = os.path.join(args.out, style)
        if os.path.isdir(d):
            shutil.rmtree(d)
        os.makedirs(d)
        build_tokenizer(os.path.join(d, "tokenizer.json"), st.get("tokenizer", "llama3"), st.get("extra"))
        config = {"tokenizer_class": "PreTrainedTokenizerFast", "bos_token": st["bos"], "eos_token": st["eos"],
                  "model_max_length": 131072, "clean_up_tokenization_spaces": False, "chat_template": st["template"]}
        with open(os.path.join(d, "tokenizer_config.json"), "w") as f:
            json.dump(config, f, indent=2, ensure_ascii=False)
            f.write("\n")
        hf = PreTrainedTokenizerFast.from_pretrained(d)
        lines = []
        tools = st.get("tools", TOOLS)
        convs = [(c, None) for c in st["convs"]] + [(c, tools) for c in st.get("tool_convs", [])]
        for conv, conv_tools in convs:
            for gen in (False, True):
                for extra_kwargs in (st.get("gen_kwargs", [{}]) if gen else [{}]):
                    kwargs = {"add_generation_prompt": gen, **extra_kwargs}
                    if conv_tools:
                        kwargs["tools"] = conv_tools
                    text = hf.apply_chat_template(conv, tokenize=False, **kwargs)
                    ids = hf(text, add_special_tokens=False)["input_ids"]
                    case = {"messages": conv, "add_generation_prompt": gen, "text": text, "ids": ids}
                    if conv_tools:
                        case["tools"] = conv_tools
                    if extra_kwargs:
                        case["kwargs"] = extra_kwargs
                    lines.append(case)
        for conv, err in st.get("bad", []):
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
