"""Generated documentation: metric reference, key maps, configuration, detection and alert
quality pages, all under ``REFERENCE`` (the runbooks, which alerts link to, stay in docs/)."""

REFERENCE = "docs/reference"  # the generated docs' folder: `rlpulse generate --check` owns it
