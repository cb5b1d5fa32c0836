"""Generated documentation: metric reference, key maps, configuration, detection and alert
quality pages."""
