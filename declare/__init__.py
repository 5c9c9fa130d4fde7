"""The declare binary."""
