"""ChatML templates: the char-level models' and the Qwen family's (`<|im_start|>role ... <|im_end|>`).

- `CHAR_TEMPLATE`: the char-level models' ChatML with tools and Hermes-style `<tool_call>` blocks.
- `QWEN25_STYLE`: the shape of Qwen2.5's template: a default system prompt, the tools as JSON lines inside
  `<tools></tools>`, each tool call as `<tool_call>\\n{"name": ..., "arguments": <tojson>}\\n</tool_call>`, and
  consecutive tool results grouped in one `user` turn of `<tool_response>` blocks.
- `QWEN3_STYLE`: Qwen3's template as shipped: no default system prompt; an assistant turn's reasoning (from
  `reasoning_content`, or split off its content at `</think>`) is rendered only for the turns after the last user
  query, so earlier turns lose it; the conversation's *last* assistant turn gets a `<think>` block even when it
  has no reasoning (the branch `loop.last or reasoning_content`); `enable_thinking=false` puts an empty think block
  in the generation prompt.
- `QWEN3_INSTRUCT_STYLE`: a Qwen3-style instruct template (Qwen3-2507 Instruct's shape): no reasoning at all.

Tool-call arguments reach a template as objects (the engines parse the wire's JSON strings first, as vLLM does),
so the template re-renders them with `tojson`: compact JSON the model wrote comes back re-spaced, `1.50` as `1.5`.
These are this project's own templates, written to reproduce the re-rendering behaviour real models have.
"""

from __future__ import annotations

_ARGS = (
    "{% if tc.function.arguments is string %}{{ tc.function.arguments }}"
    "{% else %}{{ tc.function.arguments | tojson }}{% endif %}"
)

CHAR_TEMPLATE = (
    "{% if tools %}<|im_start|>system\n"
    "{% if messages[0].role == 'system' %}{{ messages[0].content }}\n\n{% endif %}"
    "Tools:{% for tool in tools %}{{ '\\n' }}{{ tool | tojson }}{% endfor %}{{ '\\n' }}"
    'Call a tool as <tool_call>{"name": ..., "arguments": ...}</tool_call><|im_end|>\n'
    "{% endif %}"
    "{% for message in messages %}"
    "{% if not (tools and loop.first and message.role == 'system') %}"
    "<|im_start|>{{ message.role }}\n"
    "{% if message.content %}{{ message.content }}{% endif %}"
    "{% for tc in message.tool_calls or [] %}<tool_call>"
    '{"name": "{{ tc.function.name }}", "arguments": ' + _ARGS + "}</tool_call>"
    "{% endfor %}<|im_end|>\n"
    "{% endif %}"
    "{% endfor %}"
    "{% if add_generation_prompt %}<|im_start|>assistant\n{% endif %}"
)

_DEFAULT_SYSTEM = "You are a helpful assistant."

_TOOLS_BLOCK = (
    "{{- '# Tools\\n\\nYou may call one or more functions to assist with the user query.\\n\\n' }}"
    "{{- 'You are provided with function signatures within <tools></tools> XML tags:\\n<tools>' }}"
    "{%- for tool in tools %}{{ '\\n' }}{{ tool | tojson }}{% endfor %}"
    "{{- '\\n</tools>\\n\\nFor each function call, return a json object with function name and arguments within "
    '<tool_call></tool_call> XML tags:\\n<tool_call>\\n{\\"name\\": <function-name>, \\"arguments\\": '
    "<args-json-object>}\\n</tool_call><|im_end|>\\n' }}"
)


def _header(default_system: str) -> str:
    """Qwen2.5's system turn: the system message (or `default_system`), then the tools."""
    return (
        "{%- if tools %}"
        "{{- '<|im_start|>system\\n' }}"
        "{%- if messages[0].role == 'system' %}{{ messages[0].content }}{% else %}{{ '" + default_system + "' }}"
        "{% endif %}{{ '\\n\\n' }}" + _TOOLS_BLOCK + "{%- elif messages[0].role == 'system' %}"
        "{{- '<|im_start|>system\\n' + messages[0].content + '<|im_end|>\\n' }}"
        "{%- else %}"
        "{{- '<|im_start|>system\\n" + default_system + "<|im_end|>\\n' }}"
        "{%- endif %}"
    )


_HEADER_NO_DEFAULT = (
    "{%- if tools %}"
    "{{- '<|im_start|>system\\n' }}"
    "{%- if messages[0].role == 'system' %}{{ messages[0].content + '\\n\\n' }}{% endif %}"
    + _TOOLS_BLOCK
    + "{%- elif messages[0].role == 'system' %}"
    "{{- '<|im_start|>system\\n' + messages[0].content + '<|im_end|>\\n' }}"
    "{%- endif %}"
)
"""Qwen3's system turn: no default system message."""


def _tool_calls(newline_first: str) -> str:
    """An assistant turn's tool calls; `newline_first`: the Jinja test for a newline before the first one."""
    return (
        "{%- for tc in message.tool_calls or [] %}"
        "{%- if not loop.first or (" + newline_first + ") %}{{ '\\n' }}{% endif %}"
        '{{- \'<tool_call>\\n{"name": "\' + tc.function.name + \'", "arguments": \' }}'
        + _ARGS
        + "{{- '}\\n</tool_call>' }}"
        "{%- endfor %}"
    )


_TOOL_RESULT = (
    "{%- if loop.first or messages[loop.index0 - 1].role != 'tool' %}{{ '<|im_start|>user' }}{% endif %}"
    "{{- '\\n<tool_response>\\n' + (message.content or '') + '\\n</tool_response>' }}"
    "{%- if loop.last or messages[loop.index0 + 1].role != 'tool' %}{{ '<|im_end|>\\n' }}{% endif %}"
)


def qwen25_style(default_system: str = _DEFAULT_SYSTEM) -> str:
    """Qwen2.5's template with `default_system` as the system prompt of a conversation that brings none."""
    return (
        _header(default_system) + "{%- for message in messages %}"
        "{%- set content = message.content or '' %}"
        "{%- if message.role == 'user' or (message.role == 'system' and not loop.first) %}"
        "{{- '<|im_start|>' + message.role + '\\n' + content + '<|im_end|>\\n' }}"
        "{%- elif message.role == 'assistant' %}"
        "{{- '<|im_start|>assistant' }}{% if content %}{{ '\\n' + content }}{% endif %}"
        + _tool_calls("true")
        + "{{- '<|im_end|>\\n' }}"
        "{%- elif message.role == 'tool' %}" + _TOOL_RESULT + "{%- endif %}"
        "{%- endfor %}"
        "{%- if add_generation_prompt %}{{ '<|im_start|>assistant\\n' }}{% endif %}"
    )


QWEN25_STYLE = qwen25_style()
SMOLLM2_DEFAULT_SYSTEM = "You are a helpful AI assistant named SmolLM, trained by Hugging Face"
"""SmolLM2-Instruct's shipped template's system prompt for a conversation that brings none."""
SMOLLM2_STYLE = qwen25_style(SMOLLM2_DEFAULT_SYSTEM)
"""SmolLM2-Instruct's ChatML with tools. Its shipped template renders no tools, tool calls or tool results, so this
is Qwen2.5's shape (the tools in `<tools>`, Hermes `<tool_call>` blocks, results in `<tool_response>`: what vLLM's
`hermes` parser and the embedded engine's forced calls speak) with SmolLM2's own default system prompt."""

_LAST_QUERY = (
    "{%- set ns = namespace(multi_step_tool=true, last_query_index=messages|length - 1) %}"
    "{%- for message in messages[::-1] %}"
    "{%- set index = (messages|length - 1) - loop.index0 %}"
    "{%- set text = message.content if message.content is string else '' %}"
    "{%- if ns.multi_step_tool and message.role == 'user' "
    "and not (text.startswith('<tool_response>') and text.endswith('</tool_response>')) %}"
    "{%- set ns.multi_step_tool = false %}{%- set ns.last_query_index = index %}"
    "{%- endif %}"
    "{%- endfor %}"
)

_ASSISTANT_WITH_THINKING = (
    "{%- set reasoning = message.reasoning_content if message.reasoning_content is string else '' %}"
    "{%- if not reasoning and '</think>' in content %}"
    "{%- set reasoning = content.split('</think>')[0].rstrip('\\n').split('<think>')[-1].lstrip('\\n') %}"
    "{%- set content = content.split('</think>')[-1].lstrip('\\n') %}"
    "{%- endif %}"
    "{{- '<|im_start|>assistant\\n' }}"
    "{%- if loop.index0 > ns.last_query_index and (loop.last or reasoning) %}"
    "{{- '<think>\\n' + reasoning.strip('\\n') + '\\n</think>\\n\\n' + content.lstrip('\\n') }}"
    "{%- else %}{{- content }}{%- endif %}"
)
"""Qwen3's assistant turn: the reasoning only after the last user query, and always on the conversation's last
turn (an empty think block when it has none)."""


def _chatml(header: str, assistant: str, newline_first: str, generation: str) -> str:
    """A Qwen-family template: `header`, then each message (`assistant` renders an assistant turn's text), then the
    generation prompt followed by `generation`."""
    return (
        header + _LAST_QUERY + "{%- for message in messages %}"
        "{%- set content = message.content or '' %}"
        "{%- if message.role == 'user' or (message.role == 'system' and not loop.first) %}"
        "{{- '<|im_start|>' + message.role + '\\n' + content + '<|im_end|>\\n' }}"
        "{%- elif message.role == 'assistant' %}" + assistant + _tool_calls(newline_first) + "{{- '<|im_end|>\\n' }}"
        "{%- elif message.role == 'tool' %}" + _TOOL_RESULT + "{%- endif %}"
        "{%- endfor %}"
        "{%- if add_generation_prompt %}{{ '<|im_start|>assistant\\n' }}" + generation + "{% endif %}"
    )


QWEN3_STYLE = _chatml(
    _HEADER_NO_DEFAULT,
    _ASSISTANT_WITH_THINKING,
    "content",
    "{%- if enable_thinking is defined and enable_thinking is false %}{{ '<think>\\n\\n</think>\\n\\n' }}{% endif %}",
)

QWEN3_INSTRUCT_STYLE = _chatml(_HEADER_NO_DEFAULT, "{{- '<|im_start|>assistant\\n' + content }}", "content", "")
