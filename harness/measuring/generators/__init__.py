"""Load generators that run outside the Python process (and off the server's cores)."""
