/*
 * A monitor plugged into a connector weston does not drive joins without a restart: after
 * PROBE's forced re-detection, the DRM backend is asked to re-read each head that has no
 * output and whose connection state the kernel now reports differently, and weston's
 * frontend enables an output for it (its `[output]` section's settings, else the monitor's
 * preferred mode, placed right of the others) from the heads_changed call that follows.
 *
 * Why this way. The DRM backend creates a head for every connector at start, connected or
 * not, but re-reads one (status, EDID, modes) only on udevd's re-broadcast of a hotplug,
 * which a pod in its own network namespace never hears; nothing libweston 14 exports re-reads
 * it, and a module cannot refresh the backend's private copy of the connector, which is
 * where an output's mode list comes from. So libweston's DRM backend is rebuilt from
 * Debian's weston source with build-support/weston-drm/drm-head-api.patch, which adds
 * `weston_drm_head_api_v1` (update_head: re-read one head's connector as a hotplug event
 * does). The patch touches drm-backend.so alone; libweston-14.so and the headers the
 * module builds against stay Debian's, so the API's declaration is repeated below when the
 * installed header lacks it.
 *
 * Only heads without an output are re-read: an output whose monitor left keeps its place,
 * claims and mode list, powered off, for that monitor's return (draplugin/node/reprobe.py),
 * where a re-read would make the frontend destroy it. A stock drm-backend.so registers no
 * such API; then the head stays as it was, weston logs why, and the operator restarts
 * weston for the new monitor as before.
 */

#include "layout.h"

#include <libweston/backend-drm.h>

#ifndef WESTON_DRM_HEAD_API_NAME
/* As build-support/weston-drm/drm-head-api.patch declares it; the name carries the version. */
#define WESTON_DRM_HEAD_API_NAME "weston_drm_head_api_v1"
struct weston_drm_head_api {
	int (*update_head)(struct weston_head *head);
};
#endif

static const struct probed *
probed_named(const struct probed *found, uint32_t count, const char *name)
{
	uint32_t i;

	for (i = 0; i < count; i++) {
		if (strcmp(found[i].name, name) == 0)
			return &found[i];
	}
	return NULL;
}

void
join_heads(struct layout *layout, const struct probed *found, uint32_t count)
{
	struct weston_compositor *compositor = layout->compositor;
	const struct weston_drm_head_api *api = NULL;
	struct weston_head *head = NULL;
	bool looked = false;

	while ((head = weston_compositor_iterate_heads(compositor, head))) {
		const char *name = weston_head_get_name(head);
		const struct probed *p = probed_named(found, count, name);
		bool connected;

		if (!p || weston_head_is_enabled(head) || strcmp(p->status, "unknown") == 0)
			continue;
		connected = strcmp(p->status, "connected") == 0;
		if (connected == weston_head_is_connected(head))
			continue;
		if (!looked) {
			api = weston_plugin_api_get(compositor, WESTON_DRM_HEAD_API_NAME,
						    sizeof *api);
			looked = true;
		}
		if (!api) {
			weston_log("layout: %s is %s, but this drm-backend.so has no %s to re-read "
				   "it: weston keeps its old state of the head\n", name, p->status,
				   WESTON_DRM_HEAD_API_NAME);
			return;
		}
		if (api->update_head(head) < 0) {
			weston_log("layout: the DRM backend could not re-read %s: %s\n", name,
				   strerror(errno));
			continue;
		}
		weston_log("layout: %s re-read by the DRM backend: %s\n", name,
			   weston_head_is_connected(head) ? "connected, weston enables its output"
							  : "disconnected");
	}
}
