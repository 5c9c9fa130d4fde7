"""The simulated machine: its card and monitors, the i2c buses serving their DDC/CI, the CDI
spec of the card, the checkout it runs from, and the node with its pod (`pod_node`)."""
