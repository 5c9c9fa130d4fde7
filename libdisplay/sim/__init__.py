"""Simulated hardware for simnode, benches and tests: a card in sysfs, monitors' EDIDs, DDC/CI."""
