/* 4:2:0 frames for clips (i420.c): a frame of packed 32-bit pixels as I420, the planar
 * layout H.264 encoders take, so that the capture side and its encoder neither read the
 * 4-byte pixels nor convert them. Pure computation on memory, safe on any thread. */
#ifndef LAYOUT_I420_H
#define LAYOUT_I420_H

#include <stddef.h>
#include <stdint.h>

/* The I420 frame of a width x height frame: its even part (an odd last column or row is
 * dropped, as 4:2:0 needs even sides); 0 x 0 when a side is under 2. */
struct i420_size {
	int32_t width, height;
};

struct i420_size i420_size_of(int32_t width, int32_t height);

/* Bytes of an I420 frame: width x height of Y, then (width/2) x (height/2) of U, then of V. */
size_t i420_bytes(struct i420_size size);

/* Converts rows [first, end) of the packed frame `in` (rows `stride` bytes apart, 4 bytes a
 * pixel, red at byte `red` of each and blue at byte 2 - red) into `out`, an I420 frame of
 * `size`: every row pair that holds one of them, the others of `out` left as they are.
 * BT.601 limited range, as ffmpeg converts RGB for H.264 by default: Y of each pixel, U and
 * V of each 2 x 2 block's mean, each rounded half up. */
void i420_convert_rows(uint8_t *out, struct i420_size size, const uint8_t *in, size_t stride,
		       int red, int32_t first, int32_t end);

#endif
