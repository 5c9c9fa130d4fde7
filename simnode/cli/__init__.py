"""The `simnode` command: `up` and the subcommands that act on a running node, what they print,
and the state dir they share."""
