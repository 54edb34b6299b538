"""Measuring: load generators, benchmark records, the results matrix, shaped links, perf_analyzer,
and the peer servers measured beside ours."""
