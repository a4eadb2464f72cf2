"""KenLM's own binary model files (``build_binary`` output): the format
description (``format``), and reading them as nplm models (``reader``)."""
