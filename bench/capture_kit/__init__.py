"""What capture_alignment.py sets up and reads: a collector, node daemons on simulated
hosts with skewed clocks, on-demand replaying processes, and what they stored."""
