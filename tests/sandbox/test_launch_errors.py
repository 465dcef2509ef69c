"""The launcher (`kraft-sandbox run PROGRAM`, the pods' shims) says what it can run."""

from __future__ import annotations

import pytest
from kraft_sandbox import launch


def test_an_unknown_program_is_named_with_what_can_run() -> None:
    with pytest.raises(SystemExit) as refused:
        launch._entrypoint("python")
    text = str(refused.value.code)
    assert "'python'" in text
    assert "console script" in text and "kraft-operator" in text, text
