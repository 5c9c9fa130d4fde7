"""The cluster the simulated node lives in: the client simnode reaches it with, the embedded fake
with its actors (admin, scheduler, kubelet, a person), or a real one checked before use, and
Prometheus watching the node."""
