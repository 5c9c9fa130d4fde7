"""The node publisher: ResourceSlice, Display objects, compositor watchdog."""
