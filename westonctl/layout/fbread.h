/* Reads of an output's framebuffer straight from the pixman renderer (fbread.c), so that a
 * capture copies only the rows repainted since the buffer it fills was last read. */
#ifndef LAYOUT_FBREAD_H
#define LAYOUT_FBREAD_H

#include <stdbool.h>
#include <stdint.h>

struct weston_compositor;
struct weston_output;
typedef struct pixman_region32 pixman_region32_t;

/* Rows [y1, y2) of a framebuffer; empty when y1 >= y2. */
struct fb_rows {
	int32_t y1, y2;
};

/* Whether the compositor renders with pixman, whose framebuffer fbread_rows can read. */
bool fbread_available(struct weston_compositor *ec);

/* Copies rows `rows` of `output`'s last repainted framebuffer, `width` pixels each, into
 * `pixels` (a packed image of the framebuffer's size and format, width * 4 bytes a row) at
 * the same rows; false when the output has no framebuffer yet. */
bool fbread_rows(struct weston_output *output, uint8_t *pixels, int32_t width,
		 struct fb_rows rows);

/* The framebuffer rows of `output` (height rows) that `damage` (global coordinates)
 * touches. */
struct fb_rows fbread_damage_rows(struct weston_output *output, pixman_region32_t *damage,
				  int32_t height);

/* a and b together (what lies between included). */
struct fb_rows fb_rows_union(struct fb_rows a, struct fb_rows b);

#endif
