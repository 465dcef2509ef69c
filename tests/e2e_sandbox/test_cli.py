"""`python -m e2e --help` says what the command does and how it picks its backend."""

from __future__ import annotations

import pytest

from e2e.__main__ import main


def test_help_is_whole_sentences_and_names_the_backend_choice(
        capsys: pytest.CaptureFixture[str]) -> None:
    with pytest.raises(SystemExit) as done:
        main(["--help"])
    assert done.value.code == 0
    text = " ".join(capsys.readouterr().out.split())
    assert "run the end-to-end scenarios and print each one's figures" in text
    assert "E2E_BACKEND=sandbox forces the sandbox" in text.replace("`", "")
