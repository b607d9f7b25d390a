"""Fixture: the compiled runtime's stream."""

import primus_turbo.pytorch._C.runtime as runtime

TurboStream = runtime.Stream
