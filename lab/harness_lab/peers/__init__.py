"""Peer embedding servers measured beside Triton on the same cores, generator and bodies."""
