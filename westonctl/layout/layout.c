/*
 * layout-shell.so: weston 14's shell for display-operator (the project's only C).
 *
 * Loaded with `--shell=/abs/path/layout-shell.so` (entry point wet_shell_init; weston
 * appends `-shell.so` to a name that lacks it, hence the file's name). It owns:
 *
 * Placement. Every toplevel of a *claimed* client is made fullscreen, sized to its claim's
 * output and positioned on it; a client that ignores the size is centred on the output's
 * black background (larger ones are pinned to the output's top-left corner). Clients'
 * requests to go fullscreen elsewhere, to unset fullscreen, to maximize, minimize, move or
 * resize are ignored. Popups are placed by libweston's desktop code relative to their
 * parent, so they stay with it; child toplevels belong to the same client, hence the same
 * output.
 * When a claim's output goes away its surfaces are unmapped (off screen, keeping their
 * state); when an output of that name comes back they are mapped again.
 *
 * Confinement. Each output has its own weston layer whose mask is the output's rectangle
 * in global space, and a claimed view is shown only in its output's layer. libweston
 * clips a view's bounding box to its layer's mask, and that box is what is painted and
 * what input picking tests, so no pixel of the client lands on, and no pointer or touch
 * event comes from, any other output, however large its buffer is against the window
 * geometry it declares. Subsurfaces are clipped by their parent's layer; popups are kept in
 * their parent's layer by libweston-desktop (weston_desktop_surface_propagate_layer).
 *
 * Policy for clients of the main Wayland socket (weston's own `--socket`): they are
 * connected and configured normally, but their windows are shown on NO output. Only the
 * operator's probe and tools use that socket; consumers reach the compositor only through
 * their claim's socket, so nothing a consumer cannot see by claiming appears on a monitor.
 *
 * Control socket (`[layout] control-socket=PATH`, mode 0660). A line protocol, one
 * request per line (at most 1023 bytes before '\n'), one reply per request. On connect
 * the module sends `LAYOUT 1`. Requests:
 *   CREATE <claim> <output> <socket-path>   -> OK        (idempotent for the same triple)
 *   REMOVE <claim>                          -> OK        (ERR not-found when unknown)
 *   LIST                                    -> OK <n> then n lines
 *                                              `<claim> <output> <socket-path> <clients>`
 * Errors: `ERR <code> <text>` with code one of bad-request, bad-claim, bad-output,
 * bad-path, exists, not-found, io, too-long. A line over the limit gets `ERR too-long`
 * and the connection is closed. <claim> is 1..128 of [A-Za-z0-9._-]; <output> is 1..63
 * printable non-space bytes; <socket-path> is absolute and fits sockaddr_un.
 * With `[layout] claims-dir=DIR` (absolute), <socket-path> must also lie under DIR: its
 * last component a name other than . or .., and its parent directory, with symlinks
 * resolved, DIR itself (resolved) or a directory below it; anything else is
 * `ERR bad-path` and touches no file. Without the key CREATE takes any absolute path and
 * the module logs a warning at start. CREATE binds the path (replacing a stale socket
 * there, never any other kind of file, a symlink included) with mode 0666 so a non-root
 * consumer may connect (access is governed by the per-claim directory the consumer's CDI
 * spec mounts), and listens on it; every connection becomes a wl_client of that claim.
 * Socket modes (0666 here, 0660 for the control and capture sockets) come from the umask
 * in force around bind(), which creates the node and follows no symlink; no path is ever
 * chmod()ed. REMOVE disconnects the claim's clients, closes and unlinks
 * its socket. Claims live only as long as the compositor: the operator recreates them.
 *
 * What a claim's client may cost. A claim socket holds at most 32 clients at once
 * (MAX_CLAIM_CLIENTS); connections past that are closed as soon as they are accepted, and
 * the first refusal is logged (`layout: claim <claim>: 32 clients connected, refusing
 * more`). Each client may hold at most 8192 live protocol objects (MAX_CLIENT_OBJECTS):
 * a resource-created listener counts the client's objects every 1024 creations, and a
 * client found over the limit gets wl_display's no-memory error and is disconnected, with
 * the log line `layout: claim <claim>: client pid <pid> holds <n> protocol objects, over
 * the limit of 8192: disconnecting it`. So one claim's clients hold at most
 * 32 x (8192 + 1024) objects, a few tens of MiB of the compositor's memory.
 *
 * Capture socket (`[layout] capture-socket=PATH`, mode 0660). Greeting `LAYOUT-CAPTURE 1`.
 * Each `FRAME <output> [<max-width>x<max-height>]` line is answered by exactly one reply:
 * either `ERR <code> <text>` (no-output, output-gone, busy, bad-request, too-long, io) or
 * the line
 *   FRAME <width> <height> <stride> <format> <yflip> <nbytes>
 * followed by nbytes of pixels (format is a DRM fourcc name such as XRGB8888, in
 * little-endian memory order; yflip 1 would mean the first row is the bottom one: weston's
 * capture delivers the top row first with every renderer, so it is always 0). Frames come
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
 * The optional bound (each side 16..16384, decimal without sign or leading zero) asks for
 * a frame no larger than it: the module picks the smallest integer factor f >= 1 with
 * ceil(w/f) <= max-width and ceil(h/f) <= max-height and sends a ceil(w/f) x ceil(h/f)
 * frame (the header gives that size and its stride), each pixel the mean of its f x f block,
 * byte by byte, rounded half up. The last column and row of blocks may be cut by the edge
 * of the output: they average the pixels they have (ceil, so no pixel is dropped). Blocks
 * are anchored at the image's top-left corner. A frame that already fits is sent as
 * captured. The filter runs in weston's thread, in one pass over the captured frame.
 *
 * I/O: every socket is non-blocking and driven by wl_event_loop fd sources; each
 * connection has a bounded input buffer and a bounded queue of text replies; a peer that
 * overflows either is disconnected. At most 32 connections per control/capture socket.
 */

#define _GNU_SOURCE

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
#define MAX_PENDING_FRAMES 16
#define CLAIM_MAX 128
#define OUTPUT_NAME_MAX 63
#define ACCEPTS_PER_WAKEUP 64
#define READ_PER_WAKEUP (64 * 1024)
#define BOUND_MIN 16
#define BOUND_MAX 16384
/* A byte's sum over a block of up to FACTOR_MAX^2 pixels fits 32 bits, and the rounded
 * division by reciprocal (RECIP_SHIFT) is exact for blocks of up to 2^23 pixels. BOUND_MIN
 * keeps the factor within it for any output up to 32768 pixels a side. */
#define FACTOR_MAX 2048
#define RECIP_SHIFT 55

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
	/* capture only: the output and bound (0 x 0 for none) of the pending requests */
	char output[OUTPUT_NAME_MAX + 1];
	int32_t max_width, max_height;
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
};

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
};


/* ---------- outputs ---------- */

static struct weston_output *
find_output(struct layout *layout, const char *name)
{
	struct weston_output *output;

	wl_list_for_each(output, &layout->compositor->output_list, link) {
		if (output->name && strcmp(output->name, name) == 0)
			return output;
	}
	return NULL;
}

static struct layout_output *
find_layout_output(struct layout *layout, struct weston_output *output)
{
	struct layout_output *lo;

	wl_list_for_each(lo, &layout->outputs, link) {
		if (lo->output == output)
			return lo;
	}
	return NULL;
}

/* ---------- placement ---------- */

static void
hide_surface(struct layout_surface *ls)
{
	if (weston_view_is_mapped(ls->view))
		weston_view_move_to_layer(ls->view, NULL);
	weston_desktop_surface_propagate_layer(ls->desktop_surface);
	ls->shown_on = NULL;
}

static void
activate(struct layout *layout, struct weston_view *view)
{
	struct weston_seat *seat;

	wl_list_for_each(seat, &layout->compositor->seat_list, link) {
		if (weston_seat_get_keyboard(seat))
			weston_view_activate_input(view, seat, WESTON_ACTIVATE_FLAG_CONFIGURE);
	}
}

static void
place_surface(struct layout_surface *ls)
{
	struct weston_output *output;
	struct layout_output *lo;
	struct weston_surface *surface;
	struct weston_geometry geometry;
	struct weston_coord_global pos;
	bool newly_mapped;

	output = ls->claim ? find_output(ls->layout, ls->claim->output) : NULL;
	lo = output ? find_layout_output(ls->layout, output) : NULL;
	if (!lo) {
		hide_surface(ls);
		return;
	}
	if (ls->sized_w != output->width || ls->sized_h != output->height) {
		weston_desktop_surface_set_fullscreen(ls->desktop_surface, true);
		weston_desktop_surface_set_size(ls->desktop_surface, output->width, output->height);
		ls->sized_w = output->width;
		ls->sized_h = output->height;
	}
	surface = weston_desktop_surface_get_surface(ls->desktop_surface);
	if (!ls->committed || surface->width == 0)
		return;

	geometry = weston_desktop_surface_get_geometry(ls->desktop_surface);
	pos.c.x = output->pos.c.x - geometry.x;
	pos.c.y = output->pos.c.y - geometry.y;
	if (geometry.width < output->width)
		pos.c.x += (output->width - geometry.width) / 2;
	if (geometry.height < output->height)
		pos.c.y += (output->height - geometry.height) / 2;
	weston_view_set_position(ls->view, pos);

	if (!weston_surface_is_mapped(surface))
		weston_surface_map(surface);
	newly_mapped = !weston_view_is_mapped(ls->view);
	if (newly_mapped || ls->shown_on != lo) {
		/* The output's layer clips the view, its subsurfaces and its popups (which
		 * libweston-desktop keeps in their parent's layer) to the output. */
		weston_view_move_to_layer(ls->view, &lo->layer.view_list);
		weston_desktop_surface_propagate_layer(ls->desktop_surface);
		ls->shown_on = lo;
	}
	weston_view_update_transform(ls->view);
	weston_surface_damage(surface);
	if (newly_mapped)
		activate(ls->layout, ls->view);
}

static void
relayout(struct layout *layout)
{
	struct layout_surface *ls;

	wl_list_for_each(ls, &layout->surfaces, link)
		place_surface(ls);
}

static struct claim *
claim_of_client(struct layout *layout, struct wl_client *client)
{
	struct claim *claim;
	struct claim_client *cc;

	wl_list_for_each(claim, &layout->claims, link) {
		wl_list_for_each(cc, &claim->clients, link) {
			if (cc->client == client)
				return claim;
		}
	}
	return NULL;
}

static void
desktop_surface_added(struct weston_desktop_surface *ds, void *data)
{
	struct layout *layout = data;
	struct layout_surface *ls;
	struct wl_client *client;

	ls = calloc(1, sizeof *ls);
	if (!ls) {
		weston_desktop_surface_close(ds);
		return;
	}
	ls->view = weston_desktop_surface_create_view(ds);
	if (!ls->view) {
		free(ls);
		weston_desktop_surface_close(ds);
		return;
	}
	ls->layout = layout;
	ls->desktop_surface = ds;
	client = weston_desktop_client_get_client(weston_desktop_surface_get_client(ds));
	ls->claim = claim_of_client(layout, client);
	weston_desktop_surface_set_user_data(ds, ls);
	wl_list_insert(&layout->surfaces, &ls->link);
	if (ls->claim)
		weston_desktop_surface_set_activated(ds, true);
	place_surface(ls);
}

static void
desktop_surface_removed(struct weston_desktop_surface *ds, void *data)
{
	struct layout_surface *ls = weston_desktop_surface_get_user_data(ds);

	(void)data;
	if (!ls)
		return;
	weston_desktop_surface_set_user_data(ds, NULL);
	weston_desktop_surface_unlink_view(ls->view);
	weston_view_destroy(ls->view);
	wl_list_remove(&ls->link);
	free(ls);
}

static void
desktop_surface_committed(struct weston_desktop_surface *ds, struct weston_coord_surface offset,
			  void *data)
{
	struct layout_surface *ls = weston_desktop_surface_get_user_data(ds);

	(void)offset;
	(void)data;
	if (!ls)
		return;
	if (weston_desktop_surface_get_surface(ds)->width == 0)
		return;
	ls->committed = true;
	place_surface(ls);
}

static void
desktop_fullscreen_requested(struct weston_desktop_surface *ds, bool fullscreen,
			     struct weston_output *output, void *data)
{
	/* The claim decides the output; the client's wish is ignored. */
	(void)ds;
	(void)fullscreen;
	(void)output;
	(void)data;
}

static void
desktop_maximized_requested(struct weston_desktop_surface *ds, bool maximized, void *data)
{
	(void)ds;
	(void)maximized;
	(void)data;
}

static void
desktop_minimized_requested(struct weston_desktop_surface *ds, void *data)
{
	(void)ds;
	(void)data;
}

static void
desktop_move(struct weston_desktop_surface *ds, struct weston_seat *seat, uint32_t serial,
	     void *data)
{
	(void)ds;
	(void)seat;
	(void)serial;
	(void)data;
}

static void
desktop_resize(struct weston_desktop_surface *ds, struct weston_seat *seat, uint32_t serial,
	       enum weston_desktop_surface_edge edges, void *data)
{
	(void)ds;
	(void)seat;
	(void)serial;
	(void)edges;
	(void)data;
}

static const struct weston_desktop_api desktop_api = {
	.struct_size = sizeof(struct weston_desktop_api),
	.surface_added = desktop_surface_added,
	.surface_removed = desktop_surface_removed,
	.committed = desktop_surface_committed,
	.move = desktop_move,
	.resize = desktop_resize,
	.fullscreen_requested = desktop_fullscreen_requested,
	.maximized_requested = desktop_maximized_requested,
	.minimized_requested = desktop_minimized_requested,
};

/* ---------- connection output queue ---------- */

static void conn_destroy(struct conn *conn);

static void
conn_update_mask(struct conn *conn)
{
	uint32_t mask = WL_EVENT_READABLE;

	if (conn->head)
		mask |= WL_EVENT_WRITABLE;
	wl_event_source_fd_update(conn->source, mask);
}

static bool
conn_enqueue(struct conn *conn, char *data, size_t len, bool frame)
{
	struct chunk *chunk;

	if (!frame && conn->text_queued + len > TEXT_QUEUE_MAX) {
		free(data);
		return false;
	}
	chunk = calloc(1, sizeof *chunk);
	if (!chunk) {
		free(data);
		return false;
	}
	chunk->data = data;
	chunk->len = len;
	chunk->frame = frame;
	if (!frame)
		conn->text_queued += len;
	if (conn->tail)
		conn->tail->next = chunk;
	else
		conn->head = chunk;
	conn->tail = chunk;
	return true;
}

static void
chunk_pop(struct conn *conn)
{
	struct chunk *chunk = conn->head;

	conn->head = chunk->next;
	if (!conn->head)
		conn->tail = NULL;
	if (!chunk->frame)
		conn->text_queued -= chunk->len;
	free(chunk->data);
	free(chunk);
}

/* Returns false when the connection failed and must be destroyed. */
static bool
conn_flush(struct conn *conn)
{
	ssize_t n;

	while (conn->head) {
		struct chunk *chunk = conn->head;

		n = send(conn->fd, chunk->data + chunk->off, chunk->len - chunk->off,
			 MSG_NOSIGNAL | MSG_DONTWAIT);
		if (n < 0) {
			if (errno == EAGAIN || errno == EWOULDBLOCK)
				break;
			if (errno == EINTR)
				continue;
			return false;
		}
		chunk->off += (size_t)n;
		if (chunk->off < chunk->len)
			break;
		if (chunk->frame)
			conn->frame_in_flight = false;
		chunk_pop(conn);
	}
	conn_update_mask(conn);
	return true;
}

static bool
conn_printf(struct conn *conn, const char *fmt, ...) __attribute__((format(printf, 2, 3)));

static bool
conn_printf(struct conn *conn, const char *fmt, ...)
{
	va_list ap;
	char *text = NULL;
	int len;

	va_start(ap, fmt);
	len = vasprintf(&text, fmt, ap);
	va_end(ap);
	if (len < 0)
		return false;
	return conn_enqueue(conn, text, (size_t)len, false);
}

/* ---------- claims ---------- */

static void
listener_socket_close(struct listener_socket *sock, bool unlink_path)
{
	if (sock->source)
		wl_event_source_remove(sock->source);
	sock->source = NULL;
	if (sock->fd >= 0) {
		close(sock->fd);
		if (unlink_path)
			unlink(sock->path);
	}
	sock->fd = -1;
}

/* Binds and listens on `path`, replacing a stale socket file but no other kind of file. */
static int
listener_socket_open(struct listener_socket *sock, const char *path, mode_t mode,
		     const char **why)
{
	struct sockaddr_un addr = { .sun_family = AF_UNIX };
	struct stat st;
	mode_t old_umask;
	int fd, bound, bind_errno;

	sock->fd = -1;
	sock->source = NULL;
	if (strlen(path) >= sizeof(addr.sun_path)) {
		*why = "path too long for a unix socket";
		return -1;
	}
	if (lstat(path, &st) == 0) {
		if (!S_ISSOCK(st.st_mode)) {
			*why = "path exists and is not a socket";
			return -1;
		}
		if (unlink(path) < 0) {
			*why = "cannot unlink the stale socket";
			return -1;
		}
	}
	strcpy(addr.sun_path, path);
	fd = socket(AF_UNIX, SOCK_STREAM | SOCK_NONBLOCK | SOCK_CLOEXEC, 0);
	if (fd < 0) {
		*why = "socket() failed";
		return -1;
	}
	/* bind() creates the node with 0777 & ~umask and follows no symlink (an existing
	 * name, a symlink included, fails with EADDRINUSE), so the mode is set by the umask
	 * around it and never by a chmod() of the path, which would follow one. */
	old_umask = umask(~mode & 0777);
	bound = bind(fd, (struct sockaddr *)&addr, sizeof addr);
	bind_errno = errno;
	umask(old_umask);
	if (bound < 0) {
		*why = bind_errno == ENOENT ? "parent directory does not exist" : "bind() failed";
		close(fd);
		return -1;
	}
	if (listen(fd, 128) < 0) {
		*why = "listen() failed";
		close(fd);
		unlink(path);
		return -1;
	}
	sock->fd = fd;
	strcpy(sock->path, path);
	return 0;
}

static void
claim_client_destroyed(struct wl_listener *listener, void *data)
{
	struct claim_client *cc = wl_container_of(listener, cc, destroy);

	(void)data;
	wl_list_remove(&cc->destroy.link);
	wl_list_remove(&cc->resource_created.link);
	wl_list_remove(&cc->link);
	free(cc);
}

static enum wl_iterator_result
count_resource(struct wl_resource *resource, void *data)
{
	size_t *count = data;

	(void)resource;
	(*count)++;
	return WL_ITERATOR_CONTINUE;
}

/* Every protocol object a claim's client creates passes here. Every OBJECT_RECOUNT of them
 * its live objects are counted; past MAX_CLIENT_OBJECTS the client gets a no-memory error,
 * and libwayland destroys it once the request being dispatched returns (destroying it here,
 * inside the request, is not safe). */
static void
claim_client_resource_created(struct wl_listener *listener, void *data)
{
	struct claim_client *cc = wl_container_of(listener, cc, resource_created);
	size_t live = 0;
	pid_t pid = 0;

	(void)data;
	if (cc->over || ++cc->created < OBJECT_RECOUNT)
		return;
	cc->created = 0;
	wl_client_for_each_resource(cc->client, count_resource, &live);
	if (live <= MAX_CLIENT_OBJECTS)
		return;
	cc->over = true;
	wl_client_get_credentials(cc->client, &pid, NULL, NULL);
	weston_log("layout: claim %s: client pid %d holds %zu protocol objects, over the limit "
		   "of %d: disconnecting it\n", cc->claim->name, (int)pid, live,
		   MAX_CLIENT_OBJECTS);
	wl_client_post_no_memory(cc->client);
}

static int
claim_socket_readable(int fd, uint32_t mask, void *data)
{
	struct claim *claim = data;
	struct claim_client *cc;
	struct wl_client *client;
	int i, cfd;

	(void)mask;
	for (i = 0; i < ACCEPTS_PER_WAKEUP; i++) {
		cfd = accept4(fd, NULL, NULL, SOCK_CLOEXEC);
		if (cfd < 0)
			break;
		if (wl_list_length(&claim->clients) >= MAX_CLAIM_CLIENTS) {
			if (!claim->refusing)
				weston_log("layout: claim %s: %d clients connected, refusing more\n",
					   claim->name, MAX_CLAIM_CLIENTS);
			claim->refusing = true;
			close(cfd);
			continue;
		}
		claim->refusing = false;
		cc = calloc(1, sizeof *cc);
		if (!cc) {
			close(cfd);
			continue;
		}
		client = wl_client_create(claim->layout->compositor->wl_display, cfd);
		if (!client) {
			close(cfd);
			free(cc);
			continue;
		}
		cc->client = client;
		cc->claim = claim;
		cc->destroy.notify = claim_client_destroyed;
		wl_client_add_destroy_listener(client, &cc->destroy);
		cc->resource_created.notify = claim_client_resource_created;
		wl_client_add_resource_created_listener(client, &cc->resource_created);
		wl_list_insert(&claim->clients, &cc->link);
	}
	return 0;
}

static struct claim *
find_claim(struct layout *layout, const char *name)
{
	struct claim *claim;

	wl_list_for_each(claim, &layout->claims, link) {
		if (strcmp(claim->name, name) == 0)
			return claim;
	}
	return NULL;
}

static void
claim_destroy(struct claim *claim)
{
	struct claim_client *cc, *next;

	/* Destroying a client destroys its surfaces, which still point at this claim. */
	wl_list_for_each_safe(cc, next, &claim->clients, link)
		wl_client_destroy(cc->client);
	listener_socket_close(&claim->sock, true);
	wl_list_remove(&claim->link);
	free(claim);
}

static size_t
claim_client_count(struct claim *claim)
{
	struct claim_client *cc;
	size_t count = 0;

	wl_list_for_each(cc, &claim->clients, link)
		count++;
	return count;
}

/* ---------- request parsing ---------- */

static bool
valid_claim(const char *s)
{
	size_t n = strlen(s), i;

	if (n == 0 || n > CLAIM_MAX)
		return false;
	for (i = 0; i < n; i++) {
		char c = s[i];
		if (!((c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') ||
		      (c >= '0' && c <= '9') || c == '.' || c == '_' || c == '-'))
			return false;
	}
	return true;
}

static bool
valid_output(const char *s)
{
	size_t n = strlen(s), i;

	if (n == 0 || n > OUTPUT_NAME_MAX)
		return false;
	for (i = 0; i < n; i++) {
		if ((unsigned char)s[i] <= ' ' || (unsigned char)s[i] >= 0x7f)
			return false;
	}
	return true;
}

static bool
valid_path(const char *s)
{
	size_t n = strlen(s), i;

	if (n < 2 || s[0] != '/' || n >= sizeof(((struct sockaddr_un *)0)->sun_path))
		return false;
	for (i = 0; i < n; i++) {
		if ((unsigned char)s[i] <= ' ' || (unsigned char)s[i] >= 0x7f)
			return false;
	}
	return true;
}

/* Splits `line` on single spaces into at most `max` words; -1 when there are more. */
static int
split_words(char *line, char **words, int max)
{
	int n = 0;
	char *p = line;

	if (*p == '\0')
		return 0;
	for (;;) {
		if (n == max)
			return -1;
		words[n++] = p;
		p = strchr(p, ' ');
		if (!p)
			return n;
		*p++ = '\0';
	}
}

/* NULL when `path` may be a claim's socket: with a claims directory configured, its last
 * component is a name (not . or ..) and its parent directory, symlinks resolved, is the
 * claims directory (resolved too) or one below it. Otherwise why not. */
static const char *
outside_claims_dir(struct layout *layout, const char *path)
{
	const char *slash = strrchr(path, '/'), *base = slash + 1;
	char *parent, *resolved = NULL, *root = NULL;
	const char *why = NULL;
	size_t n;

	if (!layout->claims_dir)
		return NULL;
	if (!*base || strcmp(base, ".") == 0 || strcmp(base, "..") == 0)
		return "the socket's name must not be empty, . or ..";
	parent = strndup(path, slash == path ? 1 : (size_t)(slash - path));
	if (!parent)
		return "out of memory";
	root = realpath(layout->claims_dir, NULL);
	resolved = realpath(parent, NULL);
	if (!root)
		why = "the claims directory does not exist";
	else if (!resolved)
		why = "the socket's directory does not exist";
	if (!why) {
		n = strcmp(root, "/") == 0 ? 0 : strlen(root);
		if (strncmp(resolved, root, n) != 0 || (resolved[n] != '\0' && resolved[n] != '/'))
			why = "the socket must be under the claims directory";
	}
	free(parent);
	free(root);
	free(resolved);
	return why;
}

static bool
path_in_use(struct layout *layout, const char *path)
{
	struct claim *claim;

	if (strcmp(path, layout->control.sock.path) == 0 ||
	    strcmp(path, layout->capture.sock.path) == 0)
		return true;
	wl_list_for_each(claim, &layout->claims, link) {
		if (strcmp(claim->sock.path, path) == 0)
			return true;
	}
	return false;
}

static bool
control_create(struct conn *conn, char **w)
{
	struct layout *layout = conn->layout;
	struct claim *claim;
	const char *why = NULL;

	if (!valid_claim(w[1]))
		return conn_printf(conn, "ERR bad-claim claim must be 1-%d of [A-Za-z0-9._-]\n",
				   CLAIM_MAX);
	if (!valid_output(w[2]))
		return conn_printf(conn, "ERR bad-output output name must be 1-%d printable bytes\n",
				   OUTPUT_NAME_MAX);
	if (!valid_path(w[3]))
		return conn_printf(conn, "ERR bad-path socket path must be absolute, printable, "
				   "shorter than %zu bytes\n",
				   sizeof(((struct sockaddr_un *)0)->sun_path));
	why = outside_claims_dir(layout, w[3]);
	if (why)
		return conn_printf(conn, "ERR bad-path %s: %s (claims directory %s)\n", w[3],
				   why, layout->claims_dir);
	claim = find_claim(layout, w[1]);
	if (claim) {
		if (strcmp(claim->output, w[2]) == 0 && strcmp(claim->sock.path, w[3]) == 0)
			return conn_printf(conn, "OK\n");
		return conn_printf(conn, "ERR exists claim %s already has output %s socket %s\n",
				   claim->name, claim->output, claim->sock.path);
	}
	if (path_in_use(layout, w[3]))
		return conn_printf(conn, "ERR exists socket path %s is in use\n", w[3]);
	claim = calloc(1, sizeof *claim);
	if (!claim)
		return conn_printf(conn, "ERR io out of memory\n");
	claim->layout = layout;
	strcpy(claim->name, w[1]);
	strcpy(claim->output, w[2]);
	wl_list_init(&claim->clients);
	if (listener_socket_open(&claim->sock, w[3], 0666, &why) < 0) {
		free(claim);
		return conn_printf(conn, "ERR io %s: %s\n", w[3], why);
	}
	claim->sock.source = wl_event_loop_add_fd(
		wl_display_get_event_loop(layout->compositor->wl_display), claim->sock.fd,
		WL_EVENT_READABLE, claim_socket_readable, claim);
	if (!claim->sock.source) {
		listener_socket_close(&claim->sock, true);
		free(claim);
		return conn_printf(conn, "ERR io cannot watch %s\n", w[3]);
	}
	wl_list_insert(layout->claims.prev, &claim->link);
	weston_log("layout: claim %s on output %s at %s\n", claim->name, claim->output,
		   claim->sock.path);
	return conn_printf(conn, "OK\n");
}

static bool
control_remove(struct conn *conn, char **w)
{
	struct claim *claim;

	if (!valid_claim(w[1]))
		return conn_printf(conn, "ERR bad-claim claim must be 1-%d of [A-Za-z0-9._-]\n",
				   CLAIM_MAX);
	claim = find_claim(conn->layout, w[1]);
	if (!claim)
		return conn_printf(conn, "ERR not-found no claim %s\n", w[1]);
	weston_log("layout: removing claim %s (%zu clients)\n", claim->name,
		   claim_client_count(claim));
	claim_destroy(claim);
	return conn_printf(conn, "OK\n");
}

static bool
control_list(struct conn *conn)
{
	struct claim *claim;

	if (!conn_printf(conn, "OK %d\n", wl_list_length(&conn->layout->claims)))
		return false;
	wl_list_for_each(claim, &conn->layout->claims, link) {
		if (!conn_printf(conn, "%s %s %s %zu\n", claim->name, claim->output,
				 claim->sock.path, claim_client_count(claim)))
			return false;
	}
	return true;
}

static bool
control_line(struct conn *conn, char *line)
{
	char *w[5];
	int n = split_words(line, w, 4);

	if (n == 4 && strcmp(w[0], "CREATE") == 0)
		return control_create(conn, w);
	if (n == 2 && strcmp(w[0], "REMOVE") == 0)
		return control_remove(conn, w);
	if (n == 1 && strcmp(w[0], "LIST") == 0)
		return control_list(conn);
	return conn_printf(conn, "ERR bad-request expected CREATE <claim> <output> <path>, "
			   "REMOVE <claim> or LIST\n");
}

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

static void capturer_kick(struct layout *layout, const char *output_name);

static void
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

static bool
capture_line(struct conn *conn, char *line)
{
	char *w[4];
	struct weston_output *output;
	int32_t max_width = 0, max_height = 0;
	int n = split_words(line, w, 3);

	if ((n != 2 && n != 3) || strcmp(w[0], "FRAME") != 0 || !valid_output(w[1]))
		return conn_printf(conn, "ERR bad-request expected FRAME <output> "
				   "[<max-width>x<max-height>]\n");
	if (n == 3 && !parse_bound(w[2], &max_width, &max_height))
		return conn_printf(conn, "ERR bad-request bound must be <max-width>x<max-height>, "
				   "each %d-%d\n", BOUND_MIN, BOUND_MAX);
	output = find_output(conn->layout, w[1]);
	if (!output)
		return conn_printf(conn, "ERR no-output no output named %s\n", w[1]);
	if (conn->pending > 0 && strcmp(conn->output, w[1]) != 0)
		return conn_printf(conn, "ERR busy frames of %s are outstanding\n", conn->output);
	if (conn->pending > 0 && (conn->max_width != max_width || conn->max_height != max_height))
		return conn_printf(conn, "ERR busy frames of %s with another bound are outstanding\n",
				   conn->output);
	if (conn->pending >= MAX_PENDING_FRAMES)
		return conn_printf(conn, "ERR busy %d frames are outstanding\n", conn->pending);
	strcpy(conn->output, w[1]);
	conn->max_width = max_width;
	conn->max_height = max_height;
	conn->pending++;
	capturer_kick(conn->layout, conn->output);
	return true;
}

/* The smallest f >= 1 with ceil(width/f) <= max_width and ceil(height/f) <= max_height. */
static int32_t
downscale_factor(int32_t width, int32_t height, int32_t max_width, int32_t max_height)
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
 * block_width x block_height pixels; the blocks sit side by side from `in`, whose rows are
 * `stride` bytes apart.
 */
static void
box_blocks(uint8_t *out, const uint8_t *in, size_t stride, int32_t count,
	   int32_t block_width, int32_t block_height)
{
	const uint32_t half = (uint32_t)(block_width * block_height) / 2;
	const uint64_t m = reciprocal((uint32_t)(block_width * block_height));
	int32_t i, y, x;

	for (i = 0; i < count; i++, in += (size_t)block_width * 4, out += 4) {
		uint32_t b0 = half, b1 = half, b2 = half, b3 = half;
		const uint8_t *line = in;

		for (y = 0; y < block_height; y++, line += stride) {
			for (x = 0; x < block_width * 4; x += 4) {
				b0 += line[x];
				b1 += line[x + 1];
				b2 += line[x + 2];
				b3 += line[x + 3];
			}
		}
		out[0] = (uint8_t)((b0 * m) >> RECIP_SHIFT);
		out[1] = (uint8_t)((b1 * m) >> RECIP_SHIFT);
		out[2] = (uint8_t)((b2 * m) >> RECIP_SHIFT);
		out[3] = (uint8_t)((b3 * m) >> RECIP_SHIFT);
	}
}

typedef uint8_t bytes16 __attribute__((vector_size(16)));
typedef uint16_t words8 __attribute__((vector_size(16)));
typedef uint16_t words16 __attribute__((vector_size(32)));

/*
 * box_blocks for 2 x 2 blocks (4K to 1080p, 1440p to 720p), three times faster with the
 * compiler's portable vectors (SSE2 or NEON): four output pixels a step, from eight source
 * pixels of each of the two rows widened to 16 bits (four bytes sum to at most 1020).
 */
static void
box_blocks_2x2(uint8_t *out, const uint8_t *in, size_t stride, int32_t count)
{
	int32_t i;

	for (i = 0; i + 4 <= count; i += 4, in += 32, out += 16) {
		bytes16 top[2], bottom[2], mean;
		words16 sums[2];
		words8 left[2], right[2];
		int k;

		memcpy(top, in, 32);
		memcpy(bottom, in + stride, 32);
		for (k = 0; k < 2; k++) {
			sums[k] = __builtin_convertvector(top[k], words16) +
				  __builtin_convertvector(bottom[k], words16);
			/* Each 16-lane sum holds four pixels: add pixels 0 and 1, 2 and 3. */
			left[k] = __builtin_shufflevector(sums[k], sums[k], 0, 1, 2, 3, 8, 9, 10, 11);
			right[k] = __builtin_shufflevector(sums[k], sums[k], 4, 5, 6, 7, 12, 13, 14, 15);
			left[k] = (left[k] + right[k] + 2) >> 2;
		}
		mean = __builtin_convertvector(__builtin_shufflevector(left[0], left[1], 0, 1, 2, 3, 4,
								       5, 6, 7, 8, 9, 10, 11, 12,
								       13, 14, 15),
					       bytes16);
		memcpy(out, &mean, 16);
	}
	box_blocks(out, in, stride, count - i, 2, 2);
}

/* One output row from block_height source rows at `in`: full blocks, then the last one,
 * which the right edge may cut. */
static void
box_row(uint8_t *out, const uint8_t *in, int32_t width, int32_t factor, int32_t block_height)
{
	const size_t stride = (size_t)width * 4;
	const int32_t full = width / factor;
	const int32_t rest = width - full * factor;

	if (factor == 2 && block_height == 2)
		box_blocks_2x2(out, in, stride, full);
	else
		box_blocks(out, in, stride, full, factor, block_height);
	if (rest)
		box_blocks(out + (size_t)full * 4, in + (size_t)full * factor * 4, stride, 1, rest,
			   block_height);
}

/* Writes the frame `in` (width x height packed pixels, top row first) box-filtered by
 * `factor` to `out`: ceil(width/factor) x ceil(height/factor) packed pixels. */
static void
downscale(uint8_t *out, const uint8_t *in, int32_t width, int32_t height, int32_t factor)
{
	const size_t stride = (size_t)width * 4;
	const size_t out_stride = (size_t)((width + factor - 1) / factor) * 4;
	const int32_t out_height = (height + factor - 1) / factor;
	const int32_t last_height = height - (out_height - 1) * factor;
	int32_t j;

	for (j = 0; j < out_height; j++)
		box_row(out + (size_t)j * out_stride, in + (size_t)j * (size_t)factor * stride,
			width, factor, j == out_height - 1 ? last_height : factor);
}

/* Queues the frame `co` holds for `conn`, at its bound; false when the connection must go. */
static bool
capture_frame(struct conn *conn, struct capture_output *co)
{
	const char *name = format_name(co->buffer_format);
	const int32_t full_width = co->buffer_width;
	const int32_t full_height = co->buffer_height;
	int32_t factor = downscale_factor(full_width, full_height, conn->max_width,
					  conn->max_height);
	int32_t width = (full_width + factor - 1) / factor;
	int32_t height = (full_height + factor - 1) / factor;
	size_t stride = (size_t)width * 4;
	size_t size = stride * (size_t)height;
	uint8_t *pixels;

	conn->pending--;
	if (factor > FACTOR_MAX)
		return conn_printf(conn, "ERR io %dx%d does not fit %dx%d\n", full_width,
				   full_height, conn->max_width, conn->max_height);
	pixels = malloc(size);
	if (!pixels)
		return conn_printf(conn, "ERR io out of memory for %zu bytes\n", size);
	if (factor == 1)
		memcpy(pixels, co->pixels, size);
	else
		downscale(pixels, co->pixels, full_width, full_height, factor);
	if (!conn_printf(conn, "FRAME %d %d %zu %s 0 %zu\n", width, height, stride, name, size)) {
		free(pixels);
		return false;
	}
	if (!conn_enqueue(conn, (char *)pixels, size, true))
		return false;
	conn->frame_in_flight = true;
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
capture_buffer_free(struct capture_output *co)
{
	if (co->buffer)
		wl_buffer_destroy(co->buffer);
	if (co->pixels)
		munmap(co->pixels, co->size);
	co->buffer = NULL;
	co->pixels = NULL;
	co->size = 0;
}

/* A shm buffer of the size and format weston announced for the source (1 x 1 XRGB8888
 * before it announced any: the capture then fails or asks to retry); false on failure. */
static bool
capture_buffer_alloc(struct capture_output *co)
{
	const int32_t width = co->width > 0 ? co->width : 1;
	const int32_t height = co->height > 0 ? co->height : 1;
	const uint32_t format = co->drm_format ? co->drm_format : WL_SHM_FORMAT_XRGB8888;
	const size_t size = (size_t)width * 4 * (size_t)height;
	struct wl_shm_pool *pool;
	uint32_t shm_format;
	void *pixels;
	int fd;

	if (co->buffer && co->buffer_width == width && co->buffer_height == height &&
	    co->buffer_format == format)
		return true;
	capture_buffer_free(co);
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
	co->buffer = wl_shm_pool_create_buffer(pool, 0, width, height, width * 4, shm_format);
	wl_shm_pool_destroy(pool);
	close(fd);
	co->pixels = pixels;
	co->size = size;
	co->buffer_width = width;
	co->buffer_height = height;
	co->buffer_format = format;
	return true;
}

/* With no capture connection left the shm buffers go (a 4K output's holds 33 MB); the
 * next request allocates one again. */
static void
capturer_release_idle(struct layout *layout)
{
	struct capture_output *co;

	if (!wl_list_empty(&layout->capture.conns))
		return;
	wl_list_for_each(co, &layout->capturer.outputs, link) {
		if (!co->busy)
			capture_buffer_free(co);
	}
	capturer_flush(&layout->capturer);
}

/* Starts a capture of `output_name` when a connection waits for one and none is running. */
static void
capturer_kick(struct layout *layout, const char *output_name)
{
	struct capturer *capturer = &layout->capturer;
	struct capture_output *co;
	struct conn *conn;
	bool wanted = false;

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
	if (!co || !co->source || co->busy)
		return; /* started when weston names the output, or when this capture ends */
	if (co->drm_format && !format_name(co->drm_format)) {
		capture_fail_output(layout, output_name, "unsupported capture format");
		return;
	}
	if (!capture_buffer_alloc(co)) {
		capture_fail_output(layout, output_name, "cannot allocate a capture buffer");
		return;
	}
	weston_capture_source_v1_capture(co->source, co->buffer);
	co->busy = true;
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

static void
source_complete(void *data, struct weston_capture_source_v1 *source)
{
	struct capture_output *co = data;
	struct layout *layout = co->capturer->layout;
	struct conn *conn, *next;

	(void)source;
	co->busy = false;
	wl_list_for_each_safe(conn, next, &layout->capture.conns, link) {
		if (conn->pending == 0 || strcmp(conn->output, co->name) != 0)
			continue;
		if (conn->frame_in_flight) {
			/* The reader is behind: this frame is lost to it. */
			continue;
		}
		if (!capture_frame(conn, co) || !conn_flush(conn))
			conn_destroy(conn);
	}
	capturer_kick(layout, co->name);
	capturer_release_idle(layout);
}

static void
source_retry(void *data, struct weston_capture_source_v1 *source)
{
	struct capture_output *co = data;

	(void)source;
	co->busy = false;
	capturer_kick(co->capturer->layout, co->name);
	capturer_release_idle(co->capturer->layout);
}

static void
source_failed(void *data, struct weston_capture_source_v1 *source, const char *msg)
{
	struct capture_output *co = data;

	(void)source;
	co->busy = false;
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
capture_output_destroy(struct capture_output *co)
{
	capture_buffer_free(co);
	if (co->source)
		weston_capture_source_v1_destroy(co->source);
	wl_output_release(co->wl_output);
	wl_list_remove(&co->link);
	free(co);
}

static void
wl_output_geometry(void *data, struct wl_output *output, int32_t x, int32_t y,
		   int32_t physical_width, int32_t physical_height, int32_t subpixel,
		   const char *make, const char *model, int32_t transform)
{
	(void)data, (void)output, (void)x, (void)y, (void)physical_width;
	(void)physical_height, (void)subpixel, (void)make, (void)model, (void)transform;
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

static void
capturer_stop(struct capturer *capturer)
{
	struct capture_output *co, *next;

	if (!capturer->display)
		return;
	capturer->running = false;
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

static int
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

/* ---------- connections ---------- */

static void
conn_destroy(struct conn *conn)
{
	struct layout *layout = conn->layout;
	const bool capture = conn->kind == CONN_CAPTURE;

	while (conn->head)
		chunk_pop(conn);
	wl_event_source_remove(conn->source);
	close(conn->fd);
	wl_list_remove(&conn->link);
	free(conn);
	if (capture)
		capturer_release_idle(layout);
}

/* Sends a last error as best it can, then drops the connection. */
static void
conn_abort(struct conn *conn, const char *text)
{
	ssize_t ignored;

	while (conn->head)
		chunk_pop(conn);
	ignored = send(conn->fd, text, strlen(text), MSG_NOSIGNAL | MSG_DONTWAIT);
	(void)ignored;
	conn_destroy(conn);
}

static bool
conn_lines(struct conn *conn)
{
	char *start = conn->in, *nl;
	size_t left = conn->in_len;

	while ((nl = memchr(start, '\n', left))) {
		size_t len = (size_t)(nl - start);
		bool ok;

		size_t consumed = len + 1;

		*nl = '\0';
		if (len > 0 && start[len - 1] == '\r')
			start[--len] = '\0';
		if (strlen(start) != len)
			ok = conn_printf(conn, "ERR bad-request NUL byte in request\n");
		else if (conn->kind == CONN_CONTROL)
			ok = control_line(conn, start);
		else
			ok = capture_line(conn, start);
		if (!ok)
			return false;
		left -= consumed;
		start = nl + 1;
	}
	memmove(conn->in, start, left);
	conn->in_len = left;
	return true;
}

static int
conn_event(int fd, uint32_t mask, void *data)
{
	struct conn *conn = data;
	size_t total = 0;
	ssize_t n;

	if (mask & WL_EVENT_WRITABLE) {
		bool had_frame = conn->frame_in_flight;

		if (!conn_flush(conn)) {
			conn_destroy(conn);
			return 0;
		}
		if (had_frame && !conn->frame_in_flight && conn->pending > 0)
			capturer_kick(conn->layout, conn->output);
	}
	if (!(mask & (WL_EVENT_READABLE | WL_EVENT_HANGUP | WL_EVENT_ERROR)))
		return 0;
	while (total < READ_PER_WAKEUP) {
		n = recv(fd, conn->in + conn->in_len, sizeof conn->in - conn->in_len, MSG_DONTWAIT);
		if (n == 0) {
			conn_flush(conn);
			conn_destroy(conn);
			return 0;
		}
		if ((n < 0 && errno != EAGAIN && errno != EWOULDBLOCK && errno != EINTR)) {
			conn_destroy(conn);
			return 0;
		}
		if (n < 0) {
			if (errno == EINTR)
				continue;
			break;
		}
		total += (size_t)n;
		conn->in_len += (size_t)n;
		if (!conn_lines(conn)) {
			conn_destroy(conn);
			return 0;
		}
		if (conn->in_len == sizeof conn->in) {
			conn_abort(conn, "ERR too-long request line over 1023 bytes\n");
			return 0;
		}
	}
	if (!conn_flush(conn))
		conn_destroy(conn);
	return 0;
}

static int
server_readable(int fd, uint32_t mask, void *data)
{
	struct server *server = data;
	struct conn *conn;
	int i, cfd;

	(void)mask;
	for (i = 0; i < ACCEPTS_PER_WAKEUP; i++) {
		cfd = accept4(fd, NULL, NULL, SOCK_CLOEXEC | SOCK_NONBLOCK);
		if (cfd < 0)
			break;
		if (wl_list_length(&server->conns) >= MAX_CONNECTIONS) {
			close(cfd);
			continue;
		}
		conn = calloc(1, sizeof *conn);
		if (!conn) {
			close(cfd);
			continue;
		}
		conn->layout = server->layout;
		conn->kind = server->kind;
		conn->fd = cfd;
		conn->source = wl_event_loop_add_fd(
			wl_display_get_event_loop(server->layout->compositor->wl_display), cfd,
			WL_EVENT_READABLE, conn_event, conn);
		if (!conn->source) {
			close(cfd);
			free(conn);
			continue;
		}
		wl_list_insert(&server->conns, &conn->link);
		if (!conn_printf(conn, server->kind == CONN_CONTROL ? "LAYOUT 1\n"
								    : "LAYOUT-CAPTURE 1\n") ||
		    !conn_flush(conn))
			conn_destroy(conn);
	}
	return 0;
}

/* ---------- outputs: backgrounds and lifecycle ---------- */

static int
background_label(struct weston_surface *surface, char *buf, size_t len)
{
	(void)surface;
	return snprintf(buf, len, "layout background");
}

static void
background_create(struct layout_output *lo)
{
	struct weston_output *output = lo->output;
	struct weston_curtain_params params = {
		.get_label = background_label,
		.r = 0.0f, .g = 0.0f, .b = 0.0f, .a = 1.0f,
		.pos = output->pos,
		.width = output->width,
		.height = output->height,
		.capture_input = true,
	};

	lo->background = weston_shell_utils_curtain_create(lo->layout->compositor, &params);
	if (lo->background)
		weston_view_move_to_layer(lo->background->view,
					  &lo->layout->background_layer.view_list);
}

static void
background_destroy(struct layout_output *lo)
{
	if (lo->background)
		weston_shell_utils_curtain_destroy(lo->background);
	lo->background = NULL;
}

static void
layer_mask_to_output(struct layout_output *lo)
{
	weston_layer_set_mask(&lo->layer, (int)lo->output->pos.c.x, (int)lo->output->pos.c.y,
			      lo->output->width, lo->output->height);
}

static void
layout_output_add(struct layout *layout, struct weston_output *output)
{
	struct layout_output *lo;

	if (find_layout_output(layout, output))
		return;
	lo = calloc(1, sizeof *lo);
	if (!lo)
		return;
	lo->layout = layout;
	lo->output = output;
	weston_layer_init(&lo->layer, layout->compositor);
	weston_layer_set_position(&lo->layer, WESTON_LAYER_POSITION_NORMAL);
	layer_mask_to_output(lo);
	background_create(lo);
	wl_list_insert(&layout->outputs, &lo->link);
}

static void
layout_output_remove(struct layout_output *lo)
{
	struct conn *conn, *next;
	struct layout_surface *ls;

	wl_list_for_each(ls, &lo->layout->surfaces, link) {
		if (ls->shown_on == lo)
			hide_surface(ls);
	}
	wl_list_for_each_safe(conn, next, &lo->layout->capture.conns, link) {
		if (conn->pending > 0 && strcmp(conn->output, lo->output->name) == 0) {
			capture_fail_pending(conn, "output-gone", lo->output->name);
			if (!conn_flush(conn))
				conn_destroy(conn);
		}
	}
	background_destroy(lo);
	weston_layer_fini(&lo->layer);
	wl_list_remove(&lo->link);
	free(lo);
}

static void
output_created(struct wl_listener *listener, void *data)
{
	struct layout *layout = wl_container_of(listener, layout, output_created);

	layout_output_add(layout, data);
	relayout(layout);
}

static void
output_destroyed(struct wl_listener *listener, void *data)
{
	struct layout *layout = wl_container_of(listener, layout, output_destroyed);
	struct layout_output *lo = find_layout_output(layout, data);

	if (lo)
		layout_output_remove(lo);
	relayout(layout);
}

static void
output_changed(struct layout *layout, struct weston_output *output)
{
	struct layout_output *lo = find_layout_output(layout, output);

	if (lo) {
		layer_mask_to_output(lo);
		background_destroy(lo);
		background_create(lo);
	}
	relayout(layout);
}

static void
output_moved(struct wl_listener *listener, void *data)
{
	struct layout *layout = wl_container_of(listener, layout, output_moved);

	output_changed(layout, data);
}

static void
output_resized(struct wl_listener *listener, void *data)
{
	struct layout *layout = wl_container_of(listener, layout, output_resized);

	output_changed(layout, data);
}

/* ---------- setup and teardown ---------- */

static void
layout_destroy(struct wl_listener *listener, void *data)
{
	struct layout *layout = wl_container_of(listener, layout, destroy);
	struct conn *conn, *cnext;
	struct claim *claim, *knext;
	struct layout_output *lo, *lnext;

	(void)data;
	capturer_stop(&layout->capturer);
	wl_list_for_each_safe(conn, cnext, &layout->control.conns, link)
		conn_destroy(conn);
	wl_list_for_each_safe(conn, cnext, &layout->capture.conns, link)
		conn_destroy(conn);
	wl_list_for_each_safe(claim, knext, &layout->claims, link)
		claim_destroy(claim);
	listener_socket_close(&layout->control.sock, true);
	listener_socket_close(&layout->capture.sock, true);
	wl_list_for_each_safe(lo, lnext, &layout->outputs, link)
		layout_output_remove(lo);
	wl_list_remove(&layout->destroy.link);
	wl_list_remove(&layout->output_created.link);
	wl_list_remove(&layout->output_destroyed.link);
	wl_list_remove(&layout->output_moved.link);
	wl_list_remove(&layout->output_resized.link);
	if (layout->desktop)
		weston_desktop_destroy(layout->desktop);
	weston_layer_fini(&layout->background_layer);
	free(layout->claims_dir);
	free(layout);
}

static int
read_claims_dir(struct layout *layout, struct weston_config_section *section)
{
	char *dir = NULL;
	size_t n;

	weston_config_section_get_string(section, "claims-dir", &dir, NULL);
	if (!dir) {
		weston_log("layout: warning: no [layout] claims-dir= in weston.ini: CREATE accepts "
			   "a socket at any absolute path\n");
		return 0;
	}
	if (dir[0] != '/') {
		weston_log("layout: [layout] claims-dir=%s: must be an absolute path\n", dir);
		free(dir);
		return -1;
	}
	n = strlen(dir);
	while (n > 1 && dir[n - 1] == '/')
		dir[--n] = '\0';
	layout->claims_dir = dir;
	weston_log("layout: claim sockets only under %s\n", dir);
	return 0;
}

static int
open_server(struct layout *layout, struct weston_config_section *section, const char *key,
	    struct server *server, enum conn_kind kind)
{
	char *path = NULL;
	const char *why = NULL;

	server->layout = layout;
	server->kind = kind;
	wl_list_init(&server->conns);
	weston_config_section_get_string(section, key, &path, NULL);
	if (!path) {
		weston_log("layout: no [layout] %s= in weston.ini, that socket is off\n", key);
		return 0;
	}
	if (path[0] != '/' || listener_socket_open(&server->sock, path, 0660, &why) < 0) {
		weston_log("layout: [layout] %s=%s: %s\n", key, path,
			   why ? why : "must be an absolute path");
		free(path);
		return -1;
	}
	free(path);
	server->sock.source = wl_event_loop_add_fd(
		wl_display_get_event_loop(layout->compositor->wl_display), server->sock.fd,
		WL_EVENT_READABLE, server_readable, server);
	if (!server->sock.source) {
		listener_socket_close(&server->sock, true);
		return -1;
	}
	weston_log("layout: %s listening at %s\n", key, server->sock.path);
	return 0;
}

WL_EXPORT int
wet_shell_init(struct weston_compositor *ec, int *argc, char *argv[])
{
	struct layout *layout;
	struct weston_config_section *section;
	struct weston_output *output;

	(void)argc;
	(void)argv;
	layout = calloc(1, sizeof *layout);
	if (!layout)
		return -1;
	if (!weston_compositor_add_destroy_listener_once(ec, &layout->destroy, layout_destroy)) {
		free(layout);
		return -1;
	}
	layout->compositor = ec;
	wl_list_init(&layout->claims);
	wl_list_init(&layout->outputs);
	wl_list_init(&layout->surfaces);
	wl_list_init(&layout->control.conns);
	wl_list_init(&layout->capture.conns);
	wl_list_init(&layout->capturer.outputs);
	layout->control.sock.fd = layout->capture.sock.fd = -1;
	weston_layer_init(&layout->background_layer, ec);
	weston_layer_set_position(&layout->background_layer, WESTON_LAYER_POSITION_BACKGROUND);

	layout->output_created.notify = output_created;
	wl_signal_add(&ec->output_created_signal, &layout->output_created);
	layout->output_destroyed.notify = output_destroyed;
	wl_signal_add(&ec->output_destroyed_signal, &layout->output_destroyed);
	layout->output_moved.notify = output_moved;
	wl_signal_add(&ec->output_moved_signal, &layout->output_moved);
	layout->output_resized.notify = output_resized;
	wl_signal_add(&ec->output_resized_signal, &layout->output_resized);
	wl_list_for_each(output, &ec->output_list, link)
		layout_output_add(layout, output);

	layout->desktop = weston_desktop_create(ec, &desktop_api, layout);
	if (!layout->desktop)
		goto fail;
	section = weston_config_get_section(wet_get_config(ec), "layout", NULL, NULL);
	if (read_claims_dir(layout, section) < 0)
		goto fail;
	if (open_server(layout, section, "control-socket", &layout->control, CONN_CONTROL) < 0 ||
	    open_server(layout, section, "capture-socket", &layout->capture, CONN_CAPTURE) < 0)
		goto fail;
	if (layout->capture.sock.fd >= 0 && capturer_start(&layout->capturer, layout) < 0) {
		weston_log("layout: cannot start the capture client\n");
		goto fail;
	}
	return 0;

fail:
	weston_log("layout: shell initialisation failed\n");
	/* The destroy listener frees everything once weston tears the compositor down. */
	return -1;
}
