"""Torch implementations (the TORCH backend): run on the CPU, and on a GPU as plain torch ops."""
