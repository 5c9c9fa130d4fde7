/* The capture socket's box filter (boxfilter.c): a captured framebuffer, turned upright and
 * shrunk by an integer factor. Pure computation on memory, safe on any thread. */
#ifndef LAYOUT_BOXFILTER_H
#define LAYOUT_BOXFILTER_H

#include <stddef.h>
#include <stdint.h>

/* A byte's sum over a block of up to FACTOR_MAX^2 pixels fits 32 bits, and the rounded
 * division by reciprocal (RECIP_SHIFT) is exact for blocks of up to 2^23 pixels. BOUND_MIN
 * keeps the factor within it for any output up to 32768 pixels a side. */
#define FACTOR_MAX 2048
#define RECIP_SHIFT 55

/* The image as a person before the monitor sees it, over a captured framebuffer of 32-bit
 * pixels: its pixel (x, y) is at origin + x * dx + y * dy. */
struct box_view {
	const uint8_t *origin;
	ptrdiff_t dx, dy;
	int32_t width, height;
};

/* The upright view of a framebuffer of width x height pixels, rows `stride` bytes apart,
 * that the compositor drew with wl_output transform `transform` (0..7; any other value is
 * taken as normal). */
struct box_view box_view_upright(const uint8_t *pixels, int32_t width, int32_t height,
				 size_t stride, uint32_t transform);

/* The smallest f >= 1 with ceil(width/f) <= max_width and ceil(height/f) <= max_height;
 * 1 when max_width is 0 (no bound). */
int32_t box_factor(int32_t width, int32_t height, int32_t max_width, int32_t max_height);

/* Writes ceil(width/factor) x ceil(height/factor) packed pixels of `view` to `out`, each the
 * mean of its factor x factor block, byte by byte, rounded half up; blocks are anchored at
 * the top-left corner and the last column and row of blocks average the pixels they have.
 * factor is 1..FACTOR_MAX. */
void box_downscale(uint8_t *out, const struct box_view *view, int32_t factor);

/* Rows [first, end) of the frame box_downscale writes (clipped to it), the others of `out`
 * left as they are; for views whose rows are framebuffer rows (the normal, 180 and flipped
 * kinds: dx is 4 or -4). */
void box_downscale_rows(uint8_t *out, const struct box_view *view, int32_t factor,
			int32_t first, int32_t end);

/* Rows [first, end) of a frame. */
struct box_rows {
	int32_t first, end;
};

/* The rows of the factor-`factor` frame of `view` that framebuffer rows [y1, y2) reach:
 * every row for the 90 and 270 kinds, whose framebuffer rows are the frame's columns; none
 * when y1 >= y2. */
struct box_rows box_rows_of(const struct box_view *view, int32_t factor, int32_t y1,
			    int32_t y2);

#endif
