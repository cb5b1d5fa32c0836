"""Importing this module registers the ``"rlpulse"`` backend with verl's ``Tracking``, for
``VERL_USE_EXTERNAL_MODULES=rlpulse.integrations.verl_plugin`` (verl imports the modules named
there when it is imported itself)."""

from rlpulse.integrations.verl import register

register()
