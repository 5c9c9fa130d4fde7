/*
 * Live output configuration: the control socket's CONFIGURE and OUTPUTS requests (layout.c's
 * header comment specifies them). One output's mode, transform and scale change while weston
 * and every client keep running; everything is validated before anything is applied, and a
 * failed application puts the output back as it was.
 *
 * libweston 14 gives the pieces but not their glue: weston_output_mode_set_native reflows the
 * outputs to the right and emits output_resized_signal, weston_output_set_scale emits the
 * signal but reflows nothing, weston_output_set_transform does neither. So after any change
 * the module re-places the outputs that were to the right of the changed one itself and runs
 * its own output-changed path (layer mask, background, claimed surfaces re-sized to the
 * output, which sends their clients an xdg_toplevel.configure).
 */

#define _GNU_SOURCE

#include "layout.h"

#define MODE_SIDE_MAX 16384
#define REFRESH_TOLERANCE_MHZ 500
#define MODESET_POLL_MS 2
#define MODESET_WAIT_MS 1000

/* weston.ini's names (its [output] transform key), so one vocabulary runs from the Display's
 * spec and a claim's parameters through this socket to what the operator reports. */
static const char *const transform_names[] = {
	[WL_OUTPUT_TRANSFORM_NORMAL] = "normal",
	[WL_OUTPUT_TRANSFORM_90] = "rotate-90",
	[WL_OUTPUT_TRANSFORM_180] = "rotate-180",
	[WL_OUTPUT_TRANSFORM_270] = "rotate-270",
	[WL_OUTPUT_TRANSFORM_FLIPPED] = "flipped",
	[WL_OUTPUT_TRANSFORM_FLIPPED_90] = "flipped-rotate-90",
	[WL_OUTPUT_TRANSFORM_FLIPPED_180] = "flipped-rotate-180",
	[WL_OUTPUT_TRANSFORM_FLIPPED_270] = "flipped-rotate-270",
};
#define TRANSFORM_COUNT (sizeof(transform_names) / sizeof(transform_names[0]))

struct configure_request {
	bool has_mode, has_transform, has_scale, modeset, power_off;
	int32_t width, height;
	int32_t refresh_mhz;	/* 0: not given */
	uint32_t transform;
	int32_t scale;
	const char *mode_text;
};

static const char *
transform_name(uint32_t transform)
{
	return transform < TRANSFORM_COUNT ? transform_names[transform] : "unknown";
}

/* A positive decimal integer of at most `max`, all digits; -1 otherwise. */
static int32_t
parse_int(const char *s, size_t n, int32_t max)
{
	int64_t v = 0;
	size_t i;

	if (n == 0 || n > 9 || s[0] == '0')
		return -1;
	for (i = 0; i < n; i++) {
		if (s[i] < '0' || s[i] > '9')
			return -1;
		v = v * 10 + (s[i] - '0');
	}
	return v <= max ? (int32_t)v : -1;
}

/* "<Hz>" with up to three decimals, in mHz (1..1000000); -1 when malformed. */
static int32_t
parse_refresh(const char *s)
{
	const char *dot = strchr(s, '.');
	size_t whole_len = dot ? (size_t)(dot - s) : strlen(s);
	int32_t whole = parse_int(s, whole_len, 1000), frac = 0;
	size_t i, digits;

	if (whole < 0)
		return -1;
	if (dot) {
		digits = strlen(dot + 1);
		if (digits == 0 || digits > 3)
			return -1;
		for (i = 0; i < 3; i++) {
			char c = i < digits ? dot[1 + i] : '0';
			if (c < '0' || c > '9')
				return -1;
			frac = frac * 10 + (c - '0');
		}
	}
	return whole * 1000 + frac;
}

static bool
parse_mode(const char *s, struct configure_request *req)
{
	const char *x = strchr(s, 'x'), *at = strchr(s, '@');

	if (!x || (at && at < x))
		return false;
	req->width = parse_int(s, (size_t)(x - s), MODE_SIDE_MAX);
	req->height = parse_int(x + 1, at ? (size_t)(at - x - 1) : strlen(x + 1), MODE_SIDE_MAX);
	req->refresh_mhz = at ? parse_refresh(at + 1) : 0;
	return req->width > 0 && req->height > 0 && req->refresh_mhz >= 0;
}

static bool
parse_transform(const char *s, uint32_t *transform)
{
	uint32_t i;

	for (i = 0; i < TRANSFORM_COUNT; i++) {
		if (strcmp(s, transform_names[i]) == 0) {
			*transform = i;
			return true;
		}
	}
	return false;
}

/* The words after `CONFIGURE <output>`; *ok false when they are not a valid request, which
 * has then been answered with ERR. Returns false when the connection is gone. */
static bool
parse_request(struct conn *conn, char **w, int n, struct configure_request *req, bool *ok)
{
	int i;

	memset(req, 0, sizeof *req);
	*ok = false;
	for (i = 0; i < n; i++) {
		char *eq = strchr(w[i], '=');
		const char *key = w[i], *value;

		if (!eq)
			return conn_printf(conn, "ERR bad-request request expected key=value, "
					   "got %s\n", w[i]);
		*eq = '\0';
		value = eq + 1;
		if (strcmp(key, "mode") == 0 && !req->has_mode) {
			req->has_mode = true;
			req->mode_text = value;
			if (!parse_mode(value, req))
				return conn_printf(conn, "ERR bad-mode mode must be <W>x<H>[@<Hz>] "
						   "(sides 1-%d, Hz with at most 3 decimals), got %s\n",
						   MODE_SIDE_MAX, value);
		} else if (strcmp(key, "transform") == 0 && !req->has_transform) {
			req->has_transform = true;
			if (!parse_transform(value, &req->transform))
				return conn_printf(conn, "ERR bad-transform transform must be one of "
						   "normal rotate-90 rotate-180 rotate-270 flipped "
						   "flipped-rotate-90 flipped-rotate-180 "
						   "flipped-rotate-270, got %s\n", value);
		} else if (strcmp(key, "scale") == 0 && !req->has_scale) {
			req->has_scale = true;
			req->scale = parse_int(value, strlen(value), 8);
			if (req->scale < 1)
				return conn_printf(conn, "ERR bad-scale scale must be an integer 1-8, "
						   "got %s\n", value);
		} else if (strcmp(key, "modeset") == 0 && !req->modeset) {
			if (strcmp(value, "1") != 0)
				return conn_printf(conn, "ERR bad-request request modeset must be 1, got %s\n",
						   value);
			req->modeset = true;
		} else if (strcmp(key, "power") == 0 && !req->power_off) {
			if (strcmp(value, "off") != 0)
				return conn_printf(conn, "ERR bad-request request power must be off "
						   "(modeset=1 powers an output on), got %s\n", value);
			req->power_off = true;
		} else {
			return conn_printf(conn, "ERR bad-request request unknown or repeated key "
					   "%s (mode, transform, scale, modeset, power)\n", key);
		}
	}
	if (req->modeset && req->power_off)
		return conn_printf(conn, "ERR bad-request request modeset=1 powers the output on, "
				   "power=off off: not both\n");
	*ok = true;
	return true;
}

/* Backends whose output is a window take any size and list only the current one. */
static bool
takes_any_size(struct weston_output *output)
{
	return output->backend && weston_get_backend_type(output->backend) == WESTON_BACKEND_X11;
}

/* The mode of `output->mode_list` the request names: with a refresh the closest one within
 * REFRESH_TOLERANCE_MHZ, without one the preferred mode when it has that size, else the
 * highest refresh of that size. NULL when none. */
static struct weston_mode *
find_mode(struct weston_output *output, int32_t width, int32_t height, int32_t refresh_mhz)
{
	struct weston_mode *mode, *best = NULL;
	int32_t best_delta = INT32_MAX;

	wl_list_for_each(mode, &output->mode_list, link) {
		if (mode->width != width || mode->height != height)
			continue;
		if (refresh_mhz > 0) {
			int32_t delta = (int32_t)llabs((int64_t)mode->refresh - refresh_mhz);
			if (delta <= REFRESH_TOLERANCE_MHZ && delta < best_delta) {
				best = mode;
				best_delta = delta;
			}
		} else if (mode->flags & WL_OUTPUT_MODE_PREFERRED) {
			return mode;
		} else if (!best || mode->refresh > best->refresh) {
			best = mode;
		}
	}
	return best;
}

/* The mode to pass to weston_output_mode_set_native: an entry of mode_list (the DRM backend
 * reads its own struct around the weston_mode it is given, so nothing else will do), or on
 * a backend that takes any size the module's own mode for this output, which must outlive
 * the call because libweston keeps the pointer as the output's native mode. */
static struct weston_mode *
mode_for(struct layout_output *lo, int32_t width, int32_t height, int32_t refresh_mhz)
{
	struct weston_mode *mode = find_mode(lo->output, width, height, refresh_mhz);

	if (mode || !takes_any_size(lo->output))
		return mode;
	lo->any_size_mode.width = width;
	lo->any_size_mode.height = height;
	lo->any_size_mode.refresh = refresh_mhz > 0 ? (uint32_t)refresh_mhz
						      : lo->output->current_mode->refresh;
	lo->any_size_mode.flags = WL_OUTPUT_MODE_CURRENT;
	return &lo->any_size_mode;
}

static bool
print_state(struct conn *conn, const char *prefix, struct weston_output *output, bool modes)
{
	struct weston_mode *m = output->current_mode, *mode;
	char list[LINE_MAX_BYTES * 4];
	size_t used = 0;
	int32_t last_w = 0, last_h = 0;
	uint32_t last_r = 0;

	list[0] = '\0';
	if (modes) {
		wl_list_for_each(mode, &output->mode_list, link) {
			int written;

			/* The DRM backend lists a mode once per flag combination. */
			if (mode->width == last_w && mode->height == last_h && mode->refresh == last_r)
				continue;
			last_w = mode->width;
			last_h = mode->height;
			last_r = mode->refresh;
			written = snprintf(list + used, sizeof list - used, "%s%dx%d@%d",
					   used ? "," : "", mode->width, mode->height, mode->refresh);
			if (written < 0 || (size_t)written >= sizeof list - used) {
				list[used] = '\0';	/* whole modes only */
				break;
			}
			used += (size_t)written;
		}
	}
	return conn_printf(conn, "%s%s mode=%dx%d@%d transform=%s scale=%d x=%d y=%d width=%d "
			   "height=%d power=%s%s%s\n", prefix, output->name, m->width, m->height,
			   m->refresh, transform_name(output->transform), output->current_scale,
			   (int)output->pos.c.x, (int)output->pos.c.y, output->width, output->height,
			   output->power_state == WESTON_OUTPUT_POWER_NORMAL ? "on" : "off",
			   modes ? " modes=" : "", list);
}

/* `offered: WxH@Hz,...` for a bad-mode answer, Hz with three decimals. */
static bool
reply_not_offered(struct conn *conn, struct weston_output *output, const char *value)
{
	char list[LINE_MAX_BYTES * 4];
	struct weston_mode *mode;
	size_t used = 0;

	list[0] = '\0';
	wl_list_for_each(mode, &output->mode_list, link) {
		char item[48];
		int written = snprintf(item, sizeof item, "%dx%d@%d.%03d", mode->width,
				       mode->height, mode->refresh / 1000, mode->refresh % 1000);

		if (written < 0 || strstr(list, item))
			continue;
		if (used + (size_t)written + 2 >= sizeof list)
			break;
		used += (size_t)snprintf(list + used, sizeof list - used, "%s%s", used ? "," : "",
					 item);
	}
	return conn_printf(conn, "ERR bad-mode mode %s is not offered by %s: offered: %s\n", value,
			   output->name, list);
}

struct placement {
	struct weston_output *output;
	struct weston_coord_global pos;
};

/* Outputs that sat right of `changed` before the change keep their distance from its right
 * edge: weston's own reflow (which it skips after a frontend moved an output, and never does
 * for a scale or transform change) shifts by the width delta the same way. Idempotent. */
static void
replace_right_of(struct layout *layout, struct weston_output *changed,
		 const struct placement *before, int count, double old_right)
{
	double delta = changed->pos.c.x + changed->width - old_right;
	int i;

	for (i = 0; i < count; i++) {
		struct weston_coord_global pos = before[i].pos;

		if (before[i].output == changed || pos.c.x < old_right)
			continue;
		if (!find_layout_output(layout, before[i].output))
			continue;
		pos.c.x += delta;
		if (before[i].output->pos.c.x != pos.c.x)
			weston_output_set_position(before[i].output, pos);
	}
}

static void
modeset_now(struct weston_output *output)
{
	/* A DPMS off and on: the DRM backend commits the disable at once, and the next repaint
	 * sees DPMS differ and commits with ALLOW_MODESET for this output's CRTC alone (a mode
	 * switch would instead invalidate the whole card's state). */
	weston_log("layout: %s: full modeset (power off and on)\n", output->name);
	weston_output_power_off(output);
	weston_output_power_on(output);
	weston_output_schedule_repaint(output);
}

/* FORCED_OFF: weston neither repaints the output nor powers it on when it wakes from idle;
 * only a modeset=1 (weston_output_power_on) lights it again. */
static void
power_off_now(struct layout_output *lo)
{
	if (lo->modeset_timer)
		wl_event_source_timer_update(lo->modeset_timer, 0);
	weston_log("layout: %s: powered off\n", lo->output->name);
	weston_output_power_off(lo->output);
}

static int
modeset_poll(void *data)
{
	struct layout_output *lo = data;

	lo->modeset_waited_ms += MODESET_POLL_MS;
	if (lo->output->repaint_status == REPAINT_AWAITING_COMPLETION &&
	    lo->modeset_waited_ms < MODESET_WAIT_MS) {
		wl_event_source_timer_update(lo->modeset_timer, MODESET_POLL_MS);
		return 0;
	}
	modeset_now(lo->output);
	return 0;
}

/* With a page flip in flight the backend would park the DPMS off until the flip completes
 * and the power on right after would cancel it, so the modeset waits for the flip. */
static void
start_modeset(struct layout_output *lo)
{
	struct wl_event_loop *loop = wl_display_get_event_loop(lo->layout->compositor->wl_display);

	if (lo->output->repaint_status != REPAINT_AWAITING_COMPLETION) {
		modeset_now(lo->output);
		return;
	}
	if (!lo->modeset_timer)
		lo->modeset_timer = wl_event_loop_add_timer(loop, modeset_poll, lo);
	if (!lo->modeset_timer) {
		modeset_now(lo->output);
		return;
	}
	lo->modeset_waited_ms = 0;
	wl_event_source_timer_update(lo->modeset_timer, MODESET_POLL_MS);
}

/* The request's mode is the one the output runs (a refresh within tolerance, if given). */
static bool
is_current(struct weston_output *output, const struct configure_request *req)
{
	const struct weston_mode *m = output->current_mode;

	return m->width == req->width && m->height == req->height &&
	       (req->refresh_mhz == 0 ||
		llabs((int64_t)m->refresh - req->refresh_mhz) <= REFRESH_TOLERANCE_MHZ);
}

static bool
control_configure(struct conn *conn, char **w, int n)
{
	struct layout *layout = conn->layout;
	struct configure_request req;
	struct weston_output *output, *other;
	struct layout_output *lo;
	struct weston_mode *mode = NULL, *old_mode;
	struct weston_mode old_values;
	struct placement *before;
	uint32_t old_transform;
	int32_t old_scale;
	double old_right;
	int count = 0, i = 0;
	bool ok, keep;

	if (!valid_output(w[1]))
		return conn_printf(conn, "ERR not-found output an output name is 1-%d printable "
				   "bytes\n", OUTPUT_NAME_MAX);
	keep = parse_request(conn, w + 2, n - 2, &req, &ok);
	if (!ok)
		return keep;
	output = find_output(layout, w[1]);
	lo = output ? find_layout_output(layout, output) : NULL;
	if (!lo || !output->current_mode)
		return conn_printf(conn, "ERR not-found output no enabled output %s\n", w[1]);
	if (req.has_mode && !is_current(output, &req)) {
		if (!output->switch_mode)
			return conn_printf(conn, "ERR unsupported mode %s: its backend cannot switch "
					   "modes while running\n", output->name);
		mode = mode_for(lo, req.width, req.height, req.refresh_mhz);
		if (!mode)
			return reply_not_offered(conn, output, req.mode_text);
	}
	if (req.modeset && !mode && !output->set_dpms)
		return conn_printf(conn, "ERR unsupported modeset %s cannot be power-cycled "
				   "(the backend has no DPMS)\n", output->name);
	if (req.power_off && !output->set_dpms)
		return conn_printf(conn, "ERR unsupported power %s cannot be powered off "
				   "(the backend has no DPMS)\n", output->name);

	wl_list_for_each(other, &layout->compositor->output_list, link)
		count++;
	before = calloc((size_t)count, sizeof *before);
	if (!before)
		return conn_printf(conn, "ERR failed request out of memory\n");
	wl_list_for_each(other, &layout->compositor->output_list, link) {
		before[i].output = other;
		before[i++].pos = other->pos;
	}
	old_right = output->pos.c.x + output->width;
	old_mode = output->current_mode;
	old_values = *old_mode;
	old_transform = output->transform;
	old_scale = output->current_scale;

	if (mode && weston_output_mode_set_native(output, mode, output->current_scale) < 0) {
		/* The backend may have taken the new mode as current before failing. */
		struct weston_mode *back = mode_for(lo, old_values.width, old_values.height,
						    old_values.refresh);
		weston_log("layout: %s: switching to %dx%d@%d failed, putting %dx%d@%d back\n",
			   output->name, mode->width, mode->height, mode->refresh,
			   old_values.width, old_values.height, old_values.refresh);
		if (back && (output->current_mode != old_mode ||
			     output->current_mode->width != old_values.width ||
			     output->current_mode->height != old_values.height))
			weston_output_mode_set_native(output, back, old_scale);
		replace_right_of(layout, output, before, count, old_right);
		layout_output_changed(layout, output);
		free(before);
		return conn_printf(conn, "ERR failed mode %s could not switch to %dx%d@%d; it is "
				   "back at %dx%d@%d\n", output->name, req.width, req.height,
				   mode->refresh, output->current_mode->width,
				   output->current_mode->height, output->current_mode->refresh);
	}
	/* The DRM backend's mode switch invalidates the card's state: its next commit starts
	 * with every plane off and re-adds only the outputs it repaints. Repainting every
	 * output at once is meant to put the other heads in that same commit; left alone,
	 * a head with nothing new to draw could stay dark. */
	if (mode)
		weston_compositor_damage_all(layout->compositor);
	if (req.has_scale && req.scale != output->current_scale)
		weston_output_set_scale(output, req.scale);
	if (req.has_transform && req.transform != output->transform)
		weston_output_set_transform(output, req.transform);
	if (mode || output->transform != old_transform || output->current_scale != old_scale) {
		weston_log("layout: %s now %dx%d@%d transform=%s scale=%d\n", output->name,
			   output->current_mode->width, output->current_mode->height,
			   output->current_mode->refresh, transform_name(output->transform),
			   output->current_scale);
		replace_right_of(layout, output, before, count, old_right);
		layout_output_changed(layout, output);
		weston_output_schedule_repaint(output);
	}
	free(before);
	/* A mode switch is a modeset already, unless the output was powered off: then the
	 * power cycle is what lights it again. */
	if (req.modeset && (!mode || output->power_state != WESTON_OUTPUT_POWER_NORMAL))
		start_modeset(lo);
	if (req.power_off && output->power_state == WESTON_OUTPUT_POWER_NORMAL)
		power_off_now(lo);
	return print_state(conn, "OK ", output, false);
}

static bool
control_outputs(struct conn *conn)
{
	struct weston_output *output;
	int count = 0;

	wl_list_for_each(output, &conn->layout->compositor->output_list, link) {
		if (output->current_mode)
			count++;
	}
	if (!conn_printf(conn, "OK %d\n", count))
		return false;
	wl_list_for_each(output, &conn->layout->compositor->output_list, link) {
		if (output->current_mode && !print_state(conn, "", output, true))
			return false;
	}
	return true;
}

/* CONFIGURE and OUTPUTS (PROBE is probe.c's); false when the line is none of them (the
 * caller answers). */
bool
configure_line(struct conn *conn, char **w, int n, bool *result)
{
	if (probe_line(conn, w, n, result))
		return true;
	if (n >= 2 && strcmp(w[0], "CONFIGURE") == 0) {
		*result = control_configure(conn, w, n);
		return true;
	}
	if (n == 1 && strcmp(w[0], "OUTPUTS") == 0) {
		*result = control_outputs(conn);
		return true;
	}
	return false;
}

void
configure_output_gone(struct layout_output *lo)
{
	if (lo->modeset_timer)
		wl_event_source_remove(lo->modeset_timer);
	lo->modeset_timer = NULL;
}
