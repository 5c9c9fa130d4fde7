"""boxfilter.c on its own, compiled with the trixie root's cc: for every wl_output transform,
odd sizes, padded rows and factors 1 to 5, the frame equals a reference that first turns the
framebuffer upright pixel by pixel (weston_matrix_init_transform's mapping) and then takes each
block's rounded mean; with SSE2 and with the portable loop alike. After new pixels in some
framebuffer rows, refiltering only the frame rows box_rows_of names gives the same frame as
filtering all of it anew."""

from __future__ import annotations

import subprocess
from pathlib import Path

import pytest

HERE = Path(__file__).resolve().parent

CHECK = r"""
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include "boxfilter.h"

static void
reference(uint8_t *out, const uint8_t *in, int w, int h, int f)
{
	int ow = (w + f - 1) / f, oh = (h + f - 1) / f;

	for (int j = 0; j < oh; j++)
		for (int i = 0; i < ow; i++)
			for (int c = 0; c < 4; c++) {
				unsigned s = 0, n = 0;

				for (int y = j * f; y < j * f + f && y < h; y++)
					for (int x = i * f; x < i * f + f && x < w; x++, n++)
						s += in[((size_t)y * w + x) * 4 + c];
				out[((size_t)j * ow + i) * 4 + c] = (uint8_t)((s + n / 2) / n);
			}
}

/* The framebuffer pixel that upright (x, y) shows: a flip of x for the flipped kinds, then
 * weston's counter-clockwise turn. */
static void
framebuffer_xy(int t, int fw, int fh, int x, int y, int *fx, int *fy)
{
	int w = (t & 1) ? fh : fw, ux = t >= 4 ? w - 1 - x : x;

	switch (t & 3) {
	case 0: *fx = ux; *fy = y; break;
	case 1: *fx = y; *fy = fh - 1 - ux; break;
	case 2: *fx = fw - 1 - ux; *fy = fh - 1 - y; break;
	default: *fx = fw - 1 - y; *fy = ux; break;
	}
}

/* The upright w x h image that framebuffer `fb` shows under transform t, into `up`. */
static void
upright(uint8_t *up, const uint8_t *fb, size_t stride, int t, int fw, int fh)
{
	int w = (t & 1) ? fh : fw, h = (t & 1) ? fw : fh;

	for (int y = 0; y < h; y++)
		for (int x = 0; x < w; x++) {
			int fx, fy;

			framebuffer_xy(t, fw, fh, x, y, &fx, &fy);
			memcpy(up + ((size_t)y * w + x) * 4, fb + fy * stride + fx * 4, 4);
		}
}

int
main(void)
{
	static const int sizes[][3] = { { 37, 23, 0 }, { 64, 48, 16 }, { 101, 7, 0 }, { 642, 482, 8 } };

	srand(1);
	for (int s = 0; s < 4; s++)
		for (int t = 0; t < 8; t++)
			for (int f = 1; f <= 5; f++) {
				int fw = sizes[s][0], fh = sizes[s][1];
				size_t stride = (size_t)fw * 4 + (size_t)sizes[s][2];
				int w = (t & 1) ? fh : fw, h = (t & 1) ? fw : fh;
				int ow = (w + f - 1) / f, oh = (h + f - 1) / f;
				uint8_t *fb = malloc(stride * fh), *up = malloc((size_t)w * h * 4);
				uint8_t *got = malloc((size_t)ow * oh * 4), *want = malloc((size_t)ow * oh * 4);
				struct box_view view;

				for (size_t k = 0; k < stride * fh; k++)
					fb[k] = (uint8_t)rand();
				upright(up, fb, stride, t, fw, fh);
				view = box_view_upright(fb, fw, fh, stride, (uint32_t)t);
				if (view.width != w || view.height != h) {
					printf("%dx%d transform %d: view %dx%d\n", fw, fh, t, view.width, view.height);
					return 1;
				}
				box_downscale(got, &view, f);
				reference(want, up, w, h, f);
				if (memcmp(got, want, (size_t)ow * oh * 4) != 0) {
					printf("%dx%d transform %d factor %d differs\n", fw, fh, t, f);
					return 1;
				}
				/* New pixels in some framebuffer rows: the rows box_rows_of names, */
				/* refiltered over the old frame, give the new content's frame. */
				for (int round = 0; round < 4; round++) {
					int y1 = rand() % fh, y2 = y1 + 1 + rand() % (fh - y1);
					struct box_rows rows;

					for (size_t k = (size_t)y1 * stride; k < (size_t)y2 * stride; k++)
						fb[k] = (uint8_t)rand();
					upright(up, fb, stride, t, fw, fh);
					rows = box_rows_of(&view, f, y1, y2);
					if (t & 1) {
						if (rows.first != 0 || rows.end != oh) {
							printf("transform %d: rows %d-%d of a turned frame\n",
								t, rows.first, rows.end);
							return 1;
						}
						box_downscale(got, &view, f);
					} else {
						box_downscale_rows(got, &view, f, rows.first, rows.end);
					}
					reference(want, up, w, h, f);
					if (memcmp(got, want, (size_t)ow * oh * 4) != 0) {
						printf("%dx%d transform %d factor %d rows %d-%d: "
							"refiltered frame differs\n", fw, fh, t, f, y1, y2);
						return 1;
					}
				}
				free(fb), free(up), free(got), free(want);
			}
	puts("ok");
	return 0;
}
"""


@pytest.mark.parametrize("flags", [[], ["-U__SSE2__"]], ids=["sse2", "portable"])
def test_every_transform_and_factor_matches_the_reference(tmp_path: Path, flags: list[str]) -> None:
    source = tmp_path / "check.c"
    source.write_text(CHECK)
    binary = tmp_path / "check"
    subprocess.run(
        ["trixie-run", "cc", "-O2", "-Wall", "-Wextra", "-Werror", "-fsanitize=address,undefined",
         *flags, f"-I{HERE}", "-o", str(binary), str(source), str(HERE / "boxfilter.c")],
        check=True, timeout=120,
    )
    result = subprocess.run(
        ["trixie-run", str(binary)], capture_output=True, text=True, timeout=120, check=False
    )
    assert (result.returncode, result.stdout.strip()) == (0, "ok"), result.stderr[-2000:]
