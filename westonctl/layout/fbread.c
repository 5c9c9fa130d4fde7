/*
 * Framebuffer reads through the renderer's read_pixels.
 *
 * weston_capture_v1 copies the whole framebuffer on weston's thread for every capture (a 4K
 * output: 33 MB, most of the capture's cost). The pixman renderer can copy any rows of it,
 * and an output's frame_signal names the region each repaint drew, so the capture side
 * keeps its buffers and copies into one only the rows repainted since it was last filled.
 *
 * read_pixels is reached through libweston's private struct weston_renderer, whose first
 * member it is in libweston 14 (libweston-internal.h); 15 removed it, so the build stops on
 * any other major version rather than call the wrong member. The GL renderer is left to
 * weston_capture_v1: its read_pixels reads whichever buffer is current, bottom row first.
 */

#include <libweston/libweston.h>
#include <libweston/matrix.h>
#include <libweston/version.h>

#include "fbread.h"

#if WESTON_VERSION_MAJOR != 14
#error "fbread.c reads libweston 14's private renderer layout: check read_pixels anew"
#endif

struct pixel_format_info;

/* The head of libweston 14's struct weston_renderer. */
struct renderer_head {
	int (*read_pixels)(struct weston_output *output, const struct pixel_format_info *format,
			   void *pixels, uint32_t x, uint32_t y, uint32_t width, uint32_t height);
};

bool
fbread_available(struct weston_compositor *ec)
{
	/* pixman sets read_format at its first repaint and never flips captures; GL flips them;
	 * the noop renderer reads nothing and sets no format. */
	return ec->renderer && ec->read_format &&
	       !(ec->capabilities & WESTON_CAP_CAPTURE_YFLIP);
}

bool
fbread_rows(struct weston_output *output, uint8_t *pixels, int32_t width, struct fb_rows rows)
{
	struct weston_compositor *ec = output->compositor;
	const struct renderer_head *renderer = (const struct renderer_head *)ec->renderer;

	if (rows.y1 >= rows.y2)
		return true;
	/* Whole rows, so that the packed copy lands at the same stride as the buffer. */
	return renderer->read_pixels(output, ec->read_format,
				     pixels + (size_t)rows.y1 * (size_t)width * 4, 0,
				     (uint32_t)rows.y1, (uint32_t)width,
				     (uint32_t)(rows.y2 - rows.y1)) == 0;
}

/* Row `y` rounded down (up: 1) within 0..height. */
static int32_t
clamp_row(double y, int32_t height, int up)
{
	int32_t row;

	if (y <= 0)
		return 0;
	if (y >= height)
		return height;
	row = (int32_t)y;
	return row + (up && (double)row < y);
}

struct fb_rows
fbread_damage_rows(struct weston_output *output, pixman_region32_t *damage, int32_t height)
{
	const pixman_box32_t *box = pixman_region32_extents(damage);
	const double xs[2] = { box->x1, box->x2 }, ys[2] = { box->y1, box->y2 };
	double top = 0, bottom = 0;
	int i, j;

	if (!pixman_region32_not_empty(damage))
		return (struct fb_rows){ 0, 0 };
	/* The extents' corners in buffer coordinates: any transform and scale. */
	for (i = 0; i < 2; i++) {
		for (j = 0; j < 2; j++) {
			struct weston_coord c = weston_matrix_transform_coord(
				&output->matrix, weston_coord(xs[i], ys[j]));

			if ((i == 0 && j == 0) || c.y < top)
				top = c.y;
			if ((i == 0 && j == 0) || c.y > bottom)
				bottom = c.y;
		}
	}
	return (struct fb_rows){ clamp_row(top, height, 0), clamp_row(bottom, height, 1) };
}

struct fb_rows
fb_rows_union(struct fb_rows a, struct fb_rows b)
{
	if (a.y1 >= a.y2)
		return b;
	if (b.y1 >= b.y2)
		return a;
	return (struct fb_rows){ a.y1 < b.y1 ? a.y1 : b.y1, a.y2 > b.y2 ? a.y2 : b.y2 };
}
