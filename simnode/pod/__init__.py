"""The pod runner: the rendered DaemonSet's pod run on the simulated node as the kubelet runs it."""
