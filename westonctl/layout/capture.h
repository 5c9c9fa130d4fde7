/* The capture side of layout-shell.so: the module's own Wayland client of its compositor and
 * the capture socket's requests (capture.c). */
#ifndef LAYOUT_CAPTURE_H
#define LAYOUT_CAPTURE_H

#define MAX_PENDING_FRAMES 16
#define BOUND_MIN 16
#define BOUND_MAX 16384
/* A byte's sum over a block of up to FACTOR_MAX^2 pixels fits 32 bits, and the rounded
 * division by reciprocal (RECIP_SHIFT) is exact for blocks of up to 2^23 pixels. BOUND_MIN
 * keeps the factor within it for any output up to 32768 pixels a side. */
#define FACTOR_MAX 2048
#define RECIP_SHIFT 55

struct conn;
struct layout;

/* An output as the capture client sees it: its wl_output, its capture source and the
 * shm buffer weston captures into (kept for the next frame). */
struct capture_output {
	struct wl_list link;
	struct capturer *capturer;
	uint32_t global;
	struct wl_output *wl_output;
	char name[OUTPUT_NAME_MAX + 1];
	struct weston_capture_source_v1 *source;
	uint32_t drm_format;
	int32_t width, height;
	struct wl_buffer *buffer;
	uint32_t buffer_format;
	int32_t buffer_width, buffer_height;
	uint8_t *pixels;
	size_t size;
	bool busy;
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
	bool running;
};

bool capture_line(struct conn *conn, char *line);
void capture_fail_pending(struct conn *conn, const char *code, const char *text);
void capturer_kick(struct layout *layout, const char *output_name);
void capturer_release_idle(struct layout *layout);
int capturer_start(struct capturer *capturer, struct layout *layout);
void capturer_stop(struct capturer *capturer);

#endif
