"""The hardware and its formats: EDID, the DRM card in sysfs, DDC/CI and MCCS, modes."""
