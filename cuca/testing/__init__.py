"""Tools for testing code built on cuca: a replay server and Hypothesis strategies."""
