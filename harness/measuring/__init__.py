"""Measuring: load generators, benchmark records, the results matrix, shaped links,
and the peer servers measured beside ours."""
