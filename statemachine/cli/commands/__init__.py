"""One module per ``trial-replay`` command; importing this package registers them all."""
