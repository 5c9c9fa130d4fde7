/*
 * PROBE on the control socket: the DRM master's re-detection of every connector, without a
 * restart (layout.c's header comment specifies the request).
 *
 * Why here: weston's DRM backend re-reads connectors only on udevd's rebroadcast, which a
 * pod never hears, and libweston exports no re-probe. On a device without HPD interrupts
 * (virtio-gpu) the kernel re-detects only when asked, and it honours a forced probe
 * (DRM_IOCTL_MODE_GETCONNECTOR with count_modes = 0) only from the current DRM master
 * (drm_mode_getconnector: "demoting to read-only probe" otherwise). weston is that master,
 * and this module runs in weston's process, so it asks on weston's own card fd. The probe
 * refreshes the kernel's view (sysfs `status`, `edid`, `modes`) for the operator; then a
 * head without an output whose state changed is re-read by the DRM backend where it can
 * (join.c), so a monitor on a connector weston never drove gets an output without a restart.
 * Outputs weston drives keep the mode list they had.
 *
 * libweston does not export the backend's fd. The DRM backend opens the card through the
 * launcher (libseat's open_device), which leaves an fd on /dev/dri/cardN in this process:
 * the lowest such fd is the primary device's, opened first.
 */

#define _GNU_SOURCE

#include <dirent.h>
#include <limits.h>
#include <sys/ioctl.h>

#include <drm/drm.h>
#include <drm/drm_mode.h>

#include "layout.h"
#include "sha256.h"

#define DIGEST_HEX (sizeof(((struct probed *)0)->digest) - 1)	/* as the operator keeps */
#define PROBE_RETRIES 3	/* a count that grew between an ioctl's two calls: ask again */

/* weston 14's names (libweston/backend-drm/drm.c, connector_type_names), which are its
 * outputs' names: `<type>-<type id>`. */
static const char *const connector_types[] = {
	[DRM_MODE_CONNECTOR_Unknown] = "Unknown",
	[DRM_MODE_CONNECTOR_VGA] = "VGA",
	[DRM_MODE_CONNECTOR_DVII] = "DVI-I",
	[DRM_MODE_CONNECTOR_DVID] = "DVI-D",
	[DRM_MODE_CONNECTOR_DVIA] = "DVI-A",
	[DRM_MODE_CONNECTOR_Composite] = "Composite",
	[DRM_MODE_CONNECTOR_SVIDEO] = "SVIDEO",
	[DRM_MODE_CONNECTOR_LVDS] = "LVDS",
	[DRM_MODE_CONNECTOR_Component] = "Component",
	[DRM_MODE_CONNECTOR_9PinDIN] = "DIN",
	[DRM_MODE_CONNECTOR_DisplayPort] = "DP",
	[DRM_MODE_CONNECTOR_HDMIA] = "HDMI-A",
	[DRM_MODE_CONNECTOR_HDMIB] = "HDMI-B",
	[DRM_MODE_CONNECTOR_TV] = "TV",
	[DRM_MODE_CONNECTOR_eDP] = "eDP",
	[DRM_MODE_CONNECTOR_VIRTUAL] = "Virtual",
	[DRM_MODE_CONNECTOR_DSI] = "DSI",
	[DRM_MODE_CONNECTOR_DPI] = "DPI",
};
#define CONNECTOR_TYPES (sizeof(connector_types) / sizeof(connector_types[0]))


static int
xioctl(int fd, unsigned long request, void *arg)
{
	int ret;

	do
		ret = ioctl(fd, request, arg);
	while (ret == -1 && (errno == EINTR || errno == EAGAIN));
	return ret;
}

/* The lowest fd of this process open on /dev/dri/card<N>; -1 when none. */
static int
find_card_fd(char *path, size_t path_len)
{
	DIR *dir = opendir("/proc/self/fd");
	struct dirent *entry;
	int best = -1;

	if (!dir)
		return -1;
	while ((entry = readdir(dir))) {
		char link[64], target[PATH_MAX];
		ssize_t n;
		int fd = atoi(entry->d_name);

		if (entry->d_name[0] < '0' || entry->d_name[0] > '9' || fd == dirfd(dir))
			continue;
		snprintf(link, sizeof link, "/proc/self/fd/%d", fd);
		n = readlink(link, target, sizeof target - 1);
		if (n <= 0)
			continue;
		target[n] = '\0';
		if (strncmp(target, "/dev/dri/card", 13) != 0 || (best >= 0 && fd > best))
			continue;
		best = fd;
		snprintf(path, path_len, "%s", target);
	}
	closedir(dir);
	return best;
}

/* The connector ids of the card; NULL (errno set) on failure. */
static uint32_t *
connector_ids(int fd, uint32_t *count)
{
	int attempt;

	for (attempt = 0; attempt < PROBE_RETRIES; attempt++) {
		struct drm_mode_card_res res = { 0 };
		uint32_t *ids;

		if (xioctl(fd, DRM_IOCTL_MODE_GETRESOURCES, &res) < 0)
			return NULL;
		ids = calloc(res.count_connectors + 1, sizeof *ids);
		if (!ids)
			return NULL;
		*count = res.count_connectors;
		memset(&res, 0, sizeof res);
		res.count_connectors = *count;
		res.connector_id_ptr = (uint64_t)(uintptr_t)ids;
		if (xioctl(fd, DRM_IOCTL_MODE_GETRESOURCES, &res) == 0 &&
		    res.count_connectors <= *count) {
			*count = res.count_connectors;
			return ids;
		}
		free(ids);
	}
	errno = EAGAIN;
	return NULL;
}

/* The EDID blob's id among the connector's properties (0: none). */
static uint64_t
edid_blob(int fd, const uint32_t *props, const uint64_t *values, uint32_t count)
{
	uint32_t i;

	for (i = 0; i < count; i++) {
		struct drm_mode_get_property prop = { .prop_id = props[i] };

		if (xioctl(fd, DRM_IOCTL_MODE_GETPROPERTY, &prop) == 0 &&
		    strcmp(prop.name, "EDID") == 0)
			return values[i];
	}
	return 0;
}

static void
digest_blob(int fd, uint64_t blob_id, char digest[DIGEST_HEX + 1])
{
	struct drm_mode_get_blob blob = { .blob_id = (uint32_t)blob_id };
	uint8_t hash[SHA256_BYTES];
	uint8_t *data;
	size_t i;

	strcpy(digest, "-");
	if (blob_id == 0 || xioctl(fd, DRM_IOCTL_MODE_GETPROPBLOB, &blob) < 0 || !blob.length)
		return;
	data = malloc(blob.length);
	if (!data)
		return;
	blob.data = (uint64_t)(uintptr_t)data;
	if (xioctl(fd, DRM_IOCTL_MODE_GETPROPBLOB, &blob) == 0) {
		sha256(data, blob.length, hash);
		for (i = 0; i < DIGEST_HEX / 2; i++)
			snprintf(digest + 2 * i, 3, "%02x", hash[i]);
	}
	free(data);
}

/* A forced probe of one connector (count_modes = 0: the master's re-detection), then its
 * properties read without probing again (count_modes = 1). */
static bool
probe_connector(int fd, uint32_t id, struct probed *out)
{
	int attempt;

	for (attempt = 0; attempt < PROBE_RETRIES; attempt++) {
		struct drm_mode_get_connector conn = { .connector_id = id };
		struct drm_mode_modeinfo one_mode;
		uint32_t *props;
		uint64_t *values;
		uint32_t count;

		if (xioctl(fd, DRM_IOCTL_MODE_GETCONNECTOR, &conn) < 0)
			return false;
		count = conn.count_props;
		props = calloc(count + 1, sizeof *props);
		values = calloc(count + 1, sizeof *values);
		if (!props || !values) {
			free(props);
			free(values);
			return false;
		}
		memset(&conn, 0, sizeof conn);
		conn.connector_id = id;
		conn.count_modes = 1;
		conn.modes_ptr = (uint64_t)(uintptr_t)&one_mode;
		conn.count_props = count;
		conn.props_ptr = (uint64_t)(uintptr_t)props;
		conn.prop_values_ptr = (uint64_t)(uintptr_t)values;
		if (xioctl(fd, DRM_IOCTL_MODE_GETCONNECTOR, &conn) < 0 || conn.count_props > count) {
			free(props);
			free(values);
			continue;
		}
		snprintf(out->name, sizeof out->name, "%s-%u",
			 conn.connector_type < CONNECTOR_TYPES && connector_types[conn.connector_type]
				 ? connector_types[conn.connector_type] : "UNNAMED",
			 conn.connector_type_id);
		out->status = conn.connection == 1 ? "connected"
			      : conn.connection == 2 ? "disconnected" : "unknown";
		digest_blob(fd, edid_blob(fd, props, values, conn.count_props), out->digest);
		free(props);
		free(values);
		return true;
	}
	return false;
}

/* The operator probes on every resync: weston's log shows only what changed since the
 * last probe (every connector the first time). */
static void
log_if_changed(struct layout *layout, const char *path, const struct probed *found,
	       uint32_t count)
{
	uint32_t i;

	for (i = 0; i < count; i++) {
		const struct probed *last = NULL;
		uint32_t j;

		for (j = 0; j < layout->probed_count; j++) {
			if (strcmp(layout->probed[j].name, found[i].name) == 0)
				last = &layout->probed[j];
		}
		if (last && last->status == found[i].status &&
		    strcmp(last->digest, found[i].digest) == 0)
			continue;
		weston_log("layout: probe of %s: %s %s, EDID digest %s\n", path, found[i].name,
			   found[i].status, found[i].digest);
	}
	free(layout->probed);
	layout->probed = calloc(count + 1, sizeof *found);
	layout->probed_count = layout->probed ? count : 0;
	if (layout->probed)
		memcpy(layout->probed, found, count * sizeof *found);
}

static bool
control_probe(struct conn *conn)
{
	struct weston_compositor *compositor = conn->layout->compositor;
	struct probed *found;
	char path[PATH_MAX];
	uint32_t *ids, count = 0, i;
	int fd;
	bool ok;

	if (!compositor->primary_backend ||
	    weston_get_backend_type(compositor->primary_backend) != WESTON_BACKEND_DRM)
		return conn_printf(conn, "ERR unsupported probe only the DRM backend drives a card "
				   "to probe\n");
	fd = find_card_fd(path, sizeof path);
	if (fd < 0)
		return conn_printf(conn, "ERR unsupported probe weston holds no /dev/dri/card fd\n");
	ids = connector_ids(fd, &count);
	if (!ids)
		return conn_printf(conn, "ERR failed probe %s: cannot list its connectors: %s\n",
				   path, strerror(errno));
	found = calloc(count + 1, sizeof *found);
	if (!found) {
		free(ids);
		return conn_printf(conn, "ERR failed probe out of memory\n");
	}
	for (i = 0; i < count; i++) {
		if (!probe_connector(fd, ids[i], &found[i])) {
			int err = errno;
			uint32_t id = ids[i];

			free(ids);
			free(found);
			return conn_printf(conn, "ERR failed probe %s: connector %u: %s\n", path, id,
					   strerror(err));
		}
	}
	free(ids);
	log_if_changed(conn->layout, path, found, count);
	join_heads(conn->layout, found, count);
	ok = conn_printf(conn, "OK %u\n", count);
	for (i = 0; ok && i < count; i++)
		ok = conn_printf(conn, "%s status=%s edid=%s\n", found[i].name, found[i].status,
				 found[i].digest);
	free(found);
	return ok;
}

/* PROBE; false when the line is not one (the caller answers). */
bool
probe_line(struct conn *conn, char **w, int n, bool *result)
{
	if (n != 1 || strcmp(w[0], "PROBE") != 0)
		return false;
	*result = control_probe(conn);
	return true;
}
