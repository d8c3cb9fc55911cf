"""The timeline half: stored jobs prepared, merged into one TensorFlow-style timeline
(tracks, lanes, layout, names, metadata, op attribution, launch flows, memory levels)."""
