"""Triton kernels (the TRITON backend). Import these modules only when a GPU is selected:
they import ``triton`` at module level."""
