"""The simulated node: the whole pod on a plain machine (simulated card, real weston, fake API)."""
