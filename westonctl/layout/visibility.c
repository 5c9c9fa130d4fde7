/*
 * Which globals a client is offered: a claim's client sees the wl_output of its claim's
 * output and no other wl_output, so it learns nothing of the other tenants' monitors and
 * receives none of their events. Every other client (weston's main socket, the module's own
 * capture client) sees every global.
 *
 * libwayland keeps one global filter per display and has no getter for it, so a filter
 * cannot be chained; libweston 14 and weston's frontend install none (the one mention in
 * libweston, touch-calibration.c, only suggests one), so the module's is the only one.
 */

#define _GNU_SOURCE

#include "layout.h"

static bool
global_visible(const struct wl_client *client, const struct wl_global *global, void *data)
{
	struct layout *layout = data;
	struct claim *claim;
	struct weston_head *head;

	if (wl_global_get_interface(global) != &wl_output_interface)
		return true;
	claim = claim_of_client(layout, (struct wl_client *)client);
	if (!claim)
		return true;
	wl_list_for_each(head, &layout->compositor->head_list, compositor_link) {
		if (head->global == global)
			return head->output && head->output->name &&
			       strcmp(head->output->name, claim->output) == 0;
	}
	return false;
}

void
visibility_start(struct layout *layout)
{
	wl_display_set_global_filter(layout->compositor->wl_display, global_visible, layout);
}

void
visibility_stop(struct layout *layout)
{
	wl_display_set_global_filter(layout->compositor->wl_display, NULL, NULL);
}
