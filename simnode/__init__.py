"""The simulated node: the whole pod on a plain machine (simulated card, real weston, fake API).

By role: `cli` the `simnode` command (its subcommands, what they print, the state file),
`node` the simulated machine (card, monitors, Xvfb, the node brought up with its pod),
`kubelet` what a kubelet does for it (the pod run from its manifest, volumes, tokens, probes,
the container launchers, the Node object, the DRA plugin's registration and calls), `cluster`
the API server it talks to (the embedded fake and its actors, or a real one).
"""
