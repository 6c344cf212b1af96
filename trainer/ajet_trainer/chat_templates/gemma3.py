"""Gemma 3's template shape: `<start_of_turn>user|model ... <end_of_turn>`.

What it does to history, as Gemma 3 ships it:
- there is no system role: the system text is folded into the first user turn (so a conversation's start renders
  differently with and without one);
- roles must alternate user/model (anything else is refused), so there is no tool turn;
- every message's text is trimmed.
"""

from __future__ import annotations

GEMMA3_STYLE = (
    "{{- bos_token }}"
    "{%- if messages[0].role == 'system' %}"
    "{%- set first_user_prefix = messages[0].content + '\\n\\n' %}{%- set loop_messages = messages[1:] %}"
    "{%- else %}{%- set first_user_prefix = '' %}{%- set loop_messages = messages %}{%- endif %}"
    "{%- for message in loop_messages %}"
    "{%- if (message.role == 'user') != (loop.index0 % 2 == 0) %}"
    "{{- raise_exception('Conversation roles must alternate user/assistant/user/assistant/...') }}"
    "{%- endif %}"
    "{%- set role = 'model' if message.role == 'assistant' else message.role %}"
    "{{- '<start_of_turn>' + role + '\\n' + (first_user_prefix if loop.first else '') }}"
    "{{- (message.content or '') | trim }}"
    "{{- '<end_of_turn>\\n' }}"
    "{%- endfor %}"
    "{%- if add_generation_prompt %}{{- '<start_of_turn>model\\n' }}{%- endif %}"
)
