/* Packed 32-bit pixels to I420 (i420.h). The coefficients are BT.601's for 8-bit limited
 * range, scaled by 256: Y = 16 + (66 R + 129 G + 25 B) / 256, U = 128 + (-38 R - 74 G +
 * 112 B) / 256, V = 128 + (112 R - 94 G - 18 B) / 256. Chroma is taken from the sums of
 * four pixels (a further factor of 4); offsets keep every sum non-negative before the
 * shift. */

#include "i420.h"

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

static inline uint8_t
luma(uint32_t r, uint32_t g, uint32_t b)
{
	return (uint8_t)((66 * r + 129 * g + 25 * b + 128 + (16 << 8)) >> 8);
}

/* Row pair `pair` of the frame: two rows of Y, one of U and one of V. */
static void
convert_pair(uint8_t *out, struct i420_size size, const uint8_t *in, size_t stride, int red,
	     int32_t pair)
{
	const int blue = 2 - red;
	const size_t luma_bytes = (size_t)size.width * (size_t)size.height;
	const int32_t chroma_width = size.width / 2;
	const uint8_t *top = in + (size_t)pair * 2 * stride;
	const uint8_t *bottom = top + stride;
	uint8_t *y0 = out + (size_t)pair * 2 * (size_t)size.width;
	uint8_t *y1 = y0 + size.width;
	uint8_t *u = out + luma_bytes + (size_t)pair * (size_t)chroma_width;
	uint8_t *v = u + luma_bytes / 4;
	int32_t i;

	for (i = 0; i < chroma_width; i++, top += 8, bottom += 8) {
		const uint32_t r = (uint32_t)top[red] + top[4 + red] + bottom[red] + bottom[4 + red];
		const uint32_t g = (uint32_t)top[1] + top[5] + bottom[1] + bottom[5];
		const uint32_t b =
			(uint32_t)top[blue] + top[4 + blue] + bottom[blue] + bottom[4 + blue];

		y0[2 * i] = luma(top[red], top[1], top[blue]);
		y0[2 * i + 1] = luma(top[4 + red], top[5], top[4 + blue]);
		y1[2 * i] = luma(bottom[red], bottom[1], bottom[blue]);
		y1[2 * i + 1] = luma(bottom[4 + red], bottom[5], bottom[4 + blue]);
		/* 128 << 10 and the half for rounding; -38 - 74 = -112, so the sum is >= 512. */
		u[i] = (uint8_t)((112 * b + 131584 - 38 * r - 74 * g) >> 10);
		v[i] = (uint8_t)((112 * r + 131584 - 94 * g - 18 * b) >> 10);
	}
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
	for (pair = first / 2; pair < (end + 1) / 2 && pair < pairs; pair++)
		convert_pair(out, size, in, stride, red, pair);
}
