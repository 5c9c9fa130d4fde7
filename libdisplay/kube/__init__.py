"""Access to the Kubernetes API: endpoint, config, TLS, errors, watches, and one client per
transport (the standard library's, aiohttp's, lightkube's)."""
