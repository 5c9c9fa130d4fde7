from __future__ import annotations

from pathlib import Path

import pytest

from libdisplay.compositor.renderer import (
    RendererFileError,
    RendererState,
    read_renderer_state,
    write_renderer_state,
)


def test_what_is_written_is_read_back(tmp_path: Path) -> None:
    state = RendererState(requested="gl", running="pixman", fallbacks=1)
    write_renderer_state(tmp_path / "renderer", state)
    assert read_renderer_state(tmp_path / "renderer") == state


def test_no_file_is_no_state(tmp_path: Path) -> None:
    assert read_renderer_state(tmp_path / "renderer") is None


@pytest.mark.parametrize("text", ["", "gl\n", "[]", '{"requested": "gl"}',
                                  '{"requested": "gl", "running": 1, "fallbacks": 0}',
                                  '{"requested": "gl", "running": "gl", "fallbacks": -1}'])
def test_anything_else_is_a_typed_error_naming_the_file(tmp_path: Path, text: str) -> None:
    (tmp_path / "renderer").write_text(text)
    with pytest.raises(RendererFileError, match="is not a renderer file"):
        read_renderer_state(tmp_path / "renderer")
