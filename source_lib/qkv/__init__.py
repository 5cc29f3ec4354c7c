"""qkv: the shared library of the qkv attention course."""
