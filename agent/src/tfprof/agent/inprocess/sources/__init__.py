"""Tracer sources: each turns GPU activity into record frames for the hook to send."""
