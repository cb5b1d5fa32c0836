"""Integrations with the trainers people use: one module per library, each importing its library
only when the module itself is imported (``rlpulse.integrations.sb3`` needs stable-baselines3,
``import rlpulse`` does not)."""
