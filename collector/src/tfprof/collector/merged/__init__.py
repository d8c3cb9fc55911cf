"""The merged timeline of stored jobs, read through the read engine a time chunk at a
time: the first pass (``plan``) places every track, the second (``streamed``) makes
each chunk a part the exporters render."""
