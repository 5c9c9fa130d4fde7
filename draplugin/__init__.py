"""The draplugin binary."""
