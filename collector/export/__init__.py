"""Timeline reporters: one per output format."""
