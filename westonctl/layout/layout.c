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
 * the module sends `LAYOUT 1`. Claim requests:
 *   CREATE <claim> <output> <socket-path>   -> OK        (idempotent for the same triple)
 *   REMOVE <claim>                          -> OK        (ERR not-found when unknown)
 *   LIST                                    -> OK <n> then n lines
 *                                              `<claim> <output> <socket-path> <clients>`
 * Their errors: `ERR <code> <text>` with code one of bad-request, bad-claim, bad-output,
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
 * Live output configuration (configure.c), on the control socket too:
 *   CONFIGURE <output> [mode=<W>x<H>[@<Hz>]] [transform=<t>] [scale=<n>]
 *             [modeset=1 | power=off]
 *     -> OK <output> mode=<W>x<H>@<mHz> transform=<t> scale=<n> x=<x> y=<y> width=<w>
 *        height=<h> power=<on|off>   (what weston now reports; width/height in global
 *                                      coordinates)
 *     -> ERR <code> <field> <text>
 *   OUTPUTS -> OK <n> then n lines, each as CONFIGURE's answer without "OK " and with
 *        ` modes=<W>x<H>@<mHz>,...` appended (the output's mode list, duplicates dropped)
 * <t> is weston.ini's name: normal, rotate-90, rotate-180, rotate-270, flipped,
 * flipped-rotate-90, flipped-rotate-180 or flipped-rotate-270; <n> an integer 1..8; <Hz> a
 * decimal with at most 3 decimals. Each key at most once; keys absent are left as they are. Every field is validated before anything is
 * applied. The mode comes from the output's mode list: with @Hz the closest refresh within
 * 0.5 Hz, without it the preferred mode if it has that size, else the highest refresh of
 * that size. A mode the output already runs (refresh within 0.5 Hz, if given) is no change.
 * The x11 backend lists only its window's size and takes any size from 128x128 to
 * 8192x8192: there any <W>x<H> is a mode (at <Hz>, else the current refresh).
 * Codes and fields: bad-request request (malformed, unknown or repeated key, modeset other
 * than 1, power other than off, modeset and power together); not-found output; bad-mode mode (malformed, or not offered: the text ends with
 * `offered: <W>x<H>@<Hz>,...`, Hz with three decimals); bad-transform transform;
 * bad-scale scale; unsupported mode (the backend cannot switch modes while running, e.g.
 * headless) or unsupported modeset/power (the backend has no DPMS, e.g. x11, headless): the
 * caller restarts the compositor instead; failed mode (the backend refused the switch;
 * the output was put back as it was, which the text states). Order of application: mode
 * (weston_output_mode_set_native, with the output's scale), scale, transform. After a
 * change, outputs that were right of the changed one keep their distance from its right
 * edge, its layer mask and background follow it, and its claimed surfaces are re-sized to
 * its new size in global coordinates (swapped after a quarter turn; the client gets an
 * xdg_toplevel.configure). modeset=1 forces a full modeset of that one output when no mode
 * changes (a monitor re-plugged on a connector weston drives): a DPMS off and on, which
 * the DRM backend commits with ALLOW_MODESET for that output's CRTC alone; it is answered
 * at once and runs as soon as no page flip of that output is in flight (within 1 s).
 * It also lights an output that power=off turned off (after a mode switch too).
 * power=off turns the output off (weston_output_power_off: DPMS off, no repaint, and weston
 * does not light it again when it wakes from idle): for a monitor unplugged from a
 * connector weston drives, so the output keeps its place, claims and mode list for the
 * same monitor's return.
 *
 * Re-detection (probe.c), on the control socket too:
 *   PROBE -> OK <n> then n lines `<connector> status=<s> edid=<digest>`
 *         -> ERR unsupported probe <text> | ERR failed probe <text>
 * A forced probe of every connector of the card weston drives, issued on weston's own fd
 * (weston is the DRM master, the only client whose probe makes the kernel re-detect), so
 * sysfs and the kernel's connector state are fresh when it answers. <connector> is weston's
 * name for it (`Virtual-2`, `HDMI-A-1`), <s> connected, disconnected or unknown, <digest>
 * the first 16 hex characters of the SHA-256 of its EDID blob (`-` without one). A head
 * without an output whose state changed is then re-read by the DRM backend (join.c), and
 * weston's frontend enables an output for a newly connected one before the next request is
 * read; an output weston drives keeps the mode list it had. `unsupported` when the
 * backend is not DRM (x11, headless) or weston holds no card fd; `failed` when an ioctl
 * failed.
 *
 * What a claim's client sees (visibility.c): it is offered the wl_output global(s) of its
 * claim's output and no other wl_output (none while that output is absent), so another
 * tenant's output change sends it nothing. Clients of the main socket and the module's own
 * capture client see every global.
 *
 * The capture socket (`[layout] capture-socket=PATH`) is described in capture.c.
 *
 * I/O: every socket is non-blocking and driven by wl_event_loop fd sources; each
 * connection has a bounded input buffer and a bounded queue of text replies; a peer that
 * overflows either is disconnected. At most 32 connections per control/capture socket.
 */

#define _GNU_SOURCE

#include "layout.h"

/* ---------- outputs ---------- */

struct weston_output *
find_output(struct layout *layout, const char *name)
{
	struct weston_output *output;

	wl_list_for_each(output, &layout->compositor->output_list, link) {
		if (output->name && strcmp(output->name, name) == 0)
			return output;
	}
	return NULL;
}

struct layout_output *
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

struct claim *
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

/* ---------- claims ---------- */

void
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
int
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

bool
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
int
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

bool
control_line(struct conn *conn, char *line)
{
	char *w[7];
	int n = split_words(line, w, 6);
	bool result;

	if (configure_line(conn, w, n, &result))
		return result;
	if (n == 4 && strcmp(w[0], "CREATE") == 0)
		return control_create(conn, w);
	if (n == 2 && strcmp(w[0], "REMOVE") == 0)
		return control_remove(conn, w);
	if (n == 1 && strcmp(w[0], "LIST") == 0)
		return control_list(conn);
	return conn_printf(conn, "ERR bad-request expected CREATE <claim> <output> <path>, "
			   "REMOVE <claim>, LIST, CONFIGURE <output> [key=value...], OUTPUTS or "
			   "PROBE\n");
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
	configure_output_gone(lo);
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

/* An output's position, size, transform or scale changed: its layer mask and background
 * follow, and claimed surfaces are re-placed and re-sized to it. */
void
layout_output_changed(struct layout *layout, struct weston_output *output)
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

	layout_output_changed(layout, data);
}

static void
output_resized(struct wl_listener *listener, void *data)
{
	struct layout *layout = wl_container_of(listener, layout, output_resized);

	layout_output_changed(layout, data);
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
	visibility_stop(layout);
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
	free(layout->probed);
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

	visibility_start(layout);
	glinfo_report();
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
