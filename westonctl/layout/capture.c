/*
 * layout-shell.so's capture socket.
 *
 * Capture socket (`[layout] capture-socket=PATH`, mode 0660). Greeting `LAYOUT-CAPTURE 1`.
 * Each `FRAME <output> [<max-width>x<max-height>] [I420]` line is answered by exactly one
 * reply: either `ERR <code> <text>` (no-output, output-gone, busy, bad-request, too-long, io)
 * or the line
 *   FRAME <width> <height> <stride> <format> <yflip> <nbytes>
 * followed by nbytes of pixels (format is a DRM fourcc name such as XRGB8888, in
 * little-endian memory order; yflip 1 would mean the first row is the bottom one: weston's
 * capture delivers the top row first with every renderer, so it is always 0). With `I420`
 * the frame is the 4:2:0 planar one clips are encoded from (i420.h: the even part of the
 * frame, BT.601 limited range; format I420, stride its width): a third of the bytes, and
 * neither the capture side nor its encoder converts it. Frames come
 * from weston's own capture protocol, weston_capture_v1 (the output's framebuffer source):
 * the module is a Wayland client of its compositor over a socketpair, and its screenshot
 * authority admits that one client and no other. A request makes the module ask weston to
 * capture the output, which repaints it and copies the framebuffer into the module's shm
 * buffer for that output (kept while any capture connection is open); a renderer is
 * needed (pixman or gl: with noop the capture fails, `ERR io`). One capture of an output
 * serves every connection waiting for it. One connection holds at most one frame being
 * sent: frames that occur while the previous one is still unread are lost, the compositor
 * never waits. Up to 16 requests may be outstanding, for one output and one bound at a
 * time.
 *
 * A frame is upright, as a person before the monitor sees it: the framebuffer of an output
 * with a transform (weston.ini `transform=rotate-90`, say) is turned back by its inverse, so
 * a rotate-90 output of mode 1920x1080 gives 1080x1920 frames.
 *
 * The optional bound (each side 16..16384, decimal without sign or leading zero) asks for
 * a frame no larger than it: the module picks the smallest integer factor f >= 1 with
 * ceil(w/f) <= max-width and ceil(h/f) <= max-height and sends a ceil(w/f) x ceil(h/f)
 * frame (the header gives that size and its stride), each pixel the mean of its f x f block,
 * byte by byte, rounded half up. The last column and row of blocks may be cut by the edge
 * of the output: they average the pixels they have (ceil, so no pixel is dropped). Blocks
 * are anchored at the upright image's top-left corner. A frame that already fits is sent as
 * captured.
 *
 * Weston's thread only fills capture buffers and sends frames: each output has two, and a
 * worker thread turns a filled one into the frames its connections asked for (one pass over
 * it, boxfilter.c) while weston may fill the other. With the pixman renderer a buffer is
 * filled from the framebuffer directly (fbread.c) rather than by weston_capture_v1, which
 * copies all of it each time: only the rows repainted since that buffer was last filled
 * are copied, after the repaint weston has pending if any (bounded: deferred_ms). The worker
 * keeps with each buffer the frames it made from it (one per factor, up to JOB_FACTORS) and
 * filters again only the blocks of the rows filled since, all of them for a 90 or 270
 * transform: a screen that barely changes costs barely anything, a frame is the same as the
 * whole filter's. A full-size upright frame is a copy and is not kept. I420 frames are kept
 * the same way, each converted again only in the row pairs of the rows filled since.
 */

#define _GNU_SOURCE

#include <pthread.h>
#include <signal.h>
#include <sys/eventfd.h>

#include "i420.h"
#include "layout.h"
#include "weston-output-capture-client-protocol.h"

/* ---------- capture ---------- */

/* DRM fourcc codes (drm_fourcc.h), which wl_shm shares for all but two of its formats. */
#define FOURCC(a, b, c, d) \
	((uint32_t)(a) | (uint32_t)(b) << 8 | (uint32_t)(c) << 16 | (uint32_t)(d) << 24)
#define DRM_FORMAT_XRGB8888 FOURCC('X', 'R', '2', '4')
#define DRM_FORMAT_ARGB8888 FOURCC('A', 'R', '2', '4')
#define DRM_FORMAT_XBGR8888 FOURCC('X', 'B', '2', '4')
#define DRM_FORMAT_ABGR8888 FOURCC('A', 'B', '2', '4')

/* The 32-bit formats a frame may have, by name; NULL for any other. */
static const char *
format_name(uint32_t format)
{
	switch (format) {
	case DRM_FORMAT_XRGB8888: return "XRGB8888";
	case DRM_FORMAT_ARGB8888: return "ARGB8888";
	case DRM_FORMAT_XBGR8888: return "XBGR8888";
	case DRM_FORMAT_ABGR8888: return "ABGR8888";
	default: return NULL;
	}
}


void
capture_fail_pending(struct conn *conn, const char *code, const char *text)
{
	while (conn->pending > 0) {
		conn->pending--;
		if (!conn_printf(conn, "ERR %s %s\n", code, text))
			break;
	}
}

/* `len` bytes of decimal, BOUND_MIN..BOUND_MAX, without sign or leading zero; else -1. */
static int32_t
parse_side(const char *s, size_t len)
{
	int32_t value = 0;
	size_t i;

	if (len == 0 || len > 5 || s[0] == '0')
		return -1;
	for (i = 0; i < len; i++) {
		if (s[i] < '0' || s[i] > '9')
			return -1;
		value = value * 10 + (s[i] - '0');
	}
	return value >= BOUND_MIN && value <= BOUND_MAX ? value : -1;
}

/* `<width>x<height>`; false when either side is not a valid bound. */
static bool
parse_bound(const char *s, int32_t *width, int32_t *height)
{
	const char *x = strchr(s, 'x');

	if (!x)
		return false;
	*width = parse_side(s, (size_t)(x - s));
	*height = parse_side(x + 1, strlen(x + 1));
	return *width > 0 && *height > 0;
}

bool
capture_line(struct conn *conn, char *line)
{
	char *w[4];
	struct weston_output *output;
	int32_t max_width = 0, max_height = 0;
	int n = split_words(line, w, 4);
	const bool i420 = n >= 3 && strcmp(w[n - 1], "I420") == 0;
	const bool bounded = n - (i420 ? 1 : 0) == 3;

	if (n < 2 || n - (i420 ? 1 : 0) > 3 || strcmp(w[0], "FRAME") != 0 || !valid_output(w[1]))
		return conn_printf(conn, "ERR bad-request expected FRAME <output> "
				   "[<max-width>x<max-height>] [I420]\n");
	if (bounded && !parse_bound(w[2], &max_width, &max_height))
		return conn_printf(conn, "ERR bad-request bound must be <max-width>x<max-height>, "
				   "each %d-%d\n", BOUND_MIN, BOUND_MAX);
	output = find_output(conn->layout, w[1]);
	if (!output)
		return conn_printf(conn, "ERR no-output no output named %s\n", w[1]);
	if (conn->pending > 0 && strcmp(conn->output, w[1]) != 0)
		return conn_printf(conn, "ERR busy frames of %s are outstanding\n", conn->output);
	if (conn->pending > 0 && (conn->max_width != max_width || conn->max_height != max_height ||
				  conn->i420 != i420))
		return conn_printf(conn, "ERR busy frames of %s with another bound or format are "
				   "outstanding\n", conn->output);
	if (conn->pending >= MAX_PENDING_FRAMES)
		return conn_printf(conn, "ERR busy %d frames are outstanding\n", conn->pending);
	strcpy(conn->output, w[1]);
	conn->max_width = max_width;
	conn->max_height = max_height;
	conn->i420 = i420;
	conn->pending++;
	capturer_kick(conn->layout, conn->output);
	return true;
}

/* Fails every outstanding request for `output_name`: output-gone when the compositor no
 * longer has that output, else io with `text`. */
static void
capture_fail_output(struct layout *layout, const char *output_name, const char *text)
{
	const char *code = find_output(layout, output_name) ? "io" : "output-gone";
	struct conn *conn, *next;

	wl_list_for_each_safe(conn, next, &layout->capture.conns, link) {
		if (conn->pending == 0 || strcmp(conn->output, output_name) != 0)
			continue;
		capture_fail_pending(conn, code, text);
		if (!conn_flush(conn))
			conn_destroy(conn);
	}
}

static void
capturer_flush(struct capturer *capturer)
{
	uint32_t mask = WL_EVENT_READABLE;

	if (!capturer->running)
		return;
	if (wl_display_flush(capturer->display) < 0) {
		if (errno != EAGAIN) {
			weston_log("layout: capture client: flush failed: %s\n", strerror(errno));
			return;
		}
		mask |= WL_EVENT_WRITABLE;
	}
	wl_event_source_fd_update(capturer->source, mask);
}

static struct capture_output *
find_capture_output(struct capturer *capturer, const char *name)
{
	struct capture_output *co;

	wl_list_for_each(co, &capturer->outputs, link) {
		if (strcmp(co->name, name) == 0)
			return co;
	}
	return NULL;
}

static void
capture_buffer_free(struct capture_buffer *buf)
{
	int k;

	if (buf->buffer)
		wl_buffer_destroy(buf->buffer);
	if (buf->pixels)
		munmap(buf->pixels, buf->size);
	buf->buffer = NULL;
	buf->pixels = NULL;
	buf->size = 0;
	for (k = 0; k < JOB_FACTORS; k++) {
		free(buf->scaled[k].pixels);
		buf->scaled[k].pixels = NULL;
	}
}

/* Rows `rows` of `buf` now hold new pixels: its kept frames must refilter them. */
static void
capture_buffer_filled(struct capture_buffer *buf, struct fb_rows rows)
{
	int k;

	for (k = 0; k < JOB_FACTORS; k++)
		buf->scaled[k].dirty = fb_rows_union(buf->scaled[k].dirty, rows);
}

/* `buf` as a shm buffer of the size and format weston announced for the source (1 x 1
 * XRGB8888 before it announced any: the capture then fails or asks to retry); false on
 * failure. */
static bool
capture_buffer_alloc(struct capture_output *co, struct capture_buffer *buf)
{
	const int32_t width = co->width > 0 ? co->width : 1;
	const int32_t height = co->height > 0 ? co->height : 1;
	const uint32_t format = co->drm_format ? co->drm_format : WL_SHM_FORMAT_XRGB8888;
	const size_t size = (size_t)width * 4 * (size_t)height;
	struct wl_shm_pool *pool;
	uint32_t shm_format;
	void *pixels;
	int fd;

	if (buf->buffer && buf->width == width && buf->height == height && buf->format == format)
		return true;
	capture_buffer_free(buf);
	if (size > INT32_MAX)
		return false;
	fd = memfd_create("layout-capture", MFD_CLOEXEC);
	if (fd < 0)
		return false;
	if (ftruncate(fd, (off_t)size) < 0) {
		close(fd);
		return false;
	}
	pixels = mmap(NULL, size, PROT_READ | PROT_WRITE, MAP_SHARED, fd, 0);
	if (pixels == MAP_FAILED) {
		close(fd);
		return false;
	}
	/* wl_shm names two formats its own way; the others are DRM fourccs. */
	if (format == DRM_FORMAT_XRGB8888)
		shm_format = WL_SHM_FORMAT_XRGB8888;
	else if (format == DRM_FORMAT_ARGB8888)
		shm_format = WL_SHM_FORMAT_ARGB8888;
	else
		shm_format = format;
	pool = wl_shm_create_pool(co->capturer->shm, fd, (int32_t)size);
	buf->buffer = wl_shm_pool_create_buffer(pool, 0, width, height, width * 4, shm_format);
	wl_shm_pool_destroy(pool);
	close(fd);
	buf->pixels = pixels;
	buf->size = size;
	buf->width = width;
	buf->height = height;
	buf->format = format;
	buf->stale = (struct fb_rows){ 0, height };
	return true;
}

/* ---------- reads of the framebuffer (pixman) ---------- */

static void deferred_read(struct capture_output *co);
static void capture_done(struct capture_output *co, struct capture_buffer *buf);

static void
unwatch_output(struct capture_output *co)
{
	if (!co->watched)
		return;
	wl_list_remove(&co->frame.link);
	wl_list_remove(&co->watched_destroy.link);
	co->watched = NULL;
}

/* Each repaint of the watched output: the rows it drew are stale in every buffer. */
static void
watched_frame(struct wl_listener *listener, void *data)
{
	struct capture_output *co = wl_container_of(listener, co, frame);
	pixman_region32_t *damage = data;
	struct capture_buffer *buf;
	int i;

	for (i = 0; i < 2; i++) {
		buf = &co->buffers[i];
		if (buf->pixels)
			buf->stale = fb_rows_union(buf->stale, fbread_damage_rows(co->watched, damage,
										 buf->height));
	}
	if (co->deferred)
		deferred_read(co);
}

static void
watched_destroyed(struct wl_listener *listener, void *data)
{
	struct capture_output *co = wl_container_of(listener, co, watched_destroy);

	(void)data;
	unwatch_output(co);
}

/* Watches `output`'s repaints for co's buffers; a newly watched output's are all stale
 * (its repaints so far were not seen). */
static void
watch_output(struct capture_output *co, struct weston_output *output)
{
	int i;

	if (co->watched == output)
		return;
	unwatch_output(co);
	co->watched = output;
	co->frame.notify = watched_frame;
	wl_signal_add(&output->frame_signal, &co->frame);
	co->watched_destroy.notify = watched_destroyed;
	wl_signal_add(&output->destroy_signal, &co->watched_destroy);
	for (i = 0; i < 2; i++)
		co->buffers[i].stale = (struct fb_rows){ 0, co->buffers[i].height };
}

/* The output whose framebuffer `buf` can be read from (pixman, and the size and format
 * weston announced are the buffer's); NULL when weston_capture_v1 must capture it. */
static struct weston_output *
readable_output(struct capture_output *co, struct capture_buffer *buf)
{
	struct layout *layout = co->capturer->layout;

	if (!fbread_available(layout->compositor) || co->drm_format == 0 ||
	    buf->width != co->width || buf->height != co->height || buf->format != co->drm_format)
		return NULL;
	return find_output(layout, co->name);
}

/* Copies into `buf` the rows of its output's last repainted framebuffer that changed since
 * it was last filled; false when there is no framebuffer to read yet. */
static bool
capture_read(struct capture_output *co, struct capture_buffer *buf)
{
	/* Marked before the read: a read that fails may have written some of them. */
	capture_buffer_filled(buf, buf->stale);
	if (!co->watched || !fbread_rows(co->watched, buf->pixels, buf->width, buf->stale))
		return false;
	buf->stale = (struct fb_rows){ 0, 0 };
	return true;
}

/* The read that waited for a repaint: done now (from the repaint, or when none came). */
static void
deferred_read(struct capture_output *co)
{
	struct layout *layout = co->capturer->layout;
	struct capture_buffer *buf = co->deferred;

	co->deferred = NULL;
	wl_event_source_timer_update(co->deferred_timer, 0);
	buf->state = BUFFER_FREE;
	if (capture_read(co, buf))
		capture_done(co, buf);
	capturer_kick(layout, co->name);
	capturer_release_idle(layout);
}

static int
deferred_timeout(void *data)
{
	struct capture_output *co = data;

	if (co->deferred)
		deferred_read(co);
	return 0;
}

/* How long a read waits for the repaint weston has pending: two frames and a margin, so that
 * the repaint, whose timer is set when the wait starts, is due first (a stalled weston then
 * runs both, in that order); a drm output with nothing to draw skips the renderer, and its
 * frame waits this long. */
static int
deferred_ms(const struct weston_output *output)
{
	const int32_t refresh = output->current_mode ? output->current_mode->refresh : 0;
	/* mHz; below 10 Hz, or none, as 10 Hz */
	const int period = refresh >= 10000 ? (int)(1000000 / refresh) : 100;

	return 2 * period + 10;
}

/* Fills `buf` from the framebuffer without a copy of the whole of it: now, or after the
 * repaint weston has pending (a client's commit the requester may be waiting to see); a
 * backend that finds nothing to draw may skip the renderer, so the wait is bounded. False
 * when the framebuffer cannot be read: weston_capture_v1 then captures it. */
static bool
capture_from_framebuffer(struct capture_output *co, struct capture_buffer *buf)
{
	struct weston_output *output = readable_output(co, buf);
	struct wl_event_loop *loop;

	if (!output)
		return false;
	watch_output(co, output);
	if (!output->repaint_needed) {
		if (!capture_read(co, buf))
			return false;
		capture_done(co, buf);
		return true;
	}
	if (!co->deferred_timer) {
		loop = wl_display_get_event_loop(co->capturer->layout->compositor->wl_display);
		co->deferred_timer = wl_event_loop_add_timer(loop, deferred_timeout, co);
		if (!co->deferred_timer)
			return false;
	}
	buf->state = BUFFER_CAPTURING;
	co->deferred = buf;
	wl_event_source_timer_update(co->deferred_timer, deferred_ms(output));
	return true;
}

/* With no capture connection left the free shm buffers go (a 4K output's hold 33 MB each);
 * the next request allocates them again. */
void
capturer_release_idle(struct layout *layout)
{
	struct capture_output *co;
	int i;

	if (!wl_list_empty(&layout->capture.conns))
		return;
	wl_list_for_each(co, &layout->capturer.outputs, link) {
		for (i = 0; i < 2; i++) {
			if (co->buffers[i].state == BUFFER_FREE)
				capture_buffer_free(&co->buffers[i]);
		}
	}
	capturer_flush(&layout->capturer);
}

/* ---------- the worker ---------- */

static void
job_free(struct capture_job *job)
{
	int k;

	for (k = 0; k < job->count; k++)
		free(job->frame[k]);
	free(job);
}

/* A side of the factor-`f` frame of a view's side `len`. */
static int32_t
frame_side(int32_t len, int32_t f)
{
	return (len + f - 1) / f;
}

/* The byte of each pixel of a buffer of `format` that holds red (blue is at 2 - it). */
static int
red_byte(uint32_t format)
{
	return format == DRM_FORMAT_XBGR8888 || format == DRM_FORMAT_ABGR8888 ? 0 : 2;
}

/* Whether kept frame `s` is one `job` needs: a frame it makes, or the packed frame one of its
 * I420 frames is converted from. */
static bool
job_needs(const struct capture_job *job, const struct scaled_frame *s)
{
	int k;

	if (!s->pixels || s->transform != job->transform)
		return false;
	for (k = 0; k < job->count; k++) {
		if (s->factor == job->factor[k] && (s->i420 == job->i420[k] || job->i420[k]))
			return true;
	}
	return false;
}

/* The kept frame of `job`'s buffer for factor `f` in I420 or packed: the one it has, or a
 * new one of `size` bytes in a slot the job does not need (*fresh: not filled yet); NULL when
 * no slot is free or out of memory. */
static struct scaled_frame *
job_kept(struct capture_job *job, int32_t f, bool i420, size_t size, bool *fresh)
{
	struct capture_buffer *buf = job->buffer;
	struct scaled_frame *slot = NULL;
	int i;

	*fresh = false;
	for (i = 0; i < JOB_FACTORS; i++) {
		struct scaled_frame *s = &buf->scaled[i];

		if (s->pixels && s->factor == f && s->i420 == i420 && s->transform == job->transform)
			return s;
		if (!slot && !job_needs(job, s))
			slot = s;
	}
	if (!slot)
		return NULL;
	free(slot->pixels);
	slot->pixels = malloc(size);
	if (!slot->pixels)
		return NULL;
	slot->factor = f;
	slot->i420 = i420;
	slot->transform = job->transform;
	slot->dirty = (struct fb_rows){ 0, 0 };
	*fresh = true;
	return slot;
}

/* The kept packed frame of `job`'s buffer for factor `f`, brought up to date: its dirty rows
 * refiltered, or all of it when it is new; NULL when none can be kept. */
static const uint8_t *
job_scaled(struct capture_job *job, int32_t f)
{
	const int32_t height = frame_side(job->view.height, f);
	const size_t size = (size_t)frame_side(job->view.width, f) * 4 * (size_t)height;
	struct scaled_frame *kept;
	struct box_rows rows;
	bool fresh;

	kept = job_kept(job, f, false, size, &fresh);
	if (!kept)
		return NULL;
	rows = fresh ? (struct box_rows){ 0, height }
		     : box_rows_of(&job->view, f, kept->dirty.y1, kept->dirty.y2);
	if (rows.first == 0 && rows.end >= height)
		box_downscale(kept->pixels, &job->view, f);
	else if (rows.first < rows.end)
		box_downscale_rows(kept->pixels, &job->view, f, rows.first, rows.end);
	kept->dirty = (struct fb_rows){ 0, 0 };
	return kept->pixels;
}

/* Whether the factor-`f` frame of `job` is its view as it is (the upright buffer itself). */
static bool
job_is_view(const struct capture_job *job, int32_t f)
{
	return f == 1 && job->view.dx == 4 && job->view.dy > 0;
}

/* The packed frame of factor `f` an I420 frame is converted from, and its stride: the view
 * itself, else the kept frame; NULL when none can be kept. */
static const uint8_t *
job_packed(struct capture_job *job, int32_t f, size_t *stride)
{
	if (job_is_view(job, f)) {
		*stride = (size_t)job->view.dy;
		return job->view.origin;
	}
	*stride = (size_t)frame_side(job->view.width, f) * 4;
	return job_scaled(job, f);
}

/* The I420 frame of factor `f` made anew into `out`, kept nowhere; false when out of
 * memory. */
static bool
job_i420_anew(uint8_t *out, struct capture_job *job, int32_t f, struct i420_size size)
{
	const int red = red_byte(job->buffer->format);
	const int32_t width = frame_side(job->view.width, f);
	uint8_t *packed;

	if (job_is_view(job, f)) {
		i420_convert_rows(out, size, job->view.origin, (size_t)job->view.dy, red, 0,
				  size.height);
		return true;
	}
	packed = malloc((size_t)width * 4 * (size_t)frame_side(job->view.height, f));
	if (!packed)
		return false;
	box_downscale(packed, &job->view, f);
	i420_convert_rows(out, size, packed, (size_t)width * 4, red, 0, size.height);
	free(packed);
	return true;
}

/* The kept I420 frame of `job`'s buffer for factor `f`, brought up to date: the row pairs of
 * its dirty rows converted again, or all of it when it is new; NULL when none can be kept. */
static const uint8_t *
job_i420(struct capture_job *job, int32_t f, struct i420_size size)
{
	struct scaled_frame *kept;
	struct box_rows rows;
	const uint8_t *packed;
	size_t stride;
	bool fresh;

	kept = job_kept(job, f, true, i420_bytes(size), &fresh);
	if (!kept)
		return NULL;
	rows = fresh ? (struct box_rows){ 0, size.height }
		     : box_rows_of(&job->view, f, kept->dirty.y1, kept->dirty.y2);
	if (rows.first < rows.end) {
		packed = job_packed(job, f, &stride);
		if (!packed) {
			free(kept->pixels);
			kept->pixels = NULL;
			return NULL;
		}
		i420_convert_rows(kept->pixels, size, packed, stride,
				  red_byte(job->buffer->format), rows.first, rows.end);
	}
	kept->dirty = (struct fb_rows){ 0, 0 };
	return kept->pixels;
}

/* The I420 frame of factor `f` of `job`; NULL when it has none (a side under 2) or out of
 * memory. */
static uint8_t *
job_run_i420(struct capture_job *job, int32_t f)
{
	const struct i420_size size = i420_size_of(frame_side(job->view.width, f),
						   frame_side(job->view.height, f));
	const size_t bytes = i420_bytes(size);
	const uint8_t *kept;
	uint8_t *frame;

	if (size.width == 0)
		return NULL;
	frame = malloc(bytes);
	if (!frame)
		return NULL;
	kept = job_i420(job, f, size);
	if (kept) {
		memcpy(frame, kept, bytes);
	} else if (!job_i420_anew(frame, job, f, size)) {
		free(frame);
		return NULL;
	}
	return frame;
}

/* The frames of `job`, one per factor and format: the worker's part, which touches no
 * compositor state. A packed frame the size of the buffer, upright as it is, is a plain copy:
 * it keeps none. */
static void
job_run(struct capture_job *job)
{
	int k;

	for (k = 0; k < job->count; k++) {
		const int32_t f = job->factor[k];
		const size_t size = (size_t)frame_side(job->view.width, f) * 4 *
				    (size_t)frame_side(job->view.height, f);
		const uint8_t *kept;

		if (job->i420[k]) {
			job->frame[k] = job_run_i420(job, f);
			continue;
		}
		job->frame[k] = malloc(size);
		if (!job->frame[k])
			continue;
		if (job_is_view(job, f)) {
			box_downscale(job->frame[k], &job->view, f);
			continue;
		}
		kept = job_scaled(job, f);
		if (kept)
			memcpy(job->frame[k], kept, size);
		else
			box_downscale(job->frame[k], &job->view, f);
	}
}

static void
job_append(struct capture_job **list, struct capture_job *job)
{
	job->next = NULL;
	while (*list)
		list = &(*list)->next;
	*list = job;
}

static void *
worker_main(void *data)
{
	struct capture_worker *worker = data;
	struct capture_job *job;
	const uint64_t one = 1;
	ssize_t ignored;

	pthread_mutex_lock(&worker->lock);
	while (!worker->quit) {
		if (!worker->todo) {
			pthread_cond_wait(&worker->wake, &worker->lock);
			continue;
		}
		job = worker->todo;
		worker->todo = job->next;
		pthread_mutex_unlock(&worker->lock);
		job_run(job);
		pthread_mutex_lock(&worker->lock);
		job_append(&worker->done, job);
		/* A counter: a failed write means it is already non-zero. */
		ignored = write(worker->event_fd, &one, sizeof one);
		(void)ignored;
	}
	pthread_mutex_unlock(&worker->lock);
	return NULL;
}

static void job_deliver(struct capturer *capturer, struct capture_job *job);
static void capture_output_free(struct capture_output *co);

static int
worker_event(int fd, uint32_t mask, void *data)
{
	struct capturer *capturer = data;
	struct capture_worker *worker = &capturer->worker;
	struct capture_job *job, *done;
	uint64_t count;
	ssize_t ignored;

	(void)mask;
	ignored = read(fd, &count, sizeof count);
	(void)ignored;
	pthread_mutex_lock(&worker->lock);
	done = worker->done;
	worker->done = NULL;
	pthread_mutex_unlock(&worker->lock);
	while ((job = done)) {
		done = job->next;
		job_deliver(capturer, job);
	}
	return 0;
}

/* Starts the worker thread, with every signal blocked in it: weston takes its signals
 * through signalfd in its own thread. */
static bool
worker_start(struct capturer *capturer)
{
	struct capture_worker *worker = &capturer->worker;
	struct wl_event_loop *loop =
		wl_display_get_event_loop(capturer->layout->compositor->wl_display);
	sigset_t all, old;
	int err;

	worker->event_fd = eventfd(0, EFD_CLOEXEC | EFD_NONBLOCK);
	if (worker->event_fd < 0)
		return false;
	worker->source = wl_event_loop_add_fd(loop, worker->event_fd, WL_EVENT_READABLE,
					      worker_event, capturer);
	if (!worker->source) {
		close(worker->event_fd);
		return false;
	}
	pthread_mutex_init(&worker->lock, NULL);
	pthread_cond_init(&worker->wake, NULL);
	worker->quit = false;
	sigfillset(&all);
	pthread_sigmask(SIG_SETMASK, &all, &old);
	err = pthread_create(&worker->thread, NULL, worker_main, worker);
	pthread_sigmask(SIG_SETMASK, &old, NULL);
	if (err) {
		weston_log("layout: capture worker: %s; frames are made in weston's thread\n",
			   strerror(err));
		wl_event_source_remove(worker->source);
		close(worker->event_fd);
		pthread_mutex_destroy(&worker->lock);
		pthread_cond_destroy(&worker->wake);
		return false;
	}
	worker->started = true;
	return true;
}

/* Drops `job` undelivered: the capture client is going. */
static void
job_discard(struct capture_job *job)
{
	struct capture_output *co = job->output;

	job->buffer->state = BUFFER_FREE;
	if (--co->jobs == 0 && co->gone)
		capture_output_free(co);
	job_free(job);
}

/* Joins the worker and drops every job it had. */
static void
worker_stop(struct capturer *capturer)
{
	struct capture_worker *worker = &capturer->worker;
	struct capture_job *job;

	if (!worker->started)
		return;
	pthread_mutex_lock(&worker->lock);
	worker->quit = true;
	pthread_cond_signal(&worker->wake);
	pthread_mutex_unlock(&worker->lock);
	pthread_join(worker->thread, NULL);
	wl_event_source_remove(worker->source);
	close(worker->event_fd);
	pthread_mutex_destroy(&worker->lock);
	pthread_cond_destroy(&worker->wake);
	while ((job = worker->todo)) {
		worker->todo = job->next;
		job_discard(job);
	}
	while ((job = worker->done)) {
		worker->done = job->next;
		job_discard(job);
	}
	worker->started = false;
}

/* Hands `job` to the worker, or runs it here when no worker can run. */
static void
worker_submit(struct capturer *capturer, struct capture_job *job)
{
	struct capture_worker *worker = &capturer->worker;

	if (!worker->started && !worker_start(capturer)) {
		job_run(job);
		job_deliver(capturer, job);
		return;
	}
	pthread_mutex_lock(&worker->lock);
	job_append(&worker->todo, job);
	pthread_cond_signal(&worker->wake);
	pthread_mutex_unlock(&worker->lock);
}

/* ---------- frames to connections ---------- */

static bool
waits_for(const struct conn *conn, const struct capture_output *co)
{
	return conn->pending > 0 && !conn->frame_in_flight && strcmp(conn->output, co->name) == 0;
}

/* The factor for `conn`'s bound on `view`; 0 when the view cannot fit it. */
static int32_t
conn_factor(const struct conn *conn, const struct box_view *view)
{
	int32_t factor = box_factor(view->width, view->height, conn->max_width, conn->max_height);

	return factor <= FACTOR_MAX ? factor : 0;
}

/* The entry of `job` for frames of factor `f` in I420 or packed; job->count when none. */
static int
job_entry(const struct capture_job *job, int32_t f, bool i420)
{
	int k;

	for (k = 0; k < job->count && (job->factor[k] != f || job->i420[k] != i420); k++)
		;
	return k;
}

/* The job for the buffer `buf` weston just filled: one frame for each factor and format the
 * waiting connections need (up to JOB_FACTORS); NULL when none waits or out of memory. */
static struct capture_job *
job_create(struct capture_output *co, struct capture_buffer *buf)
{
	struct layout *layout = co->capturer->layout;
	struct capture_job *job = calloc(1, sizeof *job);
	struct conn *conn;
	int32_t factor;

	if (!job)
		return NULL;
	job->output = co;
	job->buffer = buf;
	job->transform = (uint32_t)co->transform;
	job->view = box_view_upright(buf->pixels, buf->width, buf->height, (size_t)buf->width * 4,
				     job->transform);
	wl_list_for_each(conn, &layout->capture.conns, link) {
		if (!waits_for(conn, co) || !(factor = conn_factor(conn, &job->view)))
			continue;
		if (job_entry(job, factor, conn->i420) == job->count && job->count < JOB_FACTORS) {
			job->factor[job->count] = factor;
			job->i420[job->count++] = conn->i420;
		}
	}
	if (job->count == 0) {
		free(job);
		return NULL;
	}
	return job;
}

/* Queues a frame of `job` for `conn` (frame k; the job's own copy when `last` says no
 * other connection needs it, else a copy); false when the connection must go. */
static bool
send_frame(struct conn *conn, struct capture_job *job, int k, bool last)
{
	const int32_t f = job->factor[k];
	int32_t width = frame_side(job->view.width, f);
	int32_t height = frame_side(job->view.height, f);
	size_t stride = (size_t)width * 4;
	size_t size = stride * (size_t)height;
	const char *format = format_name(job->buffer->format);
	uint8_t *pixels = job->frame[k];

	conn->pending--;
	if (job->i420[k]) {
		const struct i420_size i420 = i420_size_of(width, height);

		if (i420.width == 0)
			return conn_printf(conn, "ERR io a %dx%d frame has no I420 form (a side "
					   "under 2)\n", width, height);
		width = i420.width;
		height = i420.height;
		stride = (size_t)width;
		size = i420_bytes(i420);
		format = "I420";
	}
	if (!pixels)
		return conn_printf(conn, "ERR io out of memory for %zu bytes\n", size);
	if (last) {
		job->frame[k] = NULL;
	} else {
		pixels = malloc(size);
		if (!pixels)
			return conn_printf(conn, "ERR io out of memory for %zu bytes\n", size);
		memcpy(pixels, job->frame[k], size);
	}
	if (!conn_printf(conn, "FRAME %d %d %zu %s 0 %zu\n", width, height, stride, format,
			 size)) {
		free(pixels);
		return false;
	}
	if (!conn_enqueue(conn, (char *)pixels, size, true))
		return false;
	conn->frame_in_flight = true;
	return true;
}

/* The worker is done with `job`: its frames go to the connections waiting for them (one
 * whose bound or format needs a frame the job lacks waits for the next capture), its buffer is free
 * for the next capture. */
static void
job_deliver(struct capturer *capturer, struct capture_job *job)
{
	struct layout *layout = capturer->layout;
	struct capture_output *co = job->output;
	struct conn *conn, *next;
	int users[JOB_FACTORS] = { 0 };
	int32_t factor;
	int k;

	job->buffer->state = BUFFER_FREE;
	co->jobs--;
	if (co->gone) {
		if (co->jobs == 0)
			capture_output_free(co);
		job_free(job);
		return;
	}
	wl_list_for_each(conn, &layout->capture.conns, link) {
		if (!waits_for(conn, co) || !(factor = conn_factor(conn, &job->view)))
			continue;
		k = job_entry(job, factor, conn->i420);
		if (k < job->count)
			users[k]++;
	}
	wl_list_for_each_safe(conn, next, &layout->capture.conns, link) {
		bool ok;

		if (!waits_for(conn, co))
			continue;
		factor = conn_factor(conn, &job->view);
		if (!factor) {
			conn->pending--;
			ok = conn_printf(conn, "ERR io %dx%d does not fit %dx%d\n", job->view.width,
					 job->view.height, conn->max_width, conn->max_height);
		} else {
			k = job_entry(job, factor, conn->i420);
			if (k == job->count)
				continue;
			ok = send_frame(conn, job, k, --users[k] == 0);
		}
		if (!ok || !conn_flush(conn))
			conn_destroy(conn);
	}
	job_free(job);
	capturer_kick(layout, co->name);
	capturer_release_idle(layout);
}

/* Starts a capture of `output_name` when a connection waits for one, none is running and a
 * buffer is free (else when the running capture or a job ends). */
void
capturer_kick(struct layout *layout, const char *output_name)
{
	struct capturer *capturer = &layout->capturer;
	struct capture_output *co;
	struct capture_buffer *buf = NULL;
	struct conn *conn;
	bool wanted = false;
	int i;

	wl_list_for_each(conn, &layout->capture.conns, link) {
		if (conn->pending > 0 && !conn->frame_in_flight &&
		    strcmp(conn->output, output_name) == 0)
			wanted = true;
	}
	if (!wanted)
		return;
	if (!capturer->running) {
		capture_fail_output(layout, output_name, "the capture client is not running");
		return;
	}
	co = find_capture_output(capturer, output_name);
	if (!co || !co->source)
		return; /* started when weston names the output */
	for (i = 0; i < 2; i++) {
		if (co->buffers[i].state == BUFFER_CAPTURING)
			return;
		if (co->buffers[i].state == BUFFER_FREE && !buf)
			buf = &co->buffers[i];
	}
	if (!buf)
		return;
	if (co->drm_format && !format_name(co->drm_format)) {
		capture_fail_output(layout, output_name, "unsupported capture format");
		return;
	}
	if (!capture_buffer_alloc(co, buf)) {
		capture_fail_output(layout, output_name, "cannot allocate a capture buffer");
		return;
	}
	/* A read waits for no repaint, so the next one waits for the worker to give a buffer
	 * back (job_deliver kicks) rather than copy the same frame twice. */
	if (fbread_available(layout->compositor) && co->jobs > 0)
		return;
	if (capture_from_framebuffer(co, buf))
		return;
	/* weston overwrites the whole buffer; what it draws after this is not known. */
	buf->stale = (struct fb_rows){ 0, buf->height };
	capture_buffer_filled(buf, buf->stale);
	weston_capture_source_v1_capture(co->source, buf->buffer);
	buf->state = BUFFER_CAPTURING;
	capturer_flush(capturer);
}

static void
source_format(void *data, struct weston_capture_source_v1 *source, uint32_t drm_format)
{
	struct capture_output *co = data;

	(void)source;
	co->drm_format = drm_format;
}

static void
source_size(void *data, struct weston_capture_source_v1 *source, int32_t width,
	    int32_t height)
{
	struct capture_output *co = data;

	(void)source;
	co->width = width;
	co->height = height;
}

static struct capture_buffer *
capturing_buffer(struct capture_output *co)
{
	int i;

	for (i = 0; i < 2; i++) {
		if (co->buffers[i].state == BUFFER_CAPTURING)
			return &co->buffers[i];
	}
	return NULL;
}

/* `buf` holds a new frame of `co`: to the worker for the connections waiting for it. */
static void
capture_done(struct capture_output *co, struct capture_buffer *buf)
{
	struct capture_job *job = job_create(co, buf);

	if (!job) {
		/* Every reader is behind (this frame is lost to them), or out of memory. */
		buf->state = BUFFER_FREE;
	} else {
		buf->state = BUFFER_FILTERING;
		co->jobs++;
		worker_submit(co->capturer, job);
	}
}

static void
source_complete(void *data, struct weston_capture_source_v1 *source)
{
	struct capture_output *co = data;
	struct capture_buffer *buf = capturing_buffer(co);

	(void)source;
	if (!buf)
		return;
	capture_done(co, buf);
	capturer_kick(co->capturer->layout, co->name);
	capturer_release_idle(co->capturer->layout);
}

static void
source_retry(void *data, struct weston_capture_source_v1 *source)
{
	struct capture_output *co = data;
	struct capture_buffer *buf = capturing_buffer(co);

	(void)source;
	if (buf)
		buf->state = BUFFER_FREE;
	capturer_kick(co->capturer->layout, co->name);
	capturer_release_idle(co->capturer->layout);
}

static void
source_failed(void *data, struct weston_capture_source_v1 *source, const char *msg)
{
	struct capture_output *co = data;
	struct capture_buffer *buf = capturing_buffer(co);

	(void)source;
	if (buf)
		buf->state = BUFFER_FREE;
	capture_fail_output(co->capturer->layout, co->name, msg ? msg : "capture failed");
	capturer_release_idle(co->capturer->layout);
}

static const struct weston_capture_source_v1_listener source_listener = {
	.format = source_format,
	.size = source_size,
	.complete = source_complete,
	.retry = source_retry,
	.failed = source_failed,
};

static void
capture_output_start(struct capture_output *co)
{
	struct capturer *capturer = co->capturer;

	if (co->source || !capturer->capture || co->name[0] == '\0')
		return;
	co->source = weston_capture_v1_create(capturer->capture, co->wl_output,
					      WESTON_CAPTURE_V1_SOURCE_FRAMEBUFFER);
	weston_capture_source_v1_add_listener(co->source, &source_listener, co);
	capturer_kick(capturer->layout, co->name);
}

static void
capture_output_free(struct capture_output *co)
{
	if (co->deferred_timer)
		wl_event_source_remove(co->deferred_timer);
	capture_buffer_free(&co->buffers[0]);
	capture_buffer_free(&co->buffers[1]);
	free(co);
}

/* Ends the output's protocol objects; its memory goes now, or when the worker gives back
 * the last of its buffers. */
static void
capture_output_destroy(struct capture_output *co)
{
	int i;

	for (i = 0; i < 2; i++) {
		if (co->buffers[i].buffer)
			wl_buffer_destroy(co->buffers[i].buffer);
		co->buffers[i].buffer = NULL;
	}
	if (co->source)
		weston_capture_source_v1_destroy(co->source);
	co->source = NULL;
	unwatch_output(co);
	co->deferred = NULL;
	if (co->deferred_timer)
		wl_event_source_remove(co->deferred_timer);
	co->deferred_timer = NULL;
	wl_output_release(co->wl_output);
	wl_list_remove(&co->link);
	if (co->jobs > 0)
		co->gone = true;
	else
		capture_output_free(co);
}

static void
wl_output_geometry(void *data, struct wl_output *output, int32_t x, int32_t y,
		   int32_t physical_width, int32_t physical_height, int32_t subpixel,
		   const char *make, const char *model, int32_t transform)
{
	struct capture_output *co = data;

	(void)output, (void)x, (void)y, (void)physical_width;
	(void)physical_height, (void)subpixel, (void)make, (void)model;
	co->transform = transform;
}

static void
wl_output_mode(void *data, struct wl_output *output, uint32_t flags, int32_t width,
	       int32_t height, int32_t refresh)
{
	(void)data, (void)output, (void)flags, (void)width, (void)height, (void)refresh;
}

static void
wl_output_done(void *data, struct wl_output *output)
{
	(void)data, (void)output;
}

static void
wl_output_scale(void *data, struct wl_output *output, int32_t factor)
{
	(void)data, (void)output, (void)factor;
}

static void
wl_output_name(void *data, struct wl_output *output, const char *name)
{
	struct capture_output *co = data;

	(void)output;
	if (co->name[0] != '\0' || strlen(name) > OUTPUT_NAME_MAX)
		return;
	strcpy(co->name, name);
	capture_output_start(co);
}

static void
wl_output_description(void *data, struct wl_output *output, const char *description)
{
	(void)data, (void)output, (void)description;
}

static const struct wl_output_listener output_listener = {
	.geometry = wl_output_geometry,
	.mode = wl_output_mode,
	.done = wl_output_done,
	.scale = wl_output_scale,
	.name = wl_output_name,
	.description = wl_output_description,
};

static void
registry_global(void *data, struct wl_registry *registry, uint32_t name,
		const char *interface, uint32_t version)
{
	struct capturer *capturer = data;
	struct capture_output *co;

	if (strcmp(interface, wl_shm_interface.name) == 0 && !capturer->shm) {
		capturer->shm = wl_registry_bind(registry, name, &wl_shm_interface, 1);
	} else if (strcmp(interface, weston_capture_v1_interface.name) == 0 &&
		   !capturer->capture) {
		capturer->capture = wl_registry_bind(registry, name,
						     &weston_capture_v1_interface, 1);
		wl_list_for_each(co, &capturer->outputs, link)
			capture_output_start(co);
	} else if (strcmp(interface, wl_output_interface.name) == 0 &&
		   version >= WL_OUTPUT_NAME_SINCE_VERSION) {
		co = calloc(1, sizeof *co);
		if (!co)
			return;
		co->capturer = capturer;
		co->global = name;
		co->wl_output = wl_registry_bind(registry, name, &wl_output_interface,
						 WL_OUTPUT_NAME_SINCE_VERSION);
		wl_output_add_listener(co->wl_output, &output_listener, co);
		/* Newest first: an output that comes back under a name wins over the old one
		 * until the old one's global_remove arrives. */
		wl_list_insert(&capturer->outputs, &co->link);
	}
}

static void
registry_global_remove(void *data, struct wl_registry *registry, uint32_t name)
{
	struct capturer *capturer = data;
	struct capture_output *co, *next;

	(void)registry;
	wl_list_for_each_safe(co, next, &capturer->outputs, link) {
		if (co->global == name)
			capture_output_destroy(co);
	}
}

static const struct wl_registry_listener registry_listener = {
	.global = registry_global,
	.global_remove = registry_global_remove,
};

void
capturer_stop(struct capturer *capturer)
{
	struct capture_output *co, *next;

	if (!capturer->display)
		return;
	capturer->running = false;
	worker_stop(capturer);
	wl_list_for_each_safe(co, next, &capturer->outputs, link)
		capture_output_destroy(co);
	if (capturer->capture)
		weston_capture_v1_destroy(capturer->capture);
	if (capturer->shm)
		wl_shm_destroy(capturer->shm);
	if (capturer->registry)
		wl_registry_destroy(capturer->registry);
	wl_event_source_remove(capturer->source);
	wl_display_disconnect(capturer->display);
	wl_list_remove(&capturer->authority.link);
	if (capturer->server_client)
		wl_list_remove(&capturer->server_client_destroy.link);
	/* weston destroys the server side of the client with its other clients. */
	capturer->display = NULL;
	capturer->capture = NULL;
	capturer->shm = NULL;
	capturer->registry = NULL;
	capturer->server_client = NULL;
}

/* After a failure the module captures nothing more: outstanding and later requests get
 * ERR io. */
static void
capturer_broken(struct capturer *capturer, const char *why)
{
	struct conn *conn, *next;

	weston_log("layout: capture client failed (%s); captures are off\n", why);
	capturer->running = false;
	wl_list_for_each_safe(conn, next, &capturer->layout->capture.conns, link) {
		capture_fail_pending(conn, "io", "the capture client is not running");
		if (!conn_flush(conn))
			conn_destroy(conn);
	}
}

static int
capturer_event(int fd, uint32_t mask, void *data)
{
	struct capturer *capturer = data;
	struct wl_display *display = capturer->display;

	(void)fd;
	if (!capturer->running)
		return 0;
	while (wl_display_prepare_read(display) != 0) {
		if (wl_display_dispatch_pending(display) < 0)
			goto broken;
	}
	if (mask & WL_EVENT_READABLE) {
		if (wl_display_read_events(display) < 0)
			goto broken;
	} else {
		wl_display_cancel_read(display);
	}
	if (wl_display_dispatch_pending(display) < 0)
		goto broken;
	if (mask & (WL_EVENT_HANGUP | WL_EVENT_ERROR))
		goto broken;
	capturer_flush(capturer);
	return 0;
broken:
	capturer_broken(capturer, wl_display_get_error(display) ? strerror(wl_display_get_error(display))
							       : "connection closed");
	wl_event_source_fd_update(capturer->source, 0);
	return 0;
}

static void
capturer_authorize(struct wl_listener *listener, struct weston_output_capture_attempt *att)
{
	struct capturer *capturer = wl_container_of(listener, capturer, authority);

	if (capturer->server_client && att->who->client == capturer->server_client)
		att->authorized = true;
}

static void
capturer_server_client_destroyed(struct wl_listener *listener, void *data)
{
	struct capturer *capturer = wl_container_of(listener, capturer, server_client_destroy);

	(void)data;
	wl_list_remove(&capturer->server_client_destroy.link);
	capturer->server_client = NULL;
	if (capturer->running)
		capturer_broken(capturer, "weston closed its connection");
}

int
capturer_start(struct capturer *capturer, struct layout *layout)
{
	struct weston_compositor *ec = layout->compositor;
	int fds[2];

	capturer->layout = layout;
	wl_list_init(&capturer->outputs);
	if (socketpair(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0, fds) < 0)
		return -1;
	capturer->server_client = wl_client_create(ec->wl_display, fds[0]);
	if (!capturer->server_client) {
		close(fds[0]);
		close(fds[1]);
		return -1;
	}
	capturer->server_client_destroy.notify = capturer_server_client_destroyed;
	wl_client_add_destroy_listener(capturer->server_client, &capturer->server_client_destroy);
	weston_compositor_add_screenshot_authority(ec, &capturer->authority, capturer_authorize);
	capturer->display = wl_display_connect_to_fd(fds[1]);
	if (!capturer->display) {
		close(fds[1]);
		wl_list_remove(&capturer->authority.link);
		wl_list_remove(&capturer->server_client_destroy.link);
		wl_client_destroy(capturer->server_client);
		capturer->server_client = NULL;
		return -1;
	}
	capturer->source = wl_event_loop_add_fd(wl_display_get_event_loop(ec->wl_display), fds[1],
						WL_EVENT_READABLE, capturer_event, capturer);
	if (!capturer->source) {
		wl_display_disconnect(capturer->display);
		capturer->display = NULL;
		wl_list_remove(&capturer->authority.link);
		wl_list_remove(&capturer->server_client_destroy.link);
		wl_client_destroy(capturer->server_client);
		capturer->server_client = NULL;
		return -1;
	}
	capturer->registry = wl_display_get_registry(capturer->display);
	wl_registry_add_listener(capturer->registry, &registry_listener, capturer);
	capturer->running = true;
	capturer_flush(capturer);
	return 0;
}
