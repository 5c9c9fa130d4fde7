"""draplugin's read-only diagnosis: DDC/CI on one bus, and what the operator would write for a
sysfs tree (weston.ini, the ResourceSlice, a claim's CDI spec), through the operator's own
code, with nothing written."""
