/*
 * The capture socket's box filter: a captured framebuffer turned upright (the inverse of its
 * output's transform) and shrunk by an integer factor, each pixel the rounded mean of its
 * block, reading every framebuffer pixel once. Where the factor divides the sides, a turned
 * or mirrored frame's blocks are the framebuffer's own, so they are filtered along its rows
 * (in the order memory holds them) and the small result is turned. It touches no compositor
 * state, so the capture side runs it on its worker thread (bench/frames times it).
 */

#include <stdbool.h>
#include <stdlib.h>
#include <string.h>

#include "boxfilter.h"

struct box_view
box_view_upright(const uint8_t *pixels, int32_t width, int32_t height, size_t stride,
		 uint32_t transform)
{
	/* Where upright (0, 0) lies and which way x and y run in the framebuffer: weston maps
	 * the upright image to it with weston_matrix_init_transform (a flip of x first for the
	 * flipped kinds, then a counter-clockwise rotation). */
	const ptrdiff_t s = (ptrdiff_t)stride;
	const ptrdiff_t last_column = (ptrdiff_t)(width - 1) * 4;
	const ptrdiff_t last_row = (ptrdiff_t)(height - 1) * s;
	struct box_view v = { pixels, 4, s, width, height };

	switch (transform) {
	case 1: /* 90: upright (x, y) is framebuffer (y, height - 1 - x) */
		v = (struct box_view){ pixels + last_row, -s, 4, height, width };
		break;
	case 2: /* 180 */
		v = (struct box_view){ pixels + last_row + last_column, -4, -s, width, height };
		break;
	case 3: /* 270: (width - 1 - y, x) */
		v = (struct box_view){ pixels + last_column, s, -4, height, width };
		break;
	case 4: /* flipped */
		v = (struct box_view){ pixels + last_column, -4, s, width, height };
		break;
	case 5: /* flipped-90: (y, x) */
		v = (struct box_view){ pixels, s, 4, height, width };
		break;
	case 6: /* flipped-180 */
		v = (struct box_view){ pixels + last_row, 4, -s, width, height };
		break;
	case 7: /* flipped-270: (width - 1 - y, height - 1 - x) */
		v = (struct box_view){ pixels + last_row + last_column, -s, -4, height, width };
		break;
	default:
		break;
	}
	return v;
}

int32_t
box_factor(int32_t width, int32_t height, int32_t max_width, int32_t max_height)
{
	int32_t fx, fy;

	if (max_width == 0)
		return 1;
	fx = (width + max_width - 1) / max_width;
	fy = (height + max_height - 1) / max_height;
	if (fx < fy)
		fx = fy;
	return fx > 1 ? fx : 1;
}

/* m with (n * m) >> RECIP_SHIFT == n / count for every n < 256 * count (see FACTOR_MAX). */
static inline uint64_t
reciprocal(uint32_t count)
{
	return (((uint64_t)1 << RECIP_SHIFT) + count - 1) / count;
}

/*
 * Writes `count` pixels to `out`, each the rounded mean, byte by byte, of a block of
 * block_width x block_height pixels; the blocks sit side by side along dx from `in`.
 */
static void
box_blocks(uint8_t *out, const uint8_t *in, ptrdiff_t dx, ptrdiff_t dy, int32_t count,
	   int32_t block_width, int32_t block_height)
{
	const uint32_t half = (uint32_t)(block_width * block_height) / 2;
	const uint64_t m = reciprocal((uint32_t)(block_width * block_height));
	int32_t i, y, x;

	for (i = 0; i < count; i++, in += block_width * dx, out += 4) {
		uint32_t b0 = half, b1 = half, b2 = half, b3 = half;
		const uint8_t *line = in;

		for (y = 0; y < block_height; y++, line += dy) {
			const uint8_t *p = line;

			for (x = 0; x < block_width; x++, p += dx) {
				b0 += p[0];
				b1 += p[1];
				b2 += p[2];
				b3 += p[3];
			}
		}
		out[0] = (uint8_t)((b0 * m) >> RECIP_SHIFT);
		out[1] = (uint8_t)((b1 * m) >> RECIP_SHIFT);
		out[2] = (uint8_t)((b2 * m) >> RECIP_SHIFT);
		out[3] = (uint8_t)((b3 * m) >> RECIP_SHIFT);
	}
}

#ifdef __SSE2__
#include <emmintrin.h>

/*
 * box_blocks for 2 x 2 blocks side by side in memory (4K to 1080p, 1440p to 720p) with
 * SSE2, which every x86-64 has: four output pixels a step, from eight source pixels of each
 * of the two rows widened to 16 bits (four bytes sum to at most 1020). Intrinsics, not the
 * compiler's generic vectors: gcc builds their widening shuffles byte by byte through the
 * stack, slower than the scalar loop.
 */
static void
box_blocks_2x2(uint8_t *out, const uint8_t *in, ptrdiff_t dy, int32_t count)
{
	const __m128i zero = _mm_setzero_si128();
	const __m128i two = _mm_set1_epi16(2);
	int32_t i;

	for (i = 0; i + 4 <= count; i += 4, in += 32, out += 16) {
		const __m128i top0 = _mm_loadu_si128((const __m128i *)in);
		const __m128i top1 = _mm_loadu_si128((const __m128i *)(in + 16));
		const __m128i bottom0 = _mm_loadu_si128((const __m128i *)(in + dy));
		const __m128i bottom1 = _mm_loadu_si128((const __m128i *)(in + dy + 16));
		/* Column sums of source pixels 0 1, 2 3, 4 5 and 6 7. */
		const __m128i c01 = _mm_add_epi16(_mm_unpacklo_epi8(top0, zero),
						  _mm_unpacklo_epi8(bottom0, zero));
		const __m128i c23 = _mm_add_epi16(_mm_unpackhi_epi8(top0, zero),
						  _mm_unpackhi_epi8(bottom0, zero));
		const __m128i c45 = _mm_add_epi16(_mm_unpacklo_epi8(top1, zero),
						  _mm_unpacklo_epi8(bottom1, zero));
		const __m128i c67 = _mm_add_epi16(_mm_unpackhi_epi8(top1, zero),
						  _mm_unpackhi_epi8(bottom1, zero));
		/* Output pixels 0 1 and 2 3: the left columns plus the right ones. */
		__m128i m01 = _mm_add_epi16(_mm_unpacklo_epi64(c01, c23), _mm_unpackhi_epi64(c01, c23));
		__m128i m23 = _mm_add_epi16(_mm_unpacklo_epi64(c45, c67), _mm_unpackhi_epi64(c45, c67));

		m01 = _mm_srli_epi16(_mm_add_epi16(m01, two), 2);
		m23 = _mm_srli_epi16(_mm_add_epi16(m23, two), 2);
		_mm_storeu_si128((__m128i *)out, _mm_packus_epi16(m01, m23));
	}
	box_blocks(out, in, 4, dy, count - i, 2, 2);
}
#else
static void
box_blocks_2x2(uint8_t *out, const uint8_t *in, ptrdiff_t dy, int32_t count)
{
	box_blocks(out, in, 4, dy, count, 2, 2);
}
#endif

/* Reverses the order of `count` pixels. */
static void
reverse_pixels(uint8_t *pixels, int32_t count)
{
	uint8_t *left = pixels, *right = pixels + (size_t)(count - 1) * 4;
	uint8_t swap[4];

	for (; left < right; left += 4, right -= 4) {
		memcpy(swap, left, 4);
		memcpy(left, right, 4);
		memcpy(right, swap, 4);
	}
}

/* One output row from block_height rows of the view at `in`: full blocks, then the last
 * one, which the right edge may cut. */
static void
box_row(uint8_t *out, const uint8_t *in, const struct box_view *view, int32_t factor,
	int32_t block_height)
{
	const int32_t full = view->width / factor;
	const int32_t rest = view->width - full * factor;

	if (view->dx == -4 && rest == 0) {
		/* A mirrored row (180, flipped) that the factor divides: its blocks are the
		 * framebuffer row's, so filter that left to right, at the speed of an upright
		 * row, and reverse the result. */
		const struct box_view ahead = { view->origin, 4, view->dy, view->width,
						view->height };

		box_row(out, in - (ptrdiff_t)(view->width - 1) * 4, &ahead, factor, block_height);
		reverse_pixels(out, full);
		return;
	}
	if (factor == 1 && view->dx == 4)
		memcpy(out, in, (size_t)view->width * 4);
	else if (factor == 2 && block_height == 2 && view->dx == 4)
		box_blocks_2x2(out, in, view->dy, full);
	else
		box_blocks(out, in, view->dx, view->dy, full, factor, block_height);
	if (rest)
		box_blocks(out + (size_t)full * 4, in + full * factor * view->dx, view->dx, view->dy,
			   1, rest, block_height);
}

/* For views whose rows run down the framebuffer's columns (the 90 and 270 kinds): bands of
 * BAND output rows, column by column, so that each visit to a framebuffer row (a page of
 * its own at 4K) reads a run of BAND blocks rather than one (row by row, a rotated 4K frame
 * took three times as long as in bands). */
#define BAND 64

static void
box_downscale_columns(uint8_t *out, const struct box_view *view, int32_t factor)
{
	const int32_t out_width = (view->width + factor - 1) / factor;
	const int32_t out_height = (view->height + factor - 1) / factor;
	int32_t band, i, j;

	for (band = 0; band < out_height; band += BAND) {
		const int32_t end = band + BAND < out_height ? band + BAND : out_height;

		for (i = 0; i < out_width; i++) {
			const int32_t x = i * factor;
			const int32_t block_width = view->width - x < factor ? view->width - x : factor;

			for (j = band; j < end; j++) {
				const int32_t y = j * factor;
				const int32_t block_height =
					view->height - y < factor ? view->height - y : factor;

				box_blocks(out + ((size_t)j * (size_t)out_width + (size_t)i) * 4,
					   view->origin + x * view->dx + y * view->dy, view->dx,
					   view->dy, 1, block_width, block_height);
			}
		}
	}
}

/* Writes rows [first, end) of the small framebuffer-oriented frame, held in `band`, where
 * box_downscale_turned's `out` shows them: upright pixel (x, y) is small row x (counted from
 * the bottom when view->dx < 0) and column y (from the right when view->dy < 0). Row by row
 * of `out`, so that each write is a run of end - first pixels. */
static void
turn_band(uint8_t *out, const uint8_t *band, const struct box_view *view, int32_t small_width,
	  int32_t small_height, int32_t first, int32_t end)
{
	const size_t band_stride = (size_t)small_width * 4;
	int32_t r, y;

	for (y = 0; y < small_width; y++) {
		const int32_t column = view->dy > 0 ? y : small_width - 1 - y;
		uint8_t *line = out + (size_t)y * (size_t)small_height * 4;

		for (r = first; r < end; r++) {
			const int32_t x = view->dx > 0 ? r : small_height - 1 - r;

			memcpy(line + (size_t)x * 4,
			       band + (size_t)(r - first) * band_stride + (size_t)column * 4, 4);
		}
	}
}

/*
 * For the 90 and 270 kinds when the factor divides both sides: every block is then the same
 * pixels whichever way the frame is turned, so this filters along framebuffer rows (at the
 * speed of an upright frame, 2 x 2 blocks in SSE2) a band at a time into `band`, then turns
 * the band's small rows into columns of `out`. Column by column, a rotated 4K frame within
 * 1080p took about five times as long. False, with nothing written, when `band` cannot be
 * allocated.
 */
static bool
box_downscale_turned(uint8_t *out, const struct box_view *view, int32_t factor)
{
	/* The view's x runs along framebuffer columns (dx is a row's stride, negated when x
	 * runs upwards), its y along framebuffer rows; the framebuffer starts where both are
	 * least. */
	const ptrdiff_t stride = view->dx < 0 ? -view->dx : view->dx;
	const int32_t fb_width = view->height, fb_height = view->width;
	const uint8_t *pixels = view->origin -
				(view->dx < 0 ? (ptrdiff_t)(fb_height - 1) * stride : 0) -
				(view->dy < 0 ? (ptrdiff_t)(fb_width - 1) * 4 : 0);
	/* The small frame the framebuffer's rows filter to: small_height rows of small_width
	 * pixels; `out` is small_height pixels wide (turn_band). */
	const int32_t small_width = fb_width / factor, small_height = fb_height / factor;
	uint8_t *band = malloc((size_t)BAND * (size_t)small_width * 4);
	int32_t first, end;

	if (!band)
		return false;
	for (first = 0; first < small_height; first = end) {
		const int32_t count = BAND < small_height - first ? BAND : small_height - first;
		const struct box_view rows = { pixels + (ptrdiff_t)first * factor * stride, 4,
					       stride, fb_width, count * factor };

		end = first + count;
		box_downscale_rows(band, &rows, factor, 0, count);
		turn_band(out, band, view, small_width, small_height, first, end);
	}
	free(band);
	return true;
}

void
box_downscale(uint8_t *out, const struct box_view *view, int32_t factor)
{
	if (view->dx != 4 && view->dx != -4) {
		if (view->width % factor != 0 || view->height % factor != 0 ||
		    !box_downscale_turned(out, view, factor))
			box_downscale_columns(out, view, factor);
		return;
	}
	box_downscale_rows(out, view, factor, 0, (view->height + factor - 1) / factor);
}

void
box_downscale_rows(uint8_t *out, const struct box_view *view, int32_t factor, int32_t first,
		   int32_t end)
{
	const size_t out_stride = (size_t)((view->width + factor - 1) / factor) * 4;
	const int32_t out_height = (view->height + factor - 1) / factor;
	const int32_t last_height = view->height - (out_height - 1) * factor;
	int32_t j;

	if (first < 0)
		first = 0;
	if (end > out_height)
		end = out_height;
	for (j = first; j < end; j++)
		box_row(out + (size_t)j * out_stride, view->origin + (ptrdiff_t)j * factor * view->dy,
			view, factor, j == out_height - 1 ? last_height : factor);
}

struct box_rows
box_rows_of(const struct box_view *view, int32_t factor, int32_t y1, int32_t y2)
{
	const int32_t out_height = (view->height + factor - 1) / factor;

	if (y1 >= y2)
		return (struct box_rows){ 0, 0 };
	if (view->dx != 4 && view->dx != -4)
		return (struct box_rows){ 0, out_height };
	if (view->dy < 0) {
		/* Upright row y is framebuffer row height - 1 - y. */
		const int32_t top = view->height - y2;

		y2 = view->height - y1;
		y1 = top;
	}
	return (struct box_rows){ y1 / factor, (y2 + factor - 1) / factor };
}
