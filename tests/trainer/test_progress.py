"""Progress bars: drawn at a terminal (or with AJET_PROGRESS=1), never in logs; export copies with one."""

import pytest

from ajet_trainer.progress import copy_tree, progress_enabled


def test_progress_follows_the_terminal_unless_forced(monkeypatch):
    monkeypatch.delenv("AJET_PROGRESS", raising=False)
    assert progress_enabled() is False  # pytest captures stderr: not a terminal
    monkeypatch.setenv("AJET_PROGRESS", "1")
    assert progress_enabled() is True
    monkeypatch.setenv("AJET_PROGRESS", "0")
    assert progress_enabled() is False


@pytest.mark.parametrize("forced", ["1", "0"])
def test_copy_tree_copies_exactly_with_a_bar_only_when_enabled(tmp_path, monkeypatch, capsys, forced):
    monkeypatch.setenv("AJET_PROGRESS", forced)
    src = tmp_path / "src"
    (src / "sub").mkdir(parents=True)
    (src / "model.safetensors").write_bytes(b"x" * 5000)
    (src / "sub" / "config.json").write_text("{}")
    copy_tree(src, tmp_path / "dst", "export step 3")
    assert (tmp_path / "dst" / "model.safetensors").read_bytes() == b"x" * 5000
    assert (tmp_path / "dst" / "sub" / "config.json").read_text() == "{}"
    err = capsys.readouterr().err
    assert ("export step 3" in err and "100%" in err) == (forced == "1")
