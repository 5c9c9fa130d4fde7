/* Packed 32-bit pixels to I420 (i420.h). The coefficients are BT.601's for 8-bit limited
 * range, scaled by 256: Y = 16 + (66 R + 129 G + 25 B) / 256, U = 128 + (-38 R - 74 G +
 * 112 B) / 256, V = 128 + (112 R - 94 G - 18 B) / 256. Chroma is taken from the sums of
 * four pixels (a further factor of 4); offsets keep every sum non-negative before the
 * shift. */

#include "i420.h"

/* This file's loops only; the box filter's run slower vectorized (boxfilter.c). */
#if defined(__GNUC__) && !defined(__clang__)
#pragma GCC optimize("tree-vectorize")
#endif

struct i420_size
i420_size_of(int32_t width, int32_t height)
{
	if (width < 2 || height < 2)
		return (struct i420_size){ 0, 0 };
	return (struct i420_size){ width & ~1, height & ~1 };
}

size_t
i420_bytes(struct i420_size size)
{
	const size_t luma = (size_t)size.width * (size_t)size.height;

	return luma + luma / 2;
}

/* A packed pixel read as one word: from a byte buffer at any alignment. */
typedef uint32_t pixel_word __attribute__((may_alias, aligned(1)));

/* Where byte `byte` of a pixel lies in its word (green is byte 1 in every format taken), and
 * the byte at `shift` of a word. */
#if __BYTE_ORDER__ == __ORDER_BIG_ENDIAN__
#define BYTE_SHIFT(byte) (8 * (3 - (byte)))
#else
#define BYTE_SHIFT(byte) (8 * (byte))
#endif
#define GREEN_SHIFT BYTE_SHIFT(1)
#define CHANNEL(pixel, shift) (((pixel) >> (shift)) & 255u)

/* The loops below take each pixel as one 32-bit word and the red and blue byte offsets as
 * constants (convert_pair is instantiated for each): written so, gcc vectorizes them when
 * asked to, and converts a 1080p frame in about 70% of the time of byte loads with a
 * run-time offset (bench/frames). */
static inline __attribute__((always_inline)) void
luma_row(uint8_t *restrict y, const pixel_word *restrict pixels, int32_t width, int red_shift,
	 int blue_shift)
{
	int32_t i;

	for (i = 0; i < width; i++) {
		const uint32_t p = pixels[i];

		y[i] = (uint8_t)((66 * CHANNEL(p, red_shift) + 129 * CHANNEL(p, GREEN_SHIFT) +
				  25 * CHANNEL(p, blue_shift) + 128 + (16 << 8)) >> 8);
	}
}

/* U and V of each 2 x 2 block of rows `top` and `bottom`. */
static inline __attribute__((always_inline)) void
chroma_row(uint8_t *restrict u, uint8_t *restrict v, const pixel_word *restrict top,
	   const pixel_word *restrict bottom, int32_t chroma_width, int red_shift, int blue_shift)
{
	int32_t i;

	for (i = 0; i < chroma_width; i++) {
		const uint32_t a = top[2 * i], b = top[2 * i + 1];
		const uint32_t c = bottom[2 * i], d = bottom[2 * i + 1];
		const uint32_t red = CHANNEL(a, red_shift) + CHANNEL(b, red_shift) +
				     CHANNEL(c, red_shift) + CHANNEL(d, red_shift);
		const uint32_t green = CHANNEL(a, GREEN_SHIFT) + CHANNEL(b, GREEN_SHIFT) +
				       CHANNEL(c, GREEN_SHIFT) + CHANNEL(d, GREEN_SHIFT);
		const uint32_t blue = CHANNEL(a, blue_shift) + CHANNEL(b, blue_shift) +
				      CHANNEL(c, blue_shift) + CHANNEL(d, blue_shift);

		/* 128 << 10 and the half for rounding; -38 - 74 = -112, so the sum is >= 512. */
		u[i] = (uint8_t)((112 * blue + 131584 - 38 * red - 74 * green) >> 10);
		v[i] = (uint8_t)((112 * red + 131584 - 94 * green - 18 * blue) >> 10);
	}
}

/* Row pair `pair` of the frame: two rows of Y, one of U and one of V. */
static inline __attribute__((always_inline)) void
convert_pair(uint8_t *out, struct i420_size size, const uint8_t *in, size_t stride, int red,
	     int32_t pair)
{
	const int red_shift = BYTE_SHIFT(red), blue_shift = BYTE_SHIFT(2 - red);
	const size_t luma_bytes = (size_t)size.width * (size_t)size.height;
	const int32_t chroma_width = size.width / 2;
	const pixel_word *top = (const pixel_word *)(in + (size_t)pair * 2 * stride);
	const pixel_word *bottom = (const pixel_word *)(in + ((size_t)pair * 2 + 1) * stride);
	uint8_t *y0 = out + (size_t)pair * 2 * (size_t)size.width;
	uint8_t *u = out + luma_bytes + (size_t)pair * (size_t)chroma_width;

	luma_row(y0, top, size.width, red_shift, blue_shift);
	luma_row(y0 + size.width, bottom, size.width, red_shift, blue_shift);
	chroma_row(u, u + luma_bytes / 4, top, bottom, chroma_width, red_shift, blue_shift);
}

void
i420_convert_rows(uint8_t *out, struct i420_size size, const uint8_t *in, size_t stride,
		  int red, int32_t first, int32_t end)
{
	const int32_t pairs = size.height / 2;
	int32_t pair;

	if (first < 0)
		first = 0;
	if (end > size.height)
		end = size.height;
	for (pair = first / 2; pair < (end + 1) / 2 && pair < pairs; pair++) {
		if (red == 0)
			convert_pair(out, size, in, stride, 0, pair);
		else
			convert_pair(out, size, in, stride, 2, pair);
	}
}
