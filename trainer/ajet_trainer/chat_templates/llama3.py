"""Llama 3.x's template shape: headers and `<|eot_id|>`.

What it does to history, as Llama 3.1/3.2/3.3 ship it:
- the system turn always carries injected dates ("Cutting Knowledge Date", and "Today Date" from `strftime_now`,
  so the same conversation renders differently on another day), and `Environment: ipython` when there are tools;
- the tools go into the *first user message* (`tools_in_user_message`), which is taken out of the loop;
- every message's text is trimmed;
- an assistant turn with a tool call renders only the call, as `{"name": ..., "parameters": ...}` JSON: its text is
  dropped, and more than one call is refused;
- a tool result is an `ipython` turn (its content as JSON when it is not a string).
"""

from __future__ import annotations

LLAMA3_STYLE = (
    "{{- bos_token }}"
    "{%- set date_string = strftime_now('%d %b %Y') if strftime_now is defined else '26 Jul 2024' %}"
    "{%- if messages[0].role == 'system' %}"
    "{%- set system_message = messages[0].content | trim %}{%- set messages = messages[1:] %}"
    "{%- else %}{%- set system_message = '' %}{%- endif %}"
    "{{- '<|start_header_id|>system<|end_header_id|>\\n\\n' }}"
    "{%- if tools %}{{- 'Environment: ipython\\n' }}{%- endif %}"
    "{{- 'Cutting Knowledge Date: December 2023\\n' }}"
    "{{- 'Today Date: ' + date_string + '\\n\\n' }}"
    "{{- system_message }}{{- '<|eot_id|>' }}"
    "{%- if tools and messages %}"
    "{%- set first_user_message = messages[0].content | trim %}{%- set messages = messages[1:] %}"
    "{{- '<|start_header_id|>user<|end_header_id|>\\n\\n' }}"
    "{{- 'Given the following functions, please respond with a JSON for a function call with its proper "
    "arguments that best answers the given prompt.\\n\\n' }}"
    '{{- \'Respond in the format {"name": function name, "parameters": dictionary of argument name and its '
    "value}. Do not use variables.\\n\\n' }}"
    "{%- for t in tools %}{{- t | tojson(indent=4) }}{{- '\\n\\n' }}{%- endfor %}"
    "{{- first_user_message + '<|eot_id|>' }}"
    "{%- endif %}"
    "{%- for message in messages %}"
    "{%- if message.role == 'assistant' and message.tool_calls %}"
    "{%- if message.tool_calls | length != 1 %}"
    "{{- raise_exception('This model only supports single tool-calls at once!') }}{%- endif %}"
    "{%- set tc = message.tool_calls[0].function %}"
    "{{- '<|start_header_id|>assistant<|end_header_id|>\\n\\n' }}"
    '{{- \'{"name": "\' + tc.name + \'", "parameters": \' }}'
    "{%- if tc.arguments is string %}{{- tc.arguments }}{%- else %}{{- tc.arguments | tojson }}{%- endif %}"
    "{{- '}<|eot_id|>' }}"
    "{%- elif message.role in ('tool', 'ipython') %}"
    "{{- '<|start_header_id|>ipython<|end_header_id|>\\n\\n' }}"
    "{%- if message.content is mapping or message.content is iterable and message.content is not string %}"
    "{{- message.content | tojson }}{%- else %}{{- message.content }}{%- endif %}"
    "{{- '<|eot_id|>' }}"
    "{%- else %}"
    "{{- '<|start_header_id|>' + message.role + '<|end_header_id|>\\n\\n' + (message.content or '') | trim }}"
    "{{- '<|eot_id|>' }}"
    "{%- endif %}"
    "{%- endfor %}"
    "{%- if add_generation_prompt %}{{- '<|start_header_id|>assistant<|end_header_id|>\\n\\n' }}{%- endif %}"
)
