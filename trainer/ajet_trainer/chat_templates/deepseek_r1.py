"""DeepSeek-R1's template shape: `<｜User｜>` / `<｜Assistant｜>`, no separators, reasoning dropped from history.

What it does to history, as DeepSeek-R1 ships it:
- all system messages are concatenated at the very start, right after the BOS, whatever their place;
- an assistant turn's text loses everything up to `</think>`: earlier turns' reasoning is dropped;
- the generation prompt opens the reasoning (`<｜Assistant｜><think>\n`), so the model's answer starts inside it;
- tool calls are `<｜tool▁call▁begin｜>` blocks with the arguments in a fenced JSON block; consecutive tool results
  are grouped in one `<｜tool▁outputs▁begin｜>` block, and after tool results the generation prompt is left out
  (the model answers straight after the outputs).
"""

from __future__ import annotations

DEEPSEEK_R1_STYLE = (
    "{%- set ns = namespace(system_prompt='', is_tool=false) %}"
    "{%- for message in messages %}{%- if message.role == 'system' %}"
    "{%- set ns.system_prompt = ns.system_prompt + message.content %}{%- endif %}{%- endfor %}"
    "{{- bos_token }}{{- ns.system_prompt }}"
    "{%- for message in messages %}"
    "{%- set content = message.content or '' %}"
    "{%- if message.role == 'user' %}"
    "{%- if ns.is_tool %}{{- '<｜tool▁outputs▁end｜>' }}{%- set ns.is_tool = false %}{%- endif %}"
    "{{- '<｜User｜>' + content }}"
    "{%- elif message.role == 'assistant' %}"
    "{%- if ns.is_tool %}{{- '<｜tool▁outputs▁end｜>' }}{%- set ns.is_tool = false %}{%- endif %}"
    "{%- if '</think>' in content %}{%- set content = content.split('</think>')[-1] %}{%- endif %}"
    "{{- '<｜Assistant｜>' + content }}"
    "{%- if message.tool_calls %}{{- '<｜tool▁calls▁begin｜>' }}"
    "{%- for tc in message.tool_calls %}"
    "{{- '<｜tool▁call▁begin｜>function<｜tool▁sep｜>' + tc.function.name + '\\n```json\\n' }}"
    "{%- if tc.function.arguments is string %}{{- tc.function.arguments }}"
    "{%- else %}{{- tc.function.arguments | tojson }}{%- endif %}"
    "{{- '\\n```<｜tool▁call▁end｜>' }}"
    "{%- endfor %}{{- '<｜tool▁calls▁end｜>' }}{%- endif %}"
    "{{- '<｜end▁of▁sentence｜>' }}"
    "{%- elif message.role == 'tool' %}"
    "{%- if not ns.is_tool %}{{- '<｜tool▁outputs▁begin｜>' }}{%- set ns.is_tool = true %}{%- endif %}"
    "{{- '<｜tool▁output▁begin｜>' + content + '<｜tool▁output▁end｜>' }}"
    "{%- endif %}"
    "{%- endfor %}"
    "{%- if ns.is_tool %}{{- '<｜tool▁outputs▁end｜>' }}{%- endif %}"
    "{%- if add_generation_prompt and not ns.is_tool %}{{- '<｜Assistant｜><think>\\n' }}{%- endif %}"
)
