"""rlpulse's version, in one place (the package, ``rl_run_info`` and the CLI read it)."""

__version__ = "0.1.0"
