"""Helpers of the benches that replay one trace as several ranks."""
