/* layout-shell.so's shared definitions: the connections of its control and capture sockets,
 * claims, outputs and the module's state. layout.c describes the module as a whole. */
#ifndef LAYOUT_H
#define LAYOUT_H

#include <errno.h>
#include <fcntl.h>
#include <stdarg.h>
#include <stdbool.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/uio.h>
#include <sys/un.h>
#include <unistd.h>

#include <libweston/libweston.h>
#include <libweston/config-parser.h>
#include <libweston/desktop.h>
#include <libweston/shell-utils.h>
#include <wayland-client.h>
#include <wayland-server.h>
#include <weston.h>

#include "weston-output-capture-client-protocol.h"

#define LINE_MAX_BYTES 1024
#define TEXT_QUEUE_MAX (64 * 1024)
#define MAX_CONNECTIONS 32
/* Per claim socket: at most this many clients at once; each of them holds at most
 * MAX_CLIENT_OBJECTS live protocol objects (counted every OBJECT_RECOUNT creations, so a
 * client may overshoot by less than that before it is disconnected). */
#define MAX_CLAIM_CLIENTS 32
#define MAX_CLIENT_OBJECTS 8192
#define OBJECT_RECOUNT 1024
#define CLAIM_MAX 128
#define OUTPUT_NAME_MAX 63
#define ACCEPTS_PER_WAKEUP 64
#define READ_PER_WAKEUP (64 * 1024)

struct layout;

enum conn_kind { CONN_CONTROL, CONN_CAPTURE };

struct chunk {
	struct chunk *next;
	char *data;
	size_t len;
	size_t off;
	bool frame;
};

struct conn {
	struct wl_list link;
	struct layout *layout;
	enum conn_kind kind;
	int fd;
	struct wl_event_source *source;
	char in[LINE_MAX_BYTES];
	size_t in_len;
	struct chunk *head, *tail;
	size_t text_queued;
	bool frame_in_flight;
	/* capture only: the output, bound (0 x 0 for none) and format of the pending requests */
	char output[OUTPUT_NAME_MAX + 1];
	int32_t max_width, max_height;
	bool i420;
	int pending;
};

struct listener_socket {
	int fd;
	char path[sizeof(((struct sockaddr_un *)0)->sun_path)];
	struct wl_event_source *source;
};

struct server {
	struct layout *layout;
	enum conn_kind kind;
	struct listener_socket sock;
	struct wl_list conns;
};

struct claim {
	struct wl_list link;
	struct layout *layout;
	char name[CLAIM_MAX + 1];
	char output[OUTPUT_NAME_MAX + 1];
	struct listener_socket sock;
	struct wl_list clients;
	bool refusing;	/* at MAX_CLAIM_CLIENTS, logged once until a client is accepted */
};

struct claim_client {
	struct wl_list link;
	struct claim *claim;
	struct wl_client *client;
	struct wl_listener destroy;
	struct wl_listener resource_created;
	unsigned created;	/* objects created since the last count */
	bool over;		/* disconnect posted */
};

struct layout_output {
	struct wl_list link;
	struct layout *layout;
	struct weston_output *output;
	struct weston_curtain *background;
	/* The claimed views shown on this output, masked to its rectangle. */
	struct weston_layer layer;
	/* configure.c: the mode passed to a backend that takes any size (libweston keeps
	 * the pointer as the native mode), and a modeset waiting for a page flip. */
	struct weston_mode any_size_mode;
	struct wl_event_source *modeset_timer;
	int modeset_waited_ms;
};

#include "capture.h"

struct layout_surface {
	struct wl_list link;
	struct layout *layout;
	struct weston_desktop_surface *desktop_surface;
	struct weston_view *view;
	struct claim *claim;
	struct layout_output *shown_on;	/* whose layer holds the view, NULL when hidden */
	bool committed;
	int32_t sized_w, sized_h;
};

/* probe.c: one connector as the last PROBE found it */
struct probed {
	char name[48];
	const char *status;	/* a static string: compared by pointer */
	char digest[17];	/* 16 hex characters of the EDID's SHA-256; "-" without one */
};

struct layout {
	struct weston_compositor *compositor;
	struct weston_desktop *desktop;
	struct weston_layer background_layer;
	struct wl_list claims;
	struct wl_list outputs;
	struct wl_list surfaces;
	struct server control;
	struct server capture;
	struct capturer capturer;
	char *claims_dir;	/* [layout] claims-dir, no trailing '/'; NULL: any path */
	struct wl_listener destroy;
	struct wl_listener output_created;
	struct wl_listener output_destroyed;
	struct wl_listener output_moved;
	struct wl_listener output_resized;
	struct probed *probed;	/* the last PROBE's answer, for its log */
	uint32_t probed_count;
};

/* conn.c: the line-protocol connections of the control and capture sockets */
bool conn_enqueue(struct conn *conn, char *data, size_t len, bool frame);
void chunk_pop(struct conn *conn);
bool conn_flush(struct conn *conn);
bool conn_printf(struct conn *conn, const char *fmt, ...) __attribute__((format(printf, 2, 3)));
void conn_destroy(struct conn *conn);
void listener_socket_close(struct listener_socket *sock, bool unlink_path);
int listener_socket_open(struct listener_socket *sock, const char *path, mode_t mode,
			 const char **why);
int server_readable(int fd, uint32_t mask, void *data);

/* layout.c */
struct weston_output *find_output(struct layout *layout, const char *name);
struct layout_output *find_layout_output(struct layout *layout, struct weston_output *output);
int split_words(char *line, char **words, int max);
bool valid_output(const char *s);
bool control_line(struct conn *conn, char *line);
void layout_output_changed(struct layout *layout, struct weston_output *output);
struct claim *claim_of_client(struct layout *layout, struct wl_client *client);

/* visibility.c: a claim's client is offered its own output's wl_output only */
void visibility_start(struct layout *layout);
void visibility_stop(struct layout *layout);

/* configure.c: live output configuration (CONFIGURE, OUTPUTS) */
bool configure_line(struct conn *conn, char **words, int n, bool *result);
void configure_output_gone(struct layout_output *lo);

/* probe.c: the DRM master's re-detection of the card's connectors (PROBE) */
bool probe_line(struct conn *conn, char **words, int n, bool *result);

/* glinfo.c: the GL driver weston composites with, and a warning when it is the CPU */
bool glinfo_is_software(const char *renderer);
void glinfo_report(void);

/* join.c: heads without an output that PROBE found changed are re-read by the DRM backend */
void join_heads(struct layout *layout, const struct probed *found, uint32_t count);

#endif
