"""Python stacks of the traced process: interned frames, the sampler, launch captures."""
