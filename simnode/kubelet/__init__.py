"""The kubelet's part on the simulated node: the rendered DaemonSet's pod run as the kubelet runs
it (order, restarts, probes, volumes, projected tokens, one launcher per container runtime), the
node's Node object kept Ready, and the DRA plugin's registration and calls."""
