"""Mistral's template shape (v0.3 with tools): `[INST] ... [/INST]`, no assistant header, `</s>` after each answer.

What it does to history, as Mistral-7B-Instruct-v0.3 ships it:
- the system message is not a turn: its text is put before the user message *only when that message is the
  conversation's last*, so it moves to each new user message (and is gone from earlier ones on re-rendering);
- the tools (`[AVAILABLE_TOOLS]`) go before the last user message only;
- an answer is trimmed and follows `[/INST]` with a space; tool calls are one `[TOOL_CALLS]` JSON list, and tool
  results `[TOOL_RESULTS]` blocks naming the call.
"""

from __future__ import annotations

MISTRAL_STYLE = (
    "{%- if messages[0].role == 'system' %}"
    "{%- set system_message = messages[0].content %}{%- set loop_messages = messages[1:] %}"
    "{%- else %}{%- set loop_messages = messages %}{%- endif %}"
    "{%- set ns = namespace(last_user=-1) %}"
    "{%- for message in loop_messages %}{%- if message.role == 'user' %}{%- set ns.last_user = loop.index0 %}"
    "{%- endif %}{%- endfor %}"
    "{{- bos_token }}"
    "{%- for message in loop_messages %}"
    "{%- if message.role == 'user' %}"
    "{%- if tools and loop.index0 == ns.last_user %}"
    "{{- '[AVAILABLE_TOOLS][' }}{%- for tool in tools %}{{- tool | tojson }}{%- if not loop.last %}{{- ', ' }}"
    "{%- endif %}{%- endfor %}{{- '][/AVAILABLE_TOOLS]' }}"
    "{%- endif %}"
    "{%- if loop.last and system_message is defined %}"
    "{{- '[INST] ' + system_message + '\\n\\n' + message.content + '[/INST]' }}"
    "{%- else %}{{- '[INST] ' + message.content + '[/INST]' }}{%- endif %}"
    "{%- elif message.role == 'assistant' and message.tool_calls %}"
    "{{- '[TOOL_CALLS][' }}"
    "{%- for tc in message.tool_calls %}"
    '{{- \'{"name": "\' + tc.function.name + \'", "arguments": \' }}'
    "{%- if tc.function.arguments is string %}{{- tc.function.arguments }}"
    "{%- else %}{{- tc.function.arguments | tojson }}{%- endif %}"
    "{{- ', \"id\": \"' + (tc.id or '') + '\"}' }}"
    "{%- if not loop.last %}{{- ', ' }}{%- endif %}"
    "{%- endfor %}"
    "{{- ']' + eos_token }}"
    "{%- elif message.role == 'assistant' %}"
    "{{- ' ' + (message.content or '') | trim + eos_token }}"
    "{%- elif message.role == 'tool' %}"
    "{{- '[TOOL_RESULTS]{\"content\": ' + (message.content or '') | tojson }}"
    "{{- ', \"call_id\": \"' + (message.tool_call_id or '') + '\"}[/TOOL_RESULTS]' }}"
    "{%- else %}"
    "{{- raise_exception('Only user, assistant and tool roles are supported, with an optional first system "
    "message!') }}"
    "{%- endif %}"
    "{%- endfor %}"
)
