"""i420.c on its own, compiled with the trixie root's cc: random frames of odd and even sides,
padded rows and either channel order convert to exactly what tests/support/i420.py computes
sample by sample; after new pixels in some rows, converting only those rows over the old
frame gives the new frame's conversion."""

from __future__ import annotations

import random
import subprocess
from pathlib import Path

import pytest

from tests.support import i420

HERE = Path(__file__).resolve().parent

# Reads `width height stride red first end`, then two frames of height x stride bytes: writes
# the whole conversion of the first, then the second's rows [first, end) converted over it.
DRIVER = r"""
#include <stdio.h>
#include <stdlib.h>
#include "i420.h"

int
main(void)
{
	int width, height, stride, red, first, end;
	struct i420_size size;
	uint8_t *a, *b, *out;

	if (scanf("%d %d %d %d %d %d\n", &width, &height, &stride, &red, &first, &end) != 6)
		return 2;
	size = i420_size_of(width, height);
	a = malloc((size_t)stride * height);
	b = malloc((size_t)stride * height);
	out = malloc(i420_bytes(size));
	if (fread(a, (size_t)stride, (size_t)height, stdin) != (size_t)height)
		return 3;
	if (fread(b, (size_t)stride, (size_t)height, stdin) != (size_t)height)
		return 3;
	i420_convert_rows(out, size, a, (size_t)stride, red, 0, height);
	fwrite(out, 1, i420_bytes(size), stdout);
	i420_convert_rows(out, size, b, (size_t)stride, red, first, end);
	fwrite(out, 1, i420_bytes(size), stdout);
	free(a), free(b), free(out);
	return 0;
}
"""


@pytest.fixture(scope="module")
def driver(tmp_path_factory: pytest.TempPathFactory) -> Path:
    tmp = tmp_path_factory.mktemp("i420")
    (tmp / "driver.c").write_text(DRIVER)
    binary = tmp / "driver"
    subprocess.run(
        ["trixie-run", "cc", "-O2", "-Wall", "-Wextra", "-Werror", "-fsanitize=address,undefined",
         f"-I{HERE}", "-o", str(binary), str(tmp / "driver.c"), str(HERE / "i420.c")],
        check=True, timeout=120,
    )
    return binary


@pytest.mark.parametrize(
    ("width", "height", "padding", "red", "rows"),
    [
        (64, 48, 0, 2, (10, 11)),
        (37, 23, 12, 0, (0, 23)),
        (101, 8, 4, 2, (7, 8)),
        (2, 2, 0, 0, (1, 2)),
        (30, 31, 0, 2, (29, 31)),
    ],
    ids=["one-odd-row", "odd-sides-padded-xbgr", "last-row", "smallest", "dropped-row"],
)
def test_conversion_matches_the_sample_by_sample_reference(
    driver: Path, width: int, height: int, padding: int, red: int, rows: tuple[int, int]
) -> None:
    rng = random.Random(f"{width}x{height}")
    stride = width * 4 + padding
    old = rng.randbytes(stride * height)
    first, end = rows
    new = old[: first * stride] + rng.randbytes((end - first) * stride) + old[end * stride :]
    line = f"{width} {height} {stride} {red} {first} {end}\n".encode()
    result = subprocess.run(["trixie-run", str(driver)], input=line + old + new,
                            capture_output=True, timeout=120, check=False)
    assert result.returncode == 0, result.stderr[-2000:]
    half = len(result.stdout) // 2
    assert result.stdout[:half] == i420.from_packed(old, width, height, stride, red=red)
    assert result.stdout[half:] == i420.from_packed(new, width, height, stride, red=red)


def test_a_side_under_two_has_no_i420_form(driver: Path) -> None:
    result = subprocess.run(["trixie-run", str(driver)], input=b"1 5 4 2 0 5\n" + bytes(40),
                            capture_output=True, timeout=120, check=False)
    assert (result.returncode, result.stdout) == (0, b"")
