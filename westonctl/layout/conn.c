/* layout-shell.so's line-protocol connections: the control and capture sockets' listeners,
 * their connections' bounded input and output queues. */

#define _GNU_SOURCE

#include "layout.h"

/* ---------- connection output queue ---------- */


static void
conn_update_mask(struct conn *conn)
{
	uint32_t mask = WL_EVENT_READABLE;

	if (conn->head)
		mask |= WL_EVENT_WRITABLE;
	wl_event_source_fd_update(conn->source, mask);
}

bool
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

void
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
bool
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

bool
conn_printf(struct conn *conn, const char *fmt, ...) __attribute__((format(printf, 2, 3)));

bool
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

/* ---------- connections ---------- */

void
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

int
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
