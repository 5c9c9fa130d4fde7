"""The capture binary."""
