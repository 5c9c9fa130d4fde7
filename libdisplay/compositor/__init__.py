"""The compositor side: weston.ini, weston's pid, the layout module's client, Wayland."""
