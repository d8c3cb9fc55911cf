"""The contract both sides import: record vocabulary, track identity, batch log, trace readers.

Standard library only: the in-process hook imports parts of it inside every traced process.
"""
