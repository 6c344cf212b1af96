"""gpt-oss's harmony format: `<|start|>role<|channel|>... <|message|>... <|end|>`.

What it does to history, as gpt-oss ships it:
- a system turn with injected model identity and date (`strftime_now`), and a `developer` turn for the system
  message's instructions and the tools (as a TypeScript namespace);
- an assistant answer is two messages: its reasoning on the `analysis` channel and its text on `final`; the
  analysis of turns before the last user message is dropped;
- the model ends an answer with `<|return|>`, but history renders it with `<|end|>` (the conversation's last
  turn, rendered without a generation prompt, keeps `<|return|>`): the token the model stopped on is not the one
  the template closes its turn with;
- a tool call is a `commentary` message addressed `to=functions.<name>` ending `<|call|>`; its result a message
  from `functions.<name>` (the name of the call before it).
"""

from __future__ import annotations

GPT_OSS_STYLE = (
    "{%- set date_string = strftime_now('%Y-%m-%d') if strftime_now is defined else '2025-08-05' %}"
    "{{- '<|start|>system<|message|>You are ChatGPT, a large language model trained by OpenAI.\\n' }}"
    "{{- 'Knowledge cutoff: 2024-06\\nCurrent date: ' + date_string + '\\n\\n' }}"
    "{{- 'Reasoning: ' + (reasoning_effort if reasoning_effort is defined else 'medium') + '\\n\\n' }}"
    "{{- '# Valid channels: analysis, commentary, final. Channel must be included for every message.' }}"
    "{%- if tools %}{{- \"\\nCalls to these tools must go to the commentary channel: 'functions'.\" }}{%- endif %}"
    "{{- '<|end|>' }}"
    "{%- if messages[0].role in ('system', 'developer') %}"
    "{%- set instructions = messages[0].content %}{%- set loop_messages = messages[1:] %}"
    "{%- else %}{%- set instructions = '' %}{%- set loop_messages = messages %}{%- endif %}"
    "{%- if instructions or tools %}"
    "{{- '<|start|>developer<|message|>' }}"
    "{%- if instructions %}{{- '# Instructions\\n\\n' + instructions }}{%- endif %}"
    "{%- if tools %}{{- '\\n\\n# Tools\\n\\n## functions\\n\\nnamespace functions {\\n\\n' }}"
    "{%- for tool in tools %}{%- set fn = tool.function if tool.function is defined else tool %}"
    "{{- '// ' + (fn.description or '') + '\\ntype ' + fn.name + ' = (_: ' + (fn.parameters | tojson) }}"
    "{{- ') => any;\\n\\n' }}{%- endfor %}{{- '} // namespace functions' }}{%- endif %}"
    "{{- '<|end|>' }}"
    "{%- endif %}"
    "{%- set ns = namespace(last_user=-1, tool_name='') %}"
    "{%- for message in loop_messages %}{%- if message.role == 'user' %}{%- set ns.last_user = loop.index0 %}"
    "{%- endif %}{%- endfor %}"
    "{%- for message in loop_messages %}"
    "{%- set thinking = message.thinking if message.thinking is string else "
    "(message.reasoning_content if message.reasoning_content is string else '') %}"
    "{%- if message.role == 'user' %}"
    "{{- '<|start|>user<|message|>' + (message.content or '') + '<|end|>' }}"
    "{%- elif message.role == 'assistant' and message.tool_calls %}"
    "{%- if thinking and loop.index0 > ns.last_user %}"
    "{{- '<|start|>assistant<|channel|>analysis<|message|>' + thinking + '<|end|>' }}"
    "{%- elif message.content %}"
    "{{- '<|start|>assistant<|channel|>analysis<|message|>' + message.content + '<|end|>' }}"
    "{%- endif %}"
    "{%- set tc = message.tool_calls[0].function %}{%- set ns.tool_name = tc.name %}"
    "{{- '<|start|>assistant to=functions.' + tc.name + '<|channel|>commentary json<|message|>' }}"
    "{%- if tc.arguments is string %}{{- tc.arguments }}{%- else %}{{- tc.arguments | tojson }}{%- endif %}"
    "{{- '<|call|>' }}"
    "{%- elif message.role == 'assistant' %}"
    "{%- if thinking and loop.index0 > ns.last_user %}"
    "{{- '<|start|>assistant<|channel|>analysis<|message|>' + thinking + '<|end|>' }}"
    "{%- endif %}"
    "{{- '<|start|>assistant<|channel|>final<|message|>' + (message.content or '') }}"
    "{%- if loop.last and not add_generation_prompt %}{{- '<|return|>' }}{%- else %}{{- '<|end|>' }}{%- endif %}"
    "{%- elif message.role == 'tool' %}"
    "{{- '<|start|>functions.' + ns.tool_name + ' to=assistant<|channel|>commentary<|message|>' }}"
    "{{- (message.content or '') | tojson + '<|end|>' }}"
    "{%- endif %}"
    "{%- endfor %}"
    "{%- if add_generation_prompt %}{{- '<|start|>assistant' }}{%- endif %}"
)
