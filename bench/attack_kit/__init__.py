"""What every attack in attacks.py needs: real users, real daemon and collector
processes, traced jobs, and the figures (RSS, fds, threads, records) that tell whether
an attack held."""
