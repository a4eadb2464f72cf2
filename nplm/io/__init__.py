"""Files: opening plain and compressed inputs and pipes, atomic writes, resource
checks, and nplm's binary container format."""
