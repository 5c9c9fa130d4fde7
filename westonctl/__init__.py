"""The westonctl binary."""
