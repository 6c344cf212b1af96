"""docs/options.md is the options as the code declares them: regenerate it with `python scripts/options_table.py`."""

from scripts.options_table import PAGE, render


def test_the_options_page_is_what_the_code_declares():
    assert PAGE.read_text() == render(), "docs/options.md is stale: run python scripts/options_table.py"


def test_the_page_lists_every_option_once():
    text = PAGE.read_text()
    for flag in ("--vllm-max-experiments", "--commit-window-ms", "--db-mode", "--vllm-arg"):
        assert text.count(f"| `{flag}` |") == (2 if flag == "--db-mode" else 1), flag
