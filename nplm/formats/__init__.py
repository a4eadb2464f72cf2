"""File formats: the nplm binary container and foreign model formats."""
