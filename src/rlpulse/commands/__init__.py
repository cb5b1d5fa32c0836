"""Subcommands of the ``rlpulse`` CLI, one module each (see ``rlpulse.cli.COMMANDS``)."""
