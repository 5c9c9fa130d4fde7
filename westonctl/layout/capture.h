/* The capture side of layout-shell.so: the module's own Wayland client of its compositor, the
 * capture socket's requests and the worker thread that makes their frames (capture.c). */
#ifndef LAYOUT_CAPTURE_H
#define LAYOUT_CAPTURE_H

#include <pthread.h>

#include "boxfilter.h"
#include "fbread.h"

#define MAX_PENDING_FRAMES 16
#define BOUND_MIN 16
#define BOUND_MAX 16384
/* The distinct factors and formats one capture is made in; a connection wanting another
 * waits for the next capture. */
#define JOB_FACTORS 4

struct conn;
struct layout;

/* A frame the worker made from a capture buffer, kept with it so that the next frame of that
 * factor and format from that buffer refilters only the blocks of the rows filled since (a screen that
 * barely changes costs barely anything). The worker touches it only while the buffer is
 * BUFFER_FILTERING, weston's thread only while it is not. */
struct scaled_frame {
	uint8_t *pixels;	/* NULL: none kept */
	int32_t factor;
	bool i420;		/* an I420 frame (i420.h), else packed like the buffer */
	uint32_t transform;
	struct fb_rows dirty;	/* the buffer's rows filled since it was made */
};

/* A shm buffer an output is captured into. Two per output: weston's thread fills one while
 * the worker reads the other. */
struct capture_buffer {
	struct wl_buffer *buffer;
	uint8_t *pixels;
	size_t size;
	int32_t width, height;
	uint32_t format;
	struct fb_rows stale;	/* repainted since it was last filled (pixman reads) */
	struct scaled_frame scaled[JOB_FACTORS];
	enum { BUFFER_FREE, BUFFER_CAPTURING, BUFFER_FILTERING } state;
};

/* An output as the capture client sees it: its wl_output (name, transform), its capture
 * source and the buffers weston captures into (kept while capture connections are open). */
struct capture_output {
	struct wl_list link;
	struct capturer *capturer;
	uint32_t global;
	struct wl_output *wl_output;
	char name[OUTPUT_NAME_MAX + 1];
	struct weston_capture_source_v1 *source;
	uint32_t drm_format;
	int32_t width, height;
	int32_t transform;
	struct capture_buffer buffers[2];
	/* The compositor's output whose repaints mark the buffers' stale rows, while read
	 * with fbread; NULL when none. */
	struct weston_output *watched;
	struct wl_listener frame, watched_destroy;
	/* The buffer read at the repaint weston has pending (else at the timer's end). */
	struct capture_buffer *deferred;
	struct wl_event_source *deferred_timer;
	int jobs;	/* of this output's captures, those the worker holds */
	bool gone;	/* its global went while the worker held a job: freed when the last ends */
};

/* One captured frame for the worker: the upright view of its buffer, and the frames made
 * from it, one per factor and format (NULL when out of memory). */
struct capture_job {
	struct capture_job *next;
	struct capture_output *output;
	struct capture_buffer *buffer;
	uint32_t transform;
	struct box_view view;
	int count;
	int32_t factor[JOB_FACTORS];
	bool i420[JOB_FACTORS];
	uint8_t *frame[JOB_FACTORS];
};

/* The thread that makes frames from captured buffers, so that the compositor's thread only
 * hands buffers over and sends the results; started with the first capture. */
struct capture_worker {
	bool started;
	pthread_t thread;
	pthread_mutex_t lock;
	pthread_cond_t wake;
	struct capture_job *todo, *done;	/* first in, first out; under lock */
	bool quit;
	int event_fd;	/* the worker's signal that `done` has jobs */
	struct wl_event_source *source;
};

/* The module's own Wayland client of its compositor, over a socketpair, through which it
 * captures outputs with weston_capture_v1; the one client its screenshot authority admits. */
struct capturer {
	struct layout *layout;
	struct wl_client *server_client;
	struct wl_listener server_client_destroy;
	struct wl_listener authority;
	struct wl_display *display;
	struct wl_event_source *source;
	struct wl_registry *registry;
	struct wl_shm *shm;
	struct weston_capture_v1 *capture;
	struct wl_list outputs;
	struct capture_worker worker;
	bool running;
};

bool capture_line(struct conn *conn, char *line);
void capture_fail_pending(struct conn *conn, const char *code, const char *text);
void capturer_kick(struct layout *layout, const char *output_name);
void capturer_release_idle(struct layout *layout);
int capturer_start(struct capturer *capturer, struct layout *layout);
void capturer_stop(struct capturer *capturer);

#endif
