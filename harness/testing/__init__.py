"""The pytest side of the harness: check outcomes for the matrix, and toy models for tests."""
