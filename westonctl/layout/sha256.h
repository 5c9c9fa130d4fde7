/* SHA-256, for the digest of a connector's EDID that PROBE answers: the same digest the
 * operator takes of sysfs's `edid` (draplugin/node/hotplug.py), so the two can be compared
 * without the module linking a crypto library. */
#ifndef SHA256_H
#define SHA256_H

#include <stddef.h>
#include <stdint.h>

#define SHA256_BYTES 32

void sha256(const uint8_t *data, size_t len, uint8_t out[SHA256_BYTES]);

#endif
